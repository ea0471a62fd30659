"""Two Ray nodes on one machine: a private head and a second node joining it with
`ray start --address=<head>` (what a second machine runs, docs/distributed.md), one CPU each.

- trainer.nnodes=2 x n_gpus_per_node=1 puts one worker on each node (FSDP2 over gloo across the two
  raylets) and matches the one-node run (nnodes=1 x n_gpus_per_node=2, the session's local Ray) on
  the same spec: per-step metrics and the step-2 weights. Both runs have world size 2 and the same
  rank order, so each rank gets the same prompts, seeds and rows and does the same float operations
  in the same order: only the transport differs. The tolerance (1e-6 relative on metrics, 1e-6
  absolute on weights) only allows for that; measured, the two agree exactly.
- asking for 3 nodes of a 2-node cluster fails after the placement timeout naming nodes asked and
  available; asking for 2 nodes without a cluster (no RAY_ADDRESS) fails at once;
- with nnodes=1, two workers that do not fit one node are packed onto both (PACK spans nodes).

The private cluster uses its own ports (none is 6379, Redis's) and temp folder, and is stopped by its
processes' ids (never `ray stop`, which would stop every Ray on the machine, other tests' included).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from trainer import checkpoint as ckpt
from trainer.config import apply_overrides
from trainer.parallel.placement import PlacementError, plan_placement, shortfall_message
from trainer.recipes import get_recipe
from trainer.run import run

RAY = str(Path(sys.executable).with_name("ray"))
pytestmark = pytest.mark.own_ray  # two Ray nodes of its own: the cluster shard
REPO = Path(__file__).resolve().parents[3]
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() or c == " " for c in solution_str) / max(1, len(solution_str))
'''
COMPARED = ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy",
            "response_length/mean")


def _free_ports(count: int) -> list[int]:
    from rlstudio.launcher.layout import PortAllocator  # free ports counting up; above the session head's

    return PortAllocator(53000 + (os.getpid() % 100) * 100).take_many(count)


def _node_argv(ports: list[int], workers: list[int], temp_dir: Path) -> list[str]:
    return ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0",
            f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
            f"--metrics-export-port={ports[2]}", f"--dashboard-agent-listen-port={ports[3]}",
            f"--dashboard-agent-grpc-port={ports[4]}", f"--runtime-env-agent-port={ports[5]}",
            "--worker-port-list=" + ",".join(map(str, workers)), f"--temp-dir={temp_dir}",
            "--object-store-memory=100000000", "--disable-usage-stats", "--log-color=false"]


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the `ray start --block` process alone (it drains its node through the head's GCS and
    stops its children), SIGKILL its process group if it is still there after `grace`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _sweep(marker: str) -> None:
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in (p.info["cmdline"] or [])):
                p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


class Cluster:
    """The private cluster's processes, started at once; `ready()` waits for both nodes' `ray start`
    to report, so that a test can do other work while they boot."""

    def __init__(self, tmp: Path):
        ports = _free_ports(2 + 2 * 6 + 2 * 12)
        gcs, client = ports[0], ports[1]
        self.address = f"127.0.0.1:{gcs}"  # RAY_ADDRESS: the head's GCS
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        self.nodes: list[tuple[subprocess.Popen, Path]] = []
        argvs = {"head": [RAY, "start", "--head", f"--port={gcs}", f"--ray-client-server-port={client}",
                          "--include-dashboard=false"] + _node_argv(ports[2:8], ports[14:26], tmp / "h"),
                 # The second node: what a second machine runs (its `ray start` retries until the head's
                 # GCS answers).
                 "node2": [RAY, "start", f"--address={self.address}"] + _node_argv(ports[8:14], ports[26:38], tmp / "w")}
        for name, argv in argvs.items():
            log = tmp / f"{name}.log"
            with open(log, "wb") as out:
                self.nodes.append((subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                    start_new_session=True), log))

    def ready(self, timeout: float = 180.0) -> str:
        for proc, log in self.nodes:
            _wait_started(proc, log, timeout)
        return self.address

    def stop(self) -> None:
        for proc, _ in reversed(self.nodes):  # the joined node first, while the head's GCS can drain it
            _stop(proc, grace=30)


@pytest.fixture(scope="module")
def two_node_cluster():
    """A private head and a second node joining it (not yet ready: call `.ready()`)."""
    tmp = Path(tempfile.mkdtemp(prefix="rl2n-", dir="/tmp"))  # short: unix socket paths <= ~107 bytes
    cluster = None
    try:
        cluster = Cluster(tmp)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        _sweep(str(tmp))


def _wait_started(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "Ray runtime started" in text:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.25)
    raise TimeoutError(f"ray start not ready after {timeout:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


def _spec(tmp_path: Path, model: Path, train: Path, out: str, **over):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    ov = {"data.train_files": str(train), "actor_rollout_ref.model.path": str(model),
          "trainer.default_local_dir": str(tmp_path / out), "custom_reward_function.path": str(reward),
          "trainer.logger": ["jsonl"], "trainer.launcher": "ray", "trainer.export_hf": False,
          "report.memory_interval_s": 0.5}
    ov.update(over)
    return apply_overrides(get_recipe("cpu_smoke"), ov)


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def _metrics(out: Path) -> dict[int, dict[str, float]]:
    return {e["data"]["step"]: e["data"]["metrics"] for e in _events(out) if e["type"] == "metrics"}


def _last_status(out: Path) -> str:
    status = [e["data"] for e in _events(out) if e["type"] == "status"] if (out / "events.jsonl").exists() else []
    return str(status[-1]) if status else "no status event"


def _placement_line(out: Path) -> str:
    lines = [e["data"]["message"] for e in _events(out)
             if e["type"] == "log" and e["data"]["message"].startswith("workers on ")]
    assert len(lines) == 1, lines
    return lines[0]


def _cli(args: list[str], *, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_two_nodes_match_one_node(local_ray, two_node_cluster, tmp_path, tiny_model_dir, demo_data_dir):
    train = demo_data_dir / "train.jsonl"
    one = _spec(tmp_path, tiny_model_dir, train, "one", **{"trainer.nnodes": 1, "trainer.n_gpus_per_node": 2})
    assert run(one) == 0, _last_status(tmp_path / "one")  # the session's one-node Ray, while the two nodes boot
    two = _spec(tmp_path, tiny_model_dir, train, "two", **{"trainer.nnodes": 2, "trainer.n_gpus_per_node": 1})
    spec = tmp_path / "two.json"
    spec.write_text(json.dumps(two.to_dict()))
    env = {**os.environ, "RAY_ADDRESS": two_node_cluster.ready()}
    t0 = time.monotonic()
    proc = _cli(["-m", "trainer", "run", str(spec)], env=env, timeout=600)
    two_node_s = time.monotonic() - t0
    assert proc.returncode == 0, (_last_status(tmp_path / "two"), proc.stderr[-5000:])

    line = _placement_line(tmp_path / "two")
    nodes = re.findall(r"rank (\d) on \S+ \(node (\w+)\)", line)
    assert [r for r, _ in nodes] == ["0", "1"] and nodes[0][1] != nodes[1][1], line
    assert _placement_line(tmp_path / "one").startswith("workers on 1 node(s)")

    m1, m2 = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    assert sorted(m1) == sorted(m2) == [1, 2]
    worst = 0.0
    for step in (1, 2):
        for k in COMPARED:
            assert m2[step][k] == pytest.approx(m1[step][k], rel=1e-6, abs=1e-9), (step, k)
            worst = max(worst, abs(m2[step][k] - m1[step][k]) / max(abs(m1[step][k]), 1e-12))
    w1 = ckpt.read_actor_model(tmp_path / "one" / "global_step_2")
    w2 = ckpt.read_actor_model(tmp_path / "two" / "global_step_2")
    w0 = ckpt.read_actor_model(tmp_path / "one" / "global_step_1")
    assert w1.keys() == w2.keys()
    diff = max((w1[k] - w2[k]).abs().max().item() for k in w1)
    assert diff < 1e-6, diff
    assert max((w1[k] - w0[k]).abs().max().item() for k in w1) > 0  # step 2 did change the weights
    print(f"two-node run {two_node_s:.1f} s; worst metric rel diff {worst:.2e}; max weight diff {diff:.2e}")


SHORTFALL = """
import sys
from trainer.parallel.group import RayWorkerGroup
from trainer.parallel.placement import PlacementError
try:
    RayWorkerGroup({"trainer": {"nnodes": int(sys.argv[1])}}, world_size=int(sys.argv[1]), device_type="cpu",
                   start_timeout_s=float(sys.argv[2]))
