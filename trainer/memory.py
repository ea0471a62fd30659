"""Memory sampling, phase tags and heartbeats.

`MemoryMonitor` knows the current training phase (rollout | old_log_prob | ref | update | sync |
idle) and the step. `phase(name)` is a context manager that emits a memory event at each phase
boundary (entering the phase). A daemon thread emits a memory sample every `report.memory_interval_s`
and a heartbeat every `report.heartbeat_interval_s` (so the platform can tell a live run from a hung
one even during a long rollout).

Readings: process RSS from /proc/self/statm (psutil when present, for non-Linux) and, on the CPU,
its high-water mark as the peak (VmHWM, else getrusage); on CUDA
`torch.cuda.memory_allocated / memory_reserved / max_memory_allocated` plus the device's used memory
as NVML reports it (`device_used`). torch's counters see only torch's caching allocator; NVML sees the
whole device: the CUDA context, NCCL buffers and a rollout engine with its own allocator (SGLang's KV
cache pool), which is what actually runs a GPU out of memory. Bytes everywhere.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, Iterator

PHASES = ("rollout", "reward_model", "old_log_prob", "ref", "values", "update_critic", "update", "sync", "idle")


def rss_bytes() -> int:
    """Resident set size of this process in bytes."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except ImportError:
            return 0


def peak_rss_bytes() -> int:
    """The most resident memory this process has held so far (its high-water mark) in bytes: VmHWM
    from /proc/self/status, else getrusage's ru_maxrss; 0 where neither can be read."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource  # Unix only

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB elsewhere
    except (ImportError, OSError, ValueError):
        return 0


_NVML_UNAVAILABLE: dict[str, str] = {}  # device -> why NVML could not be read (asked once, not per sample)


def nvml_used_bytes(device: str) -> int | None:
    """Used memory of the whole CUDA `device` ("cuda:<i>", torch's numbering) from NVML, or None.

    `torch.cuda.device_memory_used` maps torch's index through CUDA_VISIBLE_DEVICES to NVML's and
    asks NVML (it needs the `nvidia-ml-py` package, the `gpu` extra); where it is missing or NVML
    fails, the reason is kept in `nvml_unavailable(device)` and None is returned from then on.
    """
    if not device.startswith("cuda") or device in _NVML_UNAVAILABLE:
        return None
    try:
        import torch

        return int(torch.cuda.device_memory_used(torch.device(device)))
    except Exception as exc:  # ModuleNotFoundError (no pynvml), NVML errors, an old torch
        _NVML_UNAVAILABLE[device] = f"{type(exc).__name__}: {exc}"
        return None


def nvml_unavailable(device: str) -> str | None:
    """Why NVML could not be read for `device`, or None if it could (or was never asked)."""
    return _NVML_UNAVAILABLE.get(device)


def read_memory(device: str) -> dict[str, int]:
    """{rss, allocated, reserved, peak, device_used} in bytes; the CUDA fields are 0 on the CPU, and
    device_used is 0 where NVML cannot be read (see nvml_used_bytes). `peak` is the most the process
    has held so far: torch's max allocated on CUDA, the RSS high-water mark on the CPU."""
    out = {"rss": rss_bytes(), "allocated": 0, "reserved": 0, "peak": 0, "device_used": 0}
    if device.startswith("cuda"):
        import torch

        out["allocated"] = int(torch.cuda.memory_allocated(device))
        out["reserved"] = int(torch.cuda.memory_reserved(device))
        out["peak"] = int(torch.cuda.max_memory_allocated(device))
        out["device_used"] = nvml_used_bytes(device) or 0
    else:
        out["peak"] = max(out["rss"], peak_rss_bytes())
    return out


class MemoryMonitor:
    """Phase-tagged memory events and heartbeats for one process (one device)."""

    def __init__(self, emitter: Any, *, device: str, memory_interval_s: float = 1.0,
                 heartbeat_interval_s: float = 5.0):
        self.emitter = emitter
        self.device = "cuda:0" if device == "cuda" else device
        self.memory_interval_s = float(memory_interval_s)
        self.heartbeat_interval_s = float(heartbeat_interval_s)
        self.step = 0
        self.current = "idle"
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> dict[str, Any]:
        reading = read_memory(self.device)
        self.peak_rss = max(self.peak_rss, reading["rss"])
        data = {"step": self.step, "phase": self.current, "device": self.device, **reading}
        self.emitter.memory(data)
        return data

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases: {PHASES}")
        previous = self.current
        self.current = name
        self.sample()
        try:
            yield
        finally:
            self.current = previous

    def start(self) -> None:
        if self._thread is None and (self.memory_interval_s > 0 or self.heartbeat_interval_s > 0):
            self._thread = threading.Thread(target=self._run, name="memory-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        now = time.monotonic()
        next_mem = now + self.memory_interval_s if self.memory_interval_s > 0 else float("inf")
        next_hb = now + self.heartbeat_interval_s if self.heartbeat_interval_s > 0 else float("inf")
        while not self._stop.wait(max(0.01, min(next_mem, next_hb) - time.monotonic())):
            now = time.monotonic()
            try:
                if now >= next_mem:
                    self.sample()
                    next_mem = now + self.memory_interval_s
                if now >= next_hb:
                    self.emitter.heartbeat(self.step)
                    next_hb = now + self.heartbeat_interval_s
            except Exception:  # a closed sink at shutdown must not kill the process from a thread
                if self._stop.is_set():
                    return
                raise
