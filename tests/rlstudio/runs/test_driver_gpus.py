"""The GPUs a run's Ray job entrypoint reserves: the run's one GPU when its one worker runs in the
driver's process; none when the run has several GPUs, which the workers' placement group reserves (a
driver holding them too would make a 4-GPU run wait for 8)."""
from __future__ import annotations

import pytest

from rlstudio.runs import adapt
from rlstudio.runs.models import Run
from rlstudio.runs.models import RunStatus as S

pytestmark = pytest.mark.django_db


@pytest.fixture
def roomy(alice):
    """A quota that lets alice hold 8 GPUs at once (the default's 1 would refuse these runs at launch)."""
    from rlstudio.quotas.models import GpuQuota

    GpuQuota.objects.create(user=alice, max_gpus=8)


@pytest.mark.parametrize("gpus, expected", [(0, 0), (1, 1), (2, 0), (8, 0)])
def test_driver_gpus(gpus, expected):
    assert adapt.driver_gpus(gpus) == expected


@pytest.mark.parametrize("gpus, num_gpus, workers", [(1, 1, (1, 1)), (4, 0, (1, 4))])
def test_the_job_entrypoint_reserves_gpus_only_for_a_one_worker_run(api, ready, roomy, settings, tmp_path,
                                                                    monkeypatch, gpus, num_gpus, workers):
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.services import run_submit

    settings.RUNS_DIR = tmp_path
    resp = api.post("/api/v1/runs/", {"name": "r", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                      "preset": "cpu_smoke", "gpus": gpus}, format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    Run.objects.filter(pk=run.pk).update(status=S.SUBMITTING)  # admitted (no cluster in this test)
    given = {}
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: None)
    monkeypatch.setattr(ray_jobs, "submit", lambda **kwargs: given.update(kwargs) or True)
    assert run_submit(run_id=run.pk) == "submitted"
    assert given["num_gpus"] == num_gpus and given["job_gpus"] == gpus
    spec = Run.objects.get(pk=run.pk).config  # the frozen spec the job runs
    assert (spec["trainer"]["nnodes"], spec["trainer"]["n_gpus_per_node"]) == workers


@pytest.mark.parametrize("gpus, per_node, layout", [(0, 8, (1, 1)), (1, 8, (1, 1)), (8, 8, (1, 8)),
                                                     (16, 8, (2, 8)), (4, 2, (2, 2)), (3, 4, (1, 3))])
def test_node_layout(gpus, per_node, layout):
    assert adapt.node_layout(gpus, per_node) == layout


def test_a_run_with_more_gpus_than_a_node_spans_whole_nodes(api, ready, roomy, settings, tmp_path, monkeypatch):
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.services import run_submit

    settings.RUNS_DIR, settings.RLSTUDIO_GPUS_PER_NODE = tmp_path, 2
    body = {"name": "r", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke"}
    resp = api.post("/api/v1/runs/", {**body, "gpus": 3}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "gpus", resp.content
    assert "whole nodes of 2 GPUs" in resp.json()["error"]["message"] and not Run.objects.exists()
    resp = api.post("/api/v1/runs/", {**body, "gpus": 4}, format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    Run.objects.filter(pk=run.pk).update(status=S.SUBMITTING)
    given = {}
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: None)
    monkeypatch.setattr(ray_jobs, "submit", lambda **kwargs: given.update(kwargs) or True)
    assert run_submit(run_id=run.pk) == "submitted" and given["num_gpus"] == 0
    spec = Run.objects.get(pk=run.pk).config
    assert (spec["trainer"]["nnodes"], spec["trainer"]["n_gpus_per_node"]) == (2, 2)


class _FakeClient:
    """Stands for Ray's JobSubmissionClient: keeps what submit_job was given."""

    def __init__(self):
        self.submitted = []

    def submit_job(self, **kwargs):
        self.submitted.append(kwargs)
        return kwargs["submission_id"]


@pytest.mark.parametrize("num_gpus, job_gpus, hidden", [(0, 0, True), (0, None, True), (1, 1, False),
                                                        (1, None, False), (0, 4, False)])
def test_a_job_given_no_gpu_sees_none(monkeypatch, num_gpus, job_gpus, hidden):
    """Security review F1: Ray leaves CUDA_VISIBLE_DEVICES unset for an entrypoint that reserves no
    GPU, so a CPU job would see every GPU of its node; the platform sets it to "" for those jobs only
    (a multi-GPU run's driver reserves 0 too, but its job has GPUs: its variable is left to Ray)."""
    from rlstudio.runs import ray_jobs

    fake = _FakeClient()
    monkeypatch.setattr(ray_jobs, "client", lambda: fake)
    kwargs = {} if job_gpus is None else {"job_gpus": job_gpus}
    assert ray_jobs.submit(submission_id="rlstudio-run-1", entrypoint="true", env_vars={"A": "1"}, num_cpus=1,
                           num_gpus=num_gpus, metadata={}, **kwargs) is True
    (job,) = fake.submitted
    env = job["runtime_env"]["env_vars"]
    assert env["A"] == "1" and set(job["runtime_env"]) == {"env_vars"}
    if hidden:
        assert env["CUDA_VISIBLE_DEVICES"] == "" and job["entrypoint_num_gpus"] is None
    else:
        assert "CUDA_VISIBLE_DEVICES" not in env


def test_a_cpu_run_is_submitted_with_no_gpu_visible(api, ready, settings, tmp_path, monkeypatch):
    """The whole path: a gpus=0 run reaches Ray's client with CUDA_VISIBLE_DEVICES="" and hf."""
    from rlstudio.runs import ray_jobs
    from rlstudio.runs.services import run_submit

    settings.RUNS_DIR = tmp_path
    resp = api.post("/api/v1/runs/", {"name": "r", "dataset": ready["dataset"].pk, "model": ready["model"].pk,
                                      "preset": "cpu_smoke", "gpus": 0}, format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    Run.objects.filter(pk=run.pk).update(status=S.SUBMITTING)
    fake = _FakeClient()
    monkeypatch.setattr(ray_jobs, "client", lambda: fake)
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: None)
    assert run_submit(run_id=run.pk) == "submitted"
    (job,) = fake.submitted
    assert job["runtime_env"]["env_vars"]["CUDA_VISIBLE_DEVICES"] == "" and job["entrypoint_num_gpus"] is None
    spec = Run.objects.get(pk=run.pk).config
    assert spec["trainer"]["device"] == "cpu" and spec["actor_rollout_ref"]["rollout"]["name"] != "sglang"
