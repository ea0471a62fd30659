"""An evaluation's Stop and Delete buttons are drawn as the site's other destructive buttons are (a run's
Stop and Delete, an export's delete: class "danger", red), not as the card's blue Evaluate button."""
import pytest
from django.test import Client

from rlstudio.evaluations import services
from rlstudio.evaluations.models import Evaluation, EvaluationStatus

pytestmark = pytest.mark.django_db


def test_stop_and_delete_are_danger_buttons(alice, run_with_ckpts, data):
    done = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[1], k=2,
                                     max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                     status=EvaluationStatus.SUCCEEDED, results={"checkpoints": [], "prompts": []})
    queued = Evaluation.objects.create(run=run_with_ckpts, owner=alice, dataset=data, checkpoints=[2], k=2,
                                       max_prompts=4, sampling=services.DEFAULT_SAMPLING,
                                       status=EvaluationStatus.QUEUED)
    client = Client()
    client.force_login(alice)
    page = client.get(f"/runs/{run_with_ckpts.pk}/").content.decode()
    assert f'<button type="button" class="eval-delete danger" data-id="{done.pk}">Delete</button>' in page
    assert f'<button type="button" class="eval-stop danger" data-id="{queued.pk}">Stop</button>' in page
