"""The platform's only door to Ray: the Jobs API (submit, status, stop, logs) and cluster GPUs.

Everything goes over HTTP to Ray's dashboard (`settings.RAY_ADDRESS`, e.g. http://127.0.0.1:8265),
through `ray.job_submission.JobSubmissionClient` (imported lazily: it pulls in a lot) or plain
`urllib` for the cluster summary. No `ray.init()` here: the web and Celery processes never join the
cluster. Errors reaching Ray become `RayUnavailable` so callers can say so instead of crashing.
"""
from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field

from django.conf import settings

# Ray's job states (ray.job_submission.JobStatus values) as plain strings.
PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"
RAY_TERMINAL = frozenset({STOPPED, SUCCEEDED, FAILED})


class RayUnavailable(RuntimeError):
    """Ray's Jobs API cannot be reached (no RAY_ADDRESS, or the head does not answer)."""


@dataclass(frozen=True)
class JobInfo:
    """What Ray says about one job (None when it does not know the submission id)."""

    submission_id: str
    status: str
    message: str
    driver_exit_code: int | None
    # The job's runtime_env env_vars (what the platform gave it at submit; never the ingest token, which
    # the job reads from a file in its run folder: launch.job_env).
    env_vars: dict[str, str] = field(default_factory=dict)


def ray_address() -> str:
    address = settings.RAY_ADDRESS
    if not address:
        raise RayUnavailable("RAY_ADDRESS is not set: this platform has no Ray cluster to run on")
    if "://" not in address:
        # `ray://` / bare GCS addresses are not the Jobs API; the dashboard URL is.
        address = settings.RAY_DASHBOARD_URL
    return address.rstrip("/")


def client():
    """A JobSubmissionClient on the configured cluster (or RayUnavailable)."""
    address = ray_address()
    try:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(address)
    except Exception as exc:  # noqa: BLE001 - connection errors come in many classes
        raise RayUnavailable(f"Ray Jobs API at {address} does not answer: {exc}") from exc


def _is_missing(exc: Exception) -> bool:
    text = str(exc).lower()
    return "does not exist" in text or "not found" in text or "404" in text


def job_info(submission_id: str) -> JobInfo | None:
    """Ray's view of the job, or None when Ray does not know it (a lost job)."""
    c = client()
    try:
        info = c.get_job_info(submission_id)
    except Exception as exc:  # noqa: BLE001
        if _is_missing(exc):
            return None
        raise RayUnavailable(f"get_job_info({submission_id}): {exc}") from exc
    return JobInfo(
        submission_id=submission_id,
        status=str(getattr(info.status, "value", info.status)),
        message=info.message or "",
        driver_exit_code=getattr(info, "driver_exit_code", None),
        env_vars={str(k): str(v) for k, v in ((info.runtime_env or {}).get("env_vars") or {}).items()},
    )


def job_runtime_env(env_vars: dict[str, str], *, job_gpus: float) -> dict:
    """The runtime_env a job is submitted with. A job given no GPUs at all (`job_gpus` 0) also gets
    CUDA_VISIBLE_DEVICES="": Ray leaves the variable unset for an entrypoint that reserves no GPU, and
    the process would otherwise see (and could use) every GPU of its node, outside the GPU quota."""
    env = dict(env_vars)
    if not job_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return {"env_vars": env}  # never working_dir: the head shares our filesystem


def submit(*, submission_id: str, entrypoint: str, env_vars: dict[str, str], num_cpus: float,
           num_gpus: float, metadata: dict[str, str], job_gpus: float | None = None) -> bool:
    """Submit a job under `submission_id`; False when a job with that id already exists.

    `num_gpus` is what the entrypoint itself reserves; `job_gpus` is what the whole job is given (a
    run with several GPUs: its workers' placement group holds them and the driver reserves 0). None
    means `num_gpus`. A job whose `job_gpus` is 0 runs with no GPU visible (job_runtime_env).

    The id is derived from the run, so a retried or duplicated Celery task lands here twice and Ray
    itself refuses the second: that refusal is the idempotence, not a check-then-act race.
    """
    c = client()
    try:
        c.submit_job(
            entrypoint=entrypoint,
            submission_id=submission_id,
            runtime_env=job_runtime_env(env_vars, job_gpus=num_gpus if job_gpus is None else job_gpus),
            entrypoint_num_cpus=num_cpus,
            entrypoint_num_gpus=num_gpus or None,
            metadata=metadata,
        )
    except Exception as exc:  # noqa: BLE001
        if "already exists" in str(exc).lower():
            return False
        raise RayUnavailable(f"submit_job({submission_id}): {exc}") from exc
    return True


def stop(submission_id: str) -> bool:
    """Ask Ray to stop the job: SIGTERM to the entrypoint's processes, SIGKILL after
    RAY_JOB_STOP_WAIT_TIME_S (which we set per job to the platform's grace period)."""
    try:
        return bool(client().stop_job(submission_id))
    except RayUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001
        if _is_missing(exc):
            return False
        raise RayUnavailable(f"stop_job({submission_id}): {exc}") from exc


# The most of a job's driver log kept for a tail (the job-log API, a failed job's error): Ray reads the
# asked lines from the end of the file; this also bounds what a server that sent more would cost.
LOG_TAIL_MAX_BYTES = 256 * 1024
LOG_TAIL_MAX_LINES = 5000
_LOG_CHUNK = 64 * 1024


