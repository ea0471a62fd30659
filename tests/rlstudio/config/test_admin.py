"""Every model has an admin page that renders (list with search and filters, and a row's change page)."""
import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlstudio.accounts.models import Team
from rlstudio.accounts.services import api_token_create
from rlstudio.quotas.models import GpuHoursSpent, TeamQuota
from rlstudio.runs.models import RunConfig
from rlstudio.registry.models import RewardFunction, ToolSet
from rlstudio.telemetry.models import MemoryPoint, MetricRow, RunEvent, RunIngestCount, RunRetention, Sample

pytestmark = pytest.mark.django_db
OUR_APPS = {"accounts", "catalog", "runs", "telemetry", "quotas", "registry"}


def test_every_model_is_registered_and_renders(staff, alice, make_run):
    run = make_run(alice)
    now = timezone.now()
    RunEvent.objects.create(run=run, seq=1, type="metrics", time=now)
    MetricRow.objects.create(run=run, step=1, time=now, metrics={"critic/score/mean": 0.5})
    Sample.objects.create(run=run, seq=1, step=1, uid="p0", index=0, reward=1.0)
    MemoryPoint.objects.create(run=run, seq=1, time=now, phase="rollout", rss=123)
    api_token_create(user=alice, name="t")
    RunConfig.objects.create(owner=alice, name="base", config={"a": 1})
    RunRetention.objects.create(run=run, mode="per_step", k=4)
    RunIngestCount.objects.create(run=run, events=1)
    RewardFunction.objects.create(name="a_reward", kind="module", module="trainer.rewards.arith", status="ready")
    ToolSet.objects.create(name="a_tools", config_yaml="tools: []\n", status="ready")
    GpuHoursSpent.objects.create(user=alice, month=now.date().replace(day=1), gpu_microseconds=1, job="run #1 “a”")
    team = Team.objects.create(name="a-team")
    team.user_set.add(alice)
    TeamQuota.objects.create(team=team, max_gpus=2, gpu_hours_per_month=10)
    client = Client()
    client.force_login(staff)
    models = [m for m in apps.get_models() if m._meta.app_label in OUR_APPS]
    assert len(models) == 18  # accounts.Team included (a proxy of auth.Group), and quotas.TeamQuota
    for model in models:
        assert admin.site.is_registered(model), model
        info = (model._meta.app_label, model._meta.model_name)
        listing = client.get(reverse("admin:%s_%s_changelist" % info), {"q": "a"})
        assert listing.status_code == 200, model
        obj = model.objects.first()
        change = client.get(reverse("admin:%s_%s_change" % info, args=[obj.pk]))
        assert change.status_code == 200, model
