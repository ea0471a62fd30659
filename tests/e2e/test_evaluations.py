"""An evaluation end to end: API → admission → Celery (the real worker) submits `python -m trainer
evaluate` to the real Ray head → the reconcile (the real beat) stores its results and transcripts →
served. The run's checkpoints come from a 2-step cpu_smoke run of the tiny smoke model written into the
run's own folder under the worker's state directory; the base model and step 2 are evaluated."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from django.contrib.auth import get_user_model

from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.evaluations.models import Evaluation
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_create

from tests.conftest import poll_until

pytestmark = [pytest.mark.django_db(transaction=True)]


def _stuck(ev: Evaluation, ray_head: str, worker: dict) -> str:
    """What an evaluation that did not finish was waiting for: its row, its Ray job (PENDING: no free
    CPU on the head; RUNNING: slow or hung), the head's other live jobs and the worker's log tail."""
    from ray.job_submission import JobSubmissionClient

    def ask(what):
        try:
            return what()
        except Exception as err:  # noqa: BLE001 - a diagnostic, never the failure itself
            return f"({type(err).__name__}: {err})"

    client = ask(lambda: JobSubmissionClient(ray_head))
    live = ask(lambda: [(j.submission_id, str(j.status)) for j in client.list_jobs()
                        if str(j.status).split(".")[-1] in ("PENDING", "RUNNING")])
    job = ask(lambda: (lambda j: f"{j.status} {j.message!r}")(client.get_job_info(ev.ray_submission_id))
              if ev.ray_submission_id else "not submitted")
    ray_part = f"its Ray job: {job}; live jobs on the head: {live}"
    tail = worker["log"].read_text(errors="replace")[-3000:] if worker["log"].exists() else ""
    return (f"evaluation {ev.pk}: {ev.status}, submission {ev.ray_submission_id!r}, started {ev.started}; "
            f"{ray_part}\nworker log tail:\n{tail}")


def test_base_and_a_checkpoint_evaluated_as_a_ray_job(celery_worker, celery_beat, ray_head, settings, tmp_path):
    from trainer.config import apply_overrides
    from trainer.models.tiny import make_tiny_model
    from trainer.recipes import get_recipe
    from trainer.run import run as train
    from trainer.tasks import arith

    runs = celery_worker["state_dir"] / "runs"
    settings.RUNS_DIR = str(runs)  # the web side checks the steps where the worker will read them
    model = make_tiny_model(tmp_path / "model", preset="smoke", seed=0)
    train_file, test_file = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    for path, rows in ((train_file, arith.make_rl_rows("train", 32, seed=0)),
                       (test_file, arith.make_rl_rows("test", 4, seed=1))):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    alice = get_user_model().objects.create_user(username="eval-alice", password="pw-for-tests-1")
    # No concurrent run while her run is trained here: the session's reconcile (every second) would
    # admit it, and the worker would write into the same runs/<pk> folder train() writes.
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    data = Dataset.objects.create(owner=alice, name="arith-test", file_path=str(test_file), sha256="ef" * 32,
                                  status="ready")
    asset = ModelAsset.objects.create(owner=alice, name="tiny", path=str(model))
    run, _token = run_create(owner=alice, name="eval-e2e", dataset=data, model=asset,
                             config={"trainer": {"total_steps": 2}}, gpus=0)
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "data.train_files": str(train_file), "actor_rollout_ref.model.path": str(model),
        "trainer.default_local_dir": str(runs / str(run.pk)), "trainer.logger": ["jsonl"],
        "trainer.save_freq": 1, "reward.name": "arith"})
    assert train(cfg) == 0
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED  # never admitted: only train() wrote its folder
    Run.objects.filter(pk=run.pk).update(config=cfg.to_dict(), status=RunStatus.SUCCEEDED)
    # Now finished, it holds nothing: room for the one evaluation (counted under the same cap).
    GpuQuota.objects.filter(user=alice).update(max_concurrent_runs=1)
    api = APIClient()
    api.force_authenticate(alice)
    r = api.post(f"/api/v1/runs/{run.pk}/evaluations/",
                 {"checkpoints": [2], "include_base": True, "dataset": data.pk, "k": 2, "max_prompts": 3,
                  "sampling": {"max_new_tokens": 12, "seed": 5}}, format="json")
    assert r.status_code == 202, r.content
    assert r.json()["status"] == "running"  # alice runs nothing else: admitted at once
    eid = r.json()["id"]
    try:
        poll_until(lambda: Evaluation.objects.get(pk=eid).status in ("succeeded", "failed"), timeout=240,
                   what="the evaluation to finish")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_stuck(Evaluation.objects.get(pk=eid), ray_head, celery_worker)}") from None
    body = api.get(f"/api/v1/runs/{run.pk}/evaluations/{eid}/").json()
    assert body["status"] == "succeeded", body["error"]
    assert [(f["key"], f["step"]) for f in body["figures"]] == [("base", 0), ("2", 2)]
    for f in body["figures"]:
        assert f["samples"] == 3 * 2 and f["samples_per_s"] > 0
        assert all(0.0 <= f[key] <= 1.0 for key in ("mean_at_k", "pass_at_k", "maj_at_k"))
    assert len(body["prompts"]) == 3 and all(set(p["cells"]) == {"base", "2"} for p in body["prompts"])
    stored = Evaluation.objects.get(pk=eid)
    assert stored.results["checkpoints"] == body["figures"] and stored.finished is not None
    # it ran as Ray's job (no token in it), and each cell's k transcripts are served
    from rlstudio.runs import ray_jobs

    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head
    info = ray_jobs.job_info(stored.ray_submission_id)
    assert info.status == ray_jobs.SUCCEEDED and not any("TOKEN" in key for key in info.env_vars)
    samples = api.get(f"/api/v1/runs/{run.pk}/evaluations/{eid}/samples/", {"prompt": 2, "column": "2"}).json()
    assert [s["sample"] for s in samples] == [0, 1] and all(s["turns"] for s in samples)
    assert sum(s["correct"] for s in samples) == body["prompts"][2]["cells"]["2"]["correct"]
