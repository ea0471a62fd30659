"""Worker groups: the driver's handle on its RankWorkers, in-process or as Ray actors.

    group = build_worker_group(cfg_dict, world_size=W, launcher="local"|"ray", device_type="cpu"|"cuda")
    group.call("method", per_rank=[{...}, ...], **common) -> [result of rank 0, rank 1, ...]

`LocalWorkerGroup` (trainer.launcher=local; the default for world size 1) holds one RankWorker in
this process. `RayWorkerGroup` (launcher=ray) starts one Ray actor per device in a placement group
(`trainer.parallel.placement`: with trainer.nnodes=1 one bundle per worker, {"CPU": 1} with
trainer.device=cpu, {"CPU": 1, "GPU": 1} on GPUs, strategy PACK, so several nodes are filled in
order; with nnodes=N one bundle of n_gpus_per_node workers per node, STRICT_SPREAD), takes rank 0's
node IP and a free port there as MASTER_ADDR/PORT and initialises torch.distributed on all ranks at
once (gloo on CPUs, NCCL on GPUs). A placement group not ready within `start_timeout_s` fails with a
PlacementError naming the nodes asked and the nodes the cluster has. The driver code is the same for
both: split, call, gather (`dispatch_*` below).

Failure: results are collected with `ray.wait` one at a time, so a rank that raises or whose
process dies fails the call with a `WorkerError` naming the rank and the cause, even while its peers
still block in a collective (they are killed by `shutdown`). A rank whose process died is the root
cause its peers' collective errors ("Connection reset by peer") follow from: when the first failure
is not a death, the others get ROOT_CAUSE_WAIT_S to show one, and a death is named instead. Nothing
waits forever on a dead actor: Ray marks its pending calls failed within seconds.
"""
from __future__ import annotations

import abc
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from trainer.parallel.balance import balanced_partition, contiguous_chunks
from trainer.parallel.placement import PlacementError, plan_placement, shortfall_message


class WorkerError(RuntimeError):
    """A worker failed a call: `rank`, `method` and the cause are in the message."""

    def __init__(self, rank: int, method: str, cause: str):
        super().__init__(f"worker rank {rank} failed in {method}: {cause}")
        self.rank, self.method, self.cause = rank, method, cause


