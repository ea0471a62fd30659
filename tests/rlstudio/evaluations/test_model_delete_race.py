"""A catalog model is never deleted under an evaluation launched on it: `model_delete` checks for
queued or running evaluations with the model's row locked, and an evaluation's launch locks that row
(FOR KEY SHARE) before it records the evaluation, so the two are serialized on the model."""
import threading
from types import SimpleNamespace

import pytest
from django.db import OperationalError, connections, transaction

from rlstudio.catalog.errors import CatalogInUse
from rlstudio.catalog.models import ModelAsset
from rlstudio.catalog.services.model_assets import model_delete
from rlstudio.evaluations import services
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.quotas.services import Quotas

S = EvaluationStatus


@pytest.fixture
def data(alice, make_dataset):
    return make_dataset(alice, "eval-data", status="ready")


@pytest.fixture
def model(alice, make_model):
    return make_model(alice, "alice-base", tokenizer_ok=True, visibility="everyone")


@pytest.mark.django_db
def test_an_evaluation_recorded_just_before_the_deletions_lock_is_seen_and_refused(alice, bob, model, data,
                                                                                   monkeypatch):
    """Another user's evaluation created after the caller's permission check but before the model's
    row is locked: the checks run under the lock, so it is seen (before, it was deleted with the model)."""
    created = []

    def atomic(*args, **kwargs):
        created.append(Evaluation.objects.create(owner=bob, model=model, dataset=data, include_base=True, k=1,
                                                 max_prompts=1, status=S.QUEUED))
        return transaction.atomic(*args, **kwargs)

    monkeypatch.setattr("rlstudio.catalog.services.model_assets.transaction", SimpleNamespace(atomic=atomic))
    with pytest.raises(CatalogInUse, match="being evaluated"):
        model_delete(model=model, by=alice)
    assert ModelAsset.objects.filter(pk=model.pk).exists()
    assert Evaluation.objects.get(pk=created[0].pk).status == S.QUEUED


@pytest.mark.django_db
def test_a_launch_on_a_model_deleted_meanwhile_is_refused_on_the_model_field(alice, model, data, published):
    ModelAsset.objects.filter(pk=model.pk).delete()  # deleted after the caller's selector fetched it
    with pytest.raises(services.EvaluationInvalid, match="was deleted") as err:
        services.evaluation_new_for_model(user=alice, model=model, dataset=data, data={"k": 1})
    assert err.value.field == "model"
    assert not Evaluation.objects.exists()


@pytest.mark.django_db
def test_a_deleted_model_is_left_gone(alice, model):
    ModelAsset.objects.filter(pk=model.pk).delete()
    model_delete(model=model, by=alice)  # another request deleted it first: nothing to do, no 500


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_launch_holds_its_models_row_against_a_deletion(alice, bob, model, data, published,
                                                                      monkeypatch):
    """While bob's launch records his evaluation (here: when it takes his quota lock), the model's row
    cannot be locked for deletion: `model_delete` would wait for the launch, then see the evaluation."""
    seen = []
    original = Quotas.lock_owner

    def try_delete_lock():
        try:
            with connections["default"].cursor() as cur:
                cur.execute("SELECT 1 FROM catalog_modelasset WHERE id = %s FOR UPDATE NOWAIT", [model.pk])
            seen.append("locked for deletion")
        except OperationalError:
            seen.append("held by the launch")
        finally:
            connections.close_all()

    def lock_owner(self, *, user):
        original(self, user=user)
        if not seen:
            thread = threading.Thread(target=try_delete_lock)
            thread.start()
            thread.join(30)

    monkeypatch.setattr(Quotas, "lock_owner", lock_owner)
    ev = services.evaluation_new_for_model(user=bob, model=model, dataset=data, data={"k": 1})
    assert seen == ["held by the launch"]
    with pytest.raises(CatalogInUse, match="being evaluated"):
        model_delete(model=model, by=alice)
    assert Evaluation.objects.filter(pk=ev.pk).exists()
