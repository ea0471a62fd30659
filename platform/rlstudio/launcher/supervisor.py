"""Child processes of the launcher: start with a log and a pid file, stop in reverse order, and
find every process an instance owns (also after a crash) so that none is left behind.

Ownership: every child gets the environment variable OWNER_ENV=<state dir>; descendants (Ray's
raylet, workers, job drivers, Postgres backends) inherit it, so a scan of the process table finds
them even when they have been re-parented. Children run in their own session so that a terminal's
Ctrl-C reaches only the launcher, which then stops them in order.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

OWNER_ENV = "RLSTUDIO_LAUNCHER_OWNER"


def is_alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie holds no resources; its parent just has not reaped it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def owner_of(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get(OWNER_ENV)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def owned_processes(owner: str, *, exclude: set[int] | None = None) -> list[psutil.Process]:
    """Every live process whose environment says it belongs to `owner` (a state dir)."""
    exclude = exclude or set()
    found = []
    for proc in psutil.process_iter():
        if proc.pid in exclude or proc.pid == os.getpid():
            continue
        if owner_of(proc) == owner and is_alive(proc):
            found.append(proc)
    return found


def terminate_all(procs: list[psutil.Process], *, grace: float) -> list[psutil.Process]:
    """SIGTERM (SIGINT for postgres: its fast shutdown), wait `grace` s, SIGKILL what is left.

    Returns the processes that had to be killed.
    """
    for proc in procs:
        try:
            sig = signal.SIGINT if proc.name() == "postgres" else signal.SIGTERM
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    left = wait_dead(procs, timeout=grace)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    wait_dead(left, timeout=5.0)
    return left


def wait_dead(procs: list[psutil.Process], *, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = [p for p in procs if is_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if is_alive(p)]
    return left


def tree_of(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def total_rss(procs: list[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


@dataclass
class Child:
    """One supervised process. `graceful` replaces the default SIGTERM when set."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    pid_file: Path
    grace: float
    graceful: Callable[["Child"], None] | None = None
    critical: bool = True

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Supervisor:
    """Starts children and stops them in reverse order of start."""

    owner: str
    log_dir: Path
    run_dir: Path
    children: list[Child] = field(default_factory=list)

    def spawn(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        grace: float = 10.0,
        graceful: Callable[[Child], None] | None = None,
        user: int | None = None,
        group: int | None = None,
        critical: bool = True,
    ) -> Child:
        log_path = self.log_dir / f"{name}.log"
        env = {**env, OWNER_ENV: self.owner}
        with open(log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
            log.flush()
            extra = {}
            if user is not None:
                extra = {"user": user, "group": group, "extra_groups": []}
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(cwd),
                start_new_session=True,
                **extra,
            )
        pid_file = self.run_dir / f"{name}.pid"
        pid_file.write_text(f"{popen.pid} {_create_time(popen.pid)}\n")
        child = Child(name, popen, log_path, pid_file, grace, graceful, critical)
        self.children.append(child)
        return child

    def run_to_end(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path,
                   timeout: float, should_stop: Callable[[], bool],
                   on_poll: Callable[[], None] | None = None) -> int:
        """Run a one-shot child (migrate, …) to completion, supervised like the others; `on_poll` is
        called every 0.1 s while it runs and once after it ended (to relay its log, say)."""
        child = self.spawn(name, argv, env=env, cwd=cwd, critical=False)
        deadline = time.monotonic() + timeout
        try:
            while child.popen.poll() is None:
                if on_poll is not None:
                    on_poll()
                if should_stop():
                    raise InterruptedError(f"stop requested while {name} ran")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not finish within {timeout:.0f} s")
                time.sleep(0.1)
        finally:
            if child.popen.poll() is None:
                self._stop_child(child)
            self.children.remove(child)
            child.pid_file.unlink(missing_ok=True)
            if on_poll is not None:
                on_poll()
        return child.popen.returncode

    def dead_critical(self) -> Child | None:
        for child in self.children:
            if child.critical and not child.alive():
                return child
        return None

    def _stop_child(self, child: Child) -> None:
        tree = tree_of(child.popen.pid)  # collected first: the root may exit before its children
        if child.alive():
            try:
                if child.graceful is not None:
                    child.graceful(child)
                else:
                    child.popen.send_signal(signal.SIGTERM)
            except (ProcessLookupError, subprocess.SubprocessError, OSError):
                pass
        try:
            child.popen.wait(timeout=child.grace)
        except subprocess.TimeoutExpired:
            child.popen.kill()
            child.popen.wait(timeout=5)
        # Descendants that outlived their parent get the usual TERM-then-KILL.
        rest = [p for p in tree[1:] if is_alive(p)]
        if rest:
            terminate_all(rest, grace=3.0)

    def stop_all(self) -> None:
        for child in reversed(list(self.children)):
            self._stop_child(child)
            child.pid_file.unlink(missing_ok=True)
            self.children.remove(child)
        # Whatever still carries our mark (a Ray worker re-parented to init, …) goes too.
        stray = owned_processes(self.owner)
        if stray:
            terminate_all(stray, grace=5.0)

    def processes(self) -> list[psutil.Process]:
        """The launcher, its children and every process marked as this instance's."""
        seen: dict[int, psutil.Process] = {}
        for proc in tree_of(os.getpid()) + owned_processes(self.owner):
            seen.setdefault(proc.pid, proc)
        return [p for p in seen.values() if is_alive(p)]


def _create_time(pid: int) -> str:
    """The start time of a process: with the pid, an identity that survives pid reuse."""
    try:
        return repr(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return "0"


def recover(*, owner: str, run_dir: Path) -> list[int]:
    """Clean up after a launcher of the same state dir that died without stopping its children.

    Stale pid files (dead process, or a pid reused by a process that is not ours) are removed;
    live processes that are ours are stopped. Ours: the pid file's start time matches, or the
    process carries OWNER_ENV, or its command line names the state dir. (Some programs, like
    redis-server, rewrite their title over the environment block, so the mark alone is not
    enough.) Returns the pids that were stopped.
    """
    suspects: dict[int, psutil.Process] = {}
    for pid_file in sorted(run_dir.glob("*.pid")):
        try:
            fields = pid_file.read_text().split()
            proc = psutil.Process(int(fields[0]))
        except (ValueError, IndexError, psutil.NoSuchProcess, OSError):
            pid_file.unlink(missing_ok=True)
            continue
        try:
            ours = (len(fields) > 1 and fields[1] == repr(proc.create_time())) \
                or owner_of(proc) == owner or owner in " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            ours = False
        if ours and is_alive(proc):
            suspects[proc.pid] = proc
        pid_file.unlink(missing_ok=True)
    for proc in owned_processes(owner):
        suspects.setdefault(proc.pid, proc)
    procs = list(suspects.values())
    if procs:
        terminate_all(procs, grace=10.0)
    return [p.pid for p in procs]