class WorkerGroup(abc.ABC):
    world_size: int = 1

    @abc.abstractmethod
    def call(self, method: str, *, per_rank: list[dict[str, Any]] | None = None, **common: Any) -> list[Any]:
        """Run `method` on every rank (kwargs: `common` plus that rank's `per_rank` dict); results by rank."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        ...

    # ---- driver-side split / gather, the same for every launcher ----------------------------
    def split(self, lengths: list[int], *, balance: bool) -> list[list[int]]:
        """Row indices per rank: equal counts; token-balanced when `balance` (verl's balance_batch)."""
        if balance and self.world_size > 1 and len(lengths) % self.world_size == 0:
            return balanced_partition(lengths, self.world_size)
        return contiguous_chunks(len(lengths), self.world_size)

    def generate(self, prompts: list[Any], *, n: int, sampling: Any, step: int) -> list[Any]:
        """Prompts in contiguous runs per rank; trajectories back in prompt order."""
        parts = contiguous_chunks(len(prompts), self.world_size)
        outs = self.call("generate", per_rank=[{"prompts": [prompts[i] for i in p]} for p in parts],
                         n=n, sampling=sampling, step=step)
        return [t for out in outs for t in out]

    def compute_log_prob(self, batch: Any, parts: list[list[int]], *, step: int, role: str,
                         with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        outs = self.call("compute_log_prob", per_rank=[{"batch": batch.select(p)} for p in parts],
                         step=step, role=role, with_entropy=with_entropy)
        logp = _gather([o[0] for o in outs], parts, len(batch))
        ent = _gather([o[1] for o in outs], parts, len(batch)) if with_entropy else None
        return logp, ent

    def update_policy(self, batch: Any, parts: list[list[int]], *, mini_batch_size: int, seed: int,
                      capture: bool, step: int) -> tuple[dict[str, list[float]], torch.Tensor | None,
                                                         torch.Tensor | None]:
        """The update on every rank; metrics lists concatenated over ranks (global values, identical on
        every rank, average to themselves); captured old log-probs / entropy gathered."""
        if mini_batch_size % self.world_size:
            raise ValueError(f"mini batch {mini_batch_size} is not divisible by {self.world_size} workers")
        outs = self.call("update_policy", per_rank=[{"batch": batch.select(p)} for p in parts],
                         mini_batch_size=mini_batch_size // self.world_size, seed=seed, capture=capture, step=step,
                         seqlens=batch.lengths())  # every rank's: verl's global_token_num, for perf/mfu/actor
        metrics: dict[str, list[float]] = {}
        for o in outs:
            for k, v in o["metrics"].items():
                metrics.setdefault(k, []).extend(v)
        if not capture:
            return metrics, None, None
        return (metrics, _gather([o["old_log_probs"] for o in outs], parts, len(batch)),
                _gather([o["entropy"] for o in outs], parts, len(batch)))

    def compute_values(self, batch: Any, parts: list[list[int]], *, step: int) -> torch.Tensor:
        """The critic's values (B, R), each rank on its rows."""
        outs = self.call("compute_values", per_rank=[{"batch": batch.select(p)} for p in parts], step=step)
        return _gather(outs, parts, len(batch))

    def update_critic(self, batch: Any, parts: list[list[int]], *, mini_batch_size: int, seed: int,
                      step: int) -> dict[str, list[float]]:
        """The critic's update on every rank (`mini_batch_size` trajectories over all ranks); metric
        lists concatenated over ranks."""
        if mini_batch_size % self.world_size:
            raise ValueError(f"critic mini batch {mini_batch_size} is not divisible by {self.world_size} workers")
        outs = self.call("update_critic", per_rank=[{"batch": batch.select(p)} for p in parts],
                         mini_batch_size=mini_batch_size // self.world_size, seed=seed, step=step)
        metrics: dict[str, list[float]] = {}
        for o in outs:
            for k, v in o.items():
                metrics.setdefault(k, []).extend(v)
        return metrics

    def compute_rm_score(self, conversations: list[list[dict[str, Any]]], *, step: int) -> list[float]:
        """The reward model's scores, each rank on a contiguous run of the conversations (as generate
        splits prompts); back in input order."""
        parts = contiguous_chunks(len(conversations), self.world_size)
        outs = self.call("compute_rm_score", per_rank=[{"conversations": [conversations[i] for i in p]} for p in parts],
                         step=step)
        return [float(s) for out in outs for s in out]

    def sync_weights(self, *, step: int) -> dict[str, float]:
        outs = self.call("sync_weights", step=step)
        return {"timing_s/reshard": max(o["seconds"] for o in outs),
                "perf/weight_sync_mb": sum(o["bytes"] for o in outs) / 2**20 / max(1, len(outs)),
                "perf/weight_sync_buckets": max(o["buckets"] for o in outs)}

    def drain_memory(self) -> list[dict[str, Any]]:
        return [m for ms in self.call("drain_memory") for m in ms]


def _gather(chunks: list[torch.Tensor], parts: list[list[int]], total: int) -> torch.Tensor:
    """Rows of each rank's (b_r, R) tensor put back at their batch indices -> (total, R)."""
    first = next(c for c in chunks if c is not None)
    out = torch.zeros((total,) + tuple(first.shape[1:]), dtype=first.dtype)
    for c, p in zip(chunks, parts):
        if p:
            out[torch.as_tensor(p)] = c.cpu()
    return out


class LocalWorkerGroup(WorkerGroup):
    """One RankWorker in this process (world size 1): the single-process trainer."""

    def __init__(self, cfg_dict: dict[str, Any]):
        from trainer.parallel.worker import RankWorker

        self.world_size = 1
        self.worker = RankWorker(cfg_dict, rank=0, world=1)
        self.info = [self.worker.init()]

    def call(self, method: str, *, per_rank: list[dict[str, Any]] | None = None, **common: Any) -> list[Any]:
        kw = {**common, **(per_rank[0] if per_rank else {})}
        try:
            return [getattr(self.worker, method)(**kw)]
        except Exception as exc:
            raise WorkerError(0, method, f"{type(exc).__name__}: {exc}") from exc

    def shutdown(self) -> None:
        self.worker.shutdown()


class RayWorkerGroup(WorkerGroup):
    """One Ray actor per device in a placement group, torch.distributed among them."""

    def __init__(self, cfg_dict: dict[str, Any], *, world_size: int, device_type: str,
                 start_timeout_s: float = 300.0):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from trainer.parallel.worker import RankWorker

        self.world_size = int(world_size)
        nnodes = int((cfg_dict.get("trainer") or {}).get("nnodes") or 1)
        if self.world_size % nnodes:
            raise ValueError(f"world size {self.world_size} is not a multiple of trainer.nnodes={nnodes}")
        gpu = device_type == "cuda"
        self.placement = plan_placement(nnodes=nnodes, per_node=self.world_size // nnodes, gpu=gpu)
        self._started_ray = False
        if not ray.is_initialized():
            # RAY_ADDRESS joins a cluster; otherwise a local Ray just big enough for the workers.
            address = os.environ.get("RAY_ADDRESS") or None
            if address is None and nnodes > 1:
                raise PlacementError(f"trainer.nnodes={nnodes} needs a Ray cluster of {nnodes} nodes: set "
                                     "RAY_ADDRESS to its head (a local Ray started here is one node)")
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if address is None:
                kw["num_cpus"] = self.world_size + 1
            ray.init(address=address, **kw)
            self._started_ray = True
        self._remove_pg = remove_placement_group
        self.pg = placement_group(list(self.placement.bundles), strategy=self.placement.strategy)
        try:
            ray.get(self.pg.ready(), timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            message = shortfall_message(self.placement, nodes=ray.nodes(), waited_s=start_timeout_s)
            self.shutdown()
            raise PlacementError(message) from None
        repo_root = str(Path(__file__).resolve().parents[2])
        env = {"PYTHONPATH": os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH", "")) if p),
               "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        for k, v in os.environ.items():
            if k.startswith("TRAINER_FAULT"):
                env[k] = v
        remote = ray.remote(RankWorker)
        self.actors = [
            remote.options(num_cpus=1, num_gpus=1 if gpu else 0, max_restarts=0,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(
                               placement_group=self.pg,
                               placement_group_bundle_index=self.placement.bundle_of_rank[r]),
                           runtime_env={"env_vars": env}).remote(cfg_dict, rank=r, world=self.world_size)
            for r in range(self.world_size)]
        try:
            addr, port = self._get([self.actors[0].master_address.remote()], "master_address", ranks=[0])[0]
            # Where each rank runs ({rank, node_id, node_ip, hostname, pid}), as the worker sees it.
            self.nodes = self._get([a.node.remote() for a in self.actors], "node")
            self.info = self._get([a.init.remote(addr, port) for a in self.actors], "init")
        except BaseException:
            self.shutdown()
            raise

    def _get(self, refs: list[Any], method: str, ranks: list[int] | None = None) -> list[Any]:
        """Results by rank; the first failing rank raises WorkerError at once (no waiting on peers)."""
        import ray

        ranks = ranks if ranks is not None else list(range(len(refs)))
        pending = dict(zip(refs, ranks))
        results: dict[int, Any] = {}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                rank = pending.pop(ref)
                try:
                    results[rank] = ray.get(ref)
                except Exception as exc:  # RayTaskError (it raised) or RayActorError (it died)
                    dead = None if _died(exc) else _first_death(pending)
                    rank, exc = dead or (rank, exc)
                    raise WorkerError(rank, method, _cause(exc)) from exc
        return [results[r] for r in ranks]

    def call(self, method: str, *, per_rank: list[dict[str, Any]] | None = None, **common: Any) -> list[Any]:
        refs = [getattr(a, method).remote(**{**common, **(per_rank[r] if per_rank else {})})
                for r, a in enumerate(self.actors)]
        return self._get(refs, method)

    def shutdown(self) -> None:
        import ray

        for a in getattr(self, "actors", []):
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        try:
            self._remove_pg(self.pg)
        except Exception:
            pass
        if self._started_ray:
            ray.shutdown()


ROOT_CAUSE_WAIT_S = 5.0


def _died(exc: BaseException) -> bool:
    import ray

    return isinstance(exc, ray.exceptions.RayActorError)


def _first_death(pending: dict[Any, int]) -> tuple[int, BaseException] | None:
    """(rank, error) of a pending call whose worker process died, seen within ROOT_CAUSE_WAIT_S; None
    when none did (the first failure stands)."""
    import ray

    waiting = dict(pending)
    deadline = time.monotonic() + ROOT_CAUSE_WAIT_S
    while waiting and (left := deadline - time.monotonic()) > 0:
        ready, _ = ray.wait(list(waiting), num_returns=1, timeout=left)
        for ref in ready:
            rank = waiting.pop(ref)
            try:
                ray.get(ref)
            except Exception as exc:
                if _died(exc):
                    return rank, exc
    return None


def _cause(exc: BaseException) -> str:
    """A one-paragraph cause: the worker's own exception for RayTaskError, the death reason otherwise."""
    inner = getattr(exc, "cause", None)
    if isinstance(inner, BaseException):
        return f"{type(inner).__name__}: {inner}"[:2000]
    text = str(exc).strip()
    name = type(exc).__name__
    if "ActorDied" in name or "ActorError" in name or "died" in text.lower():
        return f"the worker process died ({name}): " + " ".join(text.split())[:1500]
    return f"{name}: {text}"[:2000]


LAUNCHERS: dict[str, Callable[..., WorkerGroup]] = {
    "local": lambda cfg_dict, **kw: LocalWorkerGroup(cfg_dict),
    "ray": lambda cfg_dict, **kw: RayWorkerGroup(cfg_dict, **kw),
}


def resolve_launcher(name: str, world_size: int) -> str:
    """trainer.launcher: auto -> local for one worker, ray for more."""
    if name in (None, "", "auto"):
        return "local" if world_size == 1 else "ray"
    if name not in LAUNCHERS:
        raise KeyError(f"unknown trainer.launcher {name!r}; known: auto, {', '.join(sorted(LAUNCHERS))}")
    if name == "local" and world_size != 1:
        raise ValueError(f"trainer.launcher=local runs one worker; world size is {world_size}")
    return name


def build_worker_group(cfg_dict: dict[str, Any], *, world_size: int, launcher: str, device_type: str) -> WorkerGroup:
    name = resolve_launcher(launcher, world_size)
    return LAUNCHERS[name](cfg_dict, world_size=world_size, device_type=device_type)