except PlacementError as exc:
    print("PlacementError:", exc)
"""

PACKED = """
import ray
from ray.util.placement_group import placement_group, placement_group_table
from trainer.parallel.placement import plan_placement
ray.init()
plan = plan_placement(nnodes=1, per_node=2, gpu=False)
pg = placement_group(list(plan.bundles), strategy=plan.strategy)
ray.get(pg.ready(), timeout=60)
print("nodes", len(set(placement_group_table(pg)["bundles_to_node_id"].values())))
"""


def test_more_nodes_than_the_cluster_has_fails_naming_them(two_node_cluster):
    env = {**os.environ, "RAY_ADDRESS": two_node_cluster.ready()}
    t0 = time.monotonic()
    proc = _cli(["-c", SHORTFALL, "3", "2"], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PlacementError: trainer.nnodes=3 x trainer.n_gpus_per_node=1 needs 3 Ray nodes" in proc.stdout
    assert "the cluster has 2 alive node(s), 2 of them with {CPU: 1} or more" in proc.stdout
    assert "not placed after 2 s" in proc.stdout
    assert time.monotonic() - t0 < 60


def test_one_node_placement_spans_nodes_when_one_is_too_small(two_node_cluster):
    """nnodes=1 x 2 workers on two 1-CPU nodes: PACK puts the bundles on both (what a platform run
    with more GPUs than a node has relies on)."""
    proc = _cli(["-c", PACKED], env={**os.environ, "RAY_ADDRESS": two_node_cluster.ready()}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nodes 2" in proc.stdout


def test_nnodes_without_a_cluster_fails_at_once(monkeypatch):
    import ray

    from trainer.parallel.group import RayWorkerGroup

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh driver
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("a one-node Ray must not be started"))
    with pytest.raises(PlacementError, match=r"trainer.nnodes=2 needs a Ray cluster of 2 nodes: set RAY_ADDRESS"):
        RayWorkerGroup({"trainer": {"nnodes": 2}}, world_size=2, device_type="cpu")


def test_plan_placement():
    one = plan_placement(nnodes=1, per_node=4, gpu=True)
    assert one.strategy == "PACK" and one.bundles == ({"CPU": 1.0, "GPU": 1.0},) * 4
    assert one.bundle_of_rank == (0, 1, 2, 3)
    two = plan_placement(nnodes=2, per_node=4, gpu=True)
    assert two.strategy == "STRICT_SPREAD" and two.bundles == ({"CPU": 4.0, "GPU": 4.0},) * 2
    assert two.bundle_of_rank == (0, 0, 0, 0, 1, 1, 1, 1) and two.world_size == 8
    assert plan_placement(nnodes=3, per_node=1, gpu=False).bundles == ({"CPU": 1.0},) * 3
    with pytest.raises(ValueError):
        plan_placement(nnodes=0, per_node=1, gpu=False)


def test_shortfall_message_counts_nodes_big_enough():
    plan = plan_placement(nnodes=2, per_node=8, gpu=True)
    nodes = [{"Alive": True, "Resources": {"CPU": 64.0, "GPU": 8.0}},
             {"Alive": True, "Resources": {"CPU": 64.0, "GPU": 4.0}},
             {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]
    msg = shortfall_message(plan, nodes=nodes, waited_s=300.0)
    assert "needs 2 Ray nodes with {CPU: 8, GPU: 8} each" in msg
    assert "the cluster has 2 alive node(s), 1 of them with {CPU: 8, GPU: 8} or more" in msg
    assert "ray start --address" in msg
    packed = shortfall_message(plan_placement(nnodes=1, per_node=16, gpu=True), nodes=nodes[:2], waited_s=10)
    assert "needs {CPU: 16, GPU: 16} in all (PACK)" in packed and "held by other runs" in packed