def _open_log(submission_id: str, *, lines: int):
    """An open HTTP response streaming the job's driver log from Ray's log API (the last `lines`
    lines, read from the end of the file by the agent on the driver's node; -1: all of it), or None
    when Ray has no log for it (an unknown job, or one whose driver has not started)."""
    import urllib.error
    import urllib.parse

    c = client()
    try:
        info = c.get_job_info(submission_id)
    except Exception as exc:  # noqa: BLE001
        if _is_missing(exc):
            return None
        raise RayUnavailable(f"get_job_info({submission_id}): {exc}") from exc
    node_id = getattr(info, "driver_node_id", None)
    if not node_id:
        return None
    query = urllib.parse.urlencode({"submission_id": submission_id, "node_id": node_id, "lines": int(lines)})
    request = urllib.request.Request(f"{ray_address()}/api/v0/logs/file?{query}",
                                     headers=dict(getattr(c, "_headers", None) or {}))
    try:
        return urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as exc:
        text = exc.read(2000).decode("utf-8", "replace")
        if "could not find a log file" in text.lower() or _is_missing(Exception(text)):
            return None
        raise RayUnavailable(f"Ray's log of {submission_id}: HTTP {exc.code}: {text[:300]}") from exc
    except Exception as exc:  # noqa: BLE001
        raise RayUnavailable(f"Ray's log of {submission_id}: {exc}") from exc


def logs(submission_id: str, *, lines: int = LOG_TAIL_MAX_LINES, max_bytes: int = LOG_TAIL_MAX_BYTES) -> str:
    """The end of the job's driver log: its last `lines` lines, and of those at most the last
    `max_bytes` bytes ('' when Ray has none). Never the whole log: Ray's log API reads the lines from
    the end of the file, and what arrives is kept in a buffer of `max_bytes` at most."""
    resp = _open_log(submission_id, lines=lines)
    if resp is None:
        return ""
    kept, cut = bytearray(), False
    try:
        with resp:
            while chunk := resp.read(_LOG_CHUNK):
                kept += chunk
                if len(kept) > max_bytes:
                    del kept[:len(kept) - max_bytes]
                    cut = True
    except Exception as exc:  # noqa: BLE001 - a connection cut mid-way
        raise RayUnavailable(f"Ray's log of {submission_id}: {exc}") from exc
    text = kept.decode("utf-8", "replace")
    if cut and "\n" in text:
        text = text[text.index("\n") + 1:]  # cut at a byte bound: drop the partial first line
    return text


def log_chunks(submission_id: str, *, max_bytes: int):
    """The job's driver log from its start, as byte chunks, and whether it was cut: (chunks, cut) where
    `chunks` is an iterator that stops after `max_bytes` bytes and `cut()` says afterwards whether there
    was more. RayUnavailable is raised here, before the first chunk; ([], ...) when Ray has no log."""
    resp = _open_log(submission_id, lines=-1)
    state = {"cut": False}

    def chunks():
        if resp is None:
            return
        sent = 0
        with resp:
            while sent < max_bytes:
                try:
                    chunk = resp.read(min(_LOG_CHUNK, max_bytes - sent))
                except Exception:  # noqa: BLE001 - the connection dropped mid-download: stop there
                    state["cut"] = True
                    return
                if not chunk:
                    return
                sent += len(chunk)
                yield chunk
            state["cut"] = bool(resp.read(1))

    return chunks(), lambda: state["cut"]


def tail_lines(text: str, n: int) -> str:
    """The last `n` non-empty lines of `text`."""
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:])


# How long this process keeps Ray's answer on the cluster's total GPUs (or its failure): a launch, its
# queue pass and the run form's preview, which asks on every edit, ask Ray at most once in that time.
CLUSTER_TOTAL_TTL_S = 5.0
# {Ray's address: (monotonic time asked, answer)}: another address (settings changed) is asked afresh.
_total_cache: dict[str, tuple[float, float | RayUnavailable]] = {}


def cluster_total_gpus_clear() -> None:
    """Forget the cached totals (tests; the next `cluster_total_gpus` asks Ray)."""
    _total_cache.clear()


def cluster_total_gpus() -> float:
    """GPUs the cluster has in all (sum over alive nodes), from the dashboard's node summary; Ray's
    answer (or RayUnavailable: unreachable, or an answer that does not parse) is kept
    CLUSTER_TOTAL_TTL_S seconds per process and per Ray address (`cluster_total_gpus_clear` forgets
    it)."""
    address = ray_address()
    now = time.monotonic()
    cached = _total_cache.get(address)
    if cached is not None and now - cached[0] < CLUSTER_TOTAL_TTL_S:
        answer = cached[1]
    else:
        try:
            answer = _ask_cluster_total_gpus(address)
        except RayUnavailable as exc:
            answer = exc
        _total_cache.clear()  # one address at a time: an old one's answer is never read again
        # Kept from when Ray answered (or gave up, up to its 5 s timeout later), not from the asking.
        _total_cache[address] = (time.monotonic(), answer)
    if isinstance(answer, RayUnavailable):
        raise answer
    return answer


def _ask_cluster_total_gpus(address: str) -> float:
    url = address + "/nodes?view=summary"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.loads(resp.read().decode("utf-8"))
        total = 0.0
        for node in (body.get("data") or {}).get("summary") or []:
            raylet = node.get("raylet") or {}
            if str(raylet.get("state", "ALIVE")).upper() != "ALIVE":
                continue
            total += float((raylet.get("resourcesTotal") or {}).get("GPU", 0.0))
    except Exception as exc:  # noqa: BLE001 - unreachable, or an answer not shaped as expected
        raise RayUnavailable(f"{url}: {exc}") from exc
    return total
