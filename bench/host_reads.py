"""Counting host reads of tensor values: the places a decode loop would wait for a GPU.

On a GPU, every read of a tensor's value into Python (`bool(t)`, `t.item()`, `t.tolist()`, `int(t)`,
`t.cpu()`, indexing a list with a tensor) waits for the device to finish all the work queued before
it: a host sync. In a decode loop one such read per token keeps the CPU from queueing the next step
while the GPU runs this one. `HostReads` counts them through a `TorchFunctionMode`, on any device: the
engine's code is the same on the CPU, so the count taken here is the count a GPU run would sync.

    with HostReads() as reads:
        engine.generate(requests)
    reads.count, reads.by_name   # e.g. 3, Counter({'tolist': 3})

Used by tests/trainer/rollout/test_decode_host_reads.py (the `hf` engine's reads per generated token).
The mode costs Python time on every torch call: count with it, time without it.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from torch.overrides import TorchFunctionMode

READS = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "numpy", "cpu"})


class HostReads(TorchFunctionMode):
    """Counts tensor-value reads into Python (the names in READS) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_name: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in READS:
            self.count += 1
            self.by_name[name] += 1
        return func(*args, **(kwargs or {}))
