"""Where a run's Ray workers go: the placement group's bundles and strategy, and the error when the
cluster cannot hold them.

    plan = plan_placement(nnodes=N, per_node=G, gpu=True)   # bundles, strategy, bundle of each rank
    shortfall_message(plan, nodes=ray.nodes(), waited_s=300.0)

One node (`trainer.nnodes=1`): one bundle per worker ({"CPU": 1} or {"CPU": 1, "GPU": 1}), strategy
PACK, so the bundles fill as few nodes as possible (several when one node is too small: this is what
a platform run with more GPUs than a node has gets). Several nodes (`trainer.nnodes=N`): N bundles of
G workers' resources each ({"CPU": G} or {"CPU": G, "GPU": G}), strategy STRICT_SPREAD, so each bundle
is on its own node; rank r runs in bundle r // G, so ranks 0..G-1 share the first node, like
torchrun's local ranks. Rank 0's node IP is the rendezvous address (`RankWorker.master_address`).

Pure functions over Ray's plain records (`ray.nodes()`): no Ray import here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


class PlacementError(RuntimeError):
    """The cluster cannot place the workers (too few nodes, or nodes too small)."""


@dataclass(frozen=True)
class Placement:
    nnodes: int
    per_node: int
    gpu: bool
    bundles: tuple[dict[str, float], ...]
    strategy: str
    bundle_of_rank: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return self.nnodes * self.per_node


def _resources(count: int, gpu: bool) -> dict[str, float]:
    return {"CPU": float(count), "GPU": float(count)} if gpu else {"CPU": float(count)}


def plan_placement(*, nnodes: int, per_node: int, gpu: bool) -> Placement:
    """Bundles, strategy and each rank's bundle for `nnodes` x `per_node` workers (module doc)."""
    if nnodes < 1 or per_node < 1:
        raise ValueError(f"nnodes and n_gpus_per_node must be >= 1, got {nnodes} and {per_node}")
    world = nnodes * per_node
    if nnodes == 1:
        return Placement(1, per_node, gpu, tuple(_resources(1, gpu) for _ in range(world)), "PACK",
                         tuple(range(world)))
    return Placement(nnodes, per_node, gpu, tuple(_resources(per_node, gpu) for _ in range(nnodes)),
                     "STRICT_SPREAD", tuple(r // per_node for r in range(world)))


def _fits(total: Mapping[str, float], need: Mapping[str, float]) -> bool:
    return all(float(total.get(k, 0.0)) >= v for k, v in need.items())


def _fmt(res: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in res.items()) + "}"


def shortfall_message(plan: Placement, *, nodes: Sequence[Mapping[str, Any]], waited_s: float) -> str:
    """Why the placement group did not become ready, from `ray.nodes()` records: nodes asked against
    alive nodes and those whose total resources could hold one bundle (free ones may be held by other
    runs)."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    bundle = plan.bundles[0]
    big = [n for n in alive if _fits(n.get("Resources") or {}, bundle)]
    where = (f"trainer.nnodes={plan.nnodes} x trainer.n_gpus_per_node={plan.per_node}"
             if plan.nnodes > 1 else f"{plan.world_size} worker(s) of {_fmt(bundle)}")
    if plan.nnodes > 1:
        ask = f"needs {plan.nnodes} Ray nodes with {_fmt(bundle)} each (one bundle per node, STRICT_SPREAD)"
    else:
        total = _resources(plan.world_size, plan.gpu)
        ask = f"needs {_fmt(total)} in all (PACK)"
    have = (f"the cluster has {len(alive)} alive node(s), {len(big)} of them with {_fmt(bundle)} or more in "
            "total")
    hint = ("add nodes (`ray start --address=<head>:<port>` on each; docs/distributed.md) or lower "
            "trainer.nnodes" if plan.nnodes > 1 and len(big) < plan.nnodes
            else "the resources may be held by other runs, or the nodes are too small")
    return f"{where} {ask}; {have}; not placed after {waited_s:g} s: {hint}"


def describe_nodes(nodes: Sequence[Mapping[str, Any]]) -> str:
    """One log line: how many nodes the ranks landed on and each rank's node (IP and short id)."""
    ids = {n.get("node_id") for n in nodes}
    ranks = ", ".join(f"rank {n['rank']} on {n.get('node_ip') or n.get('hostname')} "
                      f"(node {str(n.get('node_id') or '?')[:8]})" for n in nodes)
    return f"workers on {len(ids)} node(s): {ranks}"
