"""A Celery worker whose Ray submission stalls right after Ray accepted the job (test use only).

`python tests/e2e/slow_submit_worker.py -A rlstudio worker ...` runs the real worker with one change:
`rlstudio.runs.ray_jobs.submit` writes the submission id to $RLSTUDIO_TEST_SUBMIT_MARKER once Ray has
the job and then sleeps, inside run_submit's transaction, before anything is committed or acked.
That holds the worker at the one moment a crash is worst (the job exists in Ray, the database and
the broker do not know it yet), so tests/e2e/test_fault_worker_killed.py can SIGKILL it there.
Nothing in the platform knows about this file; the production worker is `celery -A rlstudio worker`.
"""
import os
import sys
import time
from pathlib import Path


def main() -> None:
    from rlstudio.runs import ray_jobs

    marker = Path(os.environ["RLSTUDIO_TEST_SUBMIT_MARKER"])
    submit = ray_jobs.submit

    def submit_then_stall(**kwargs):
        created = submit(**kwargs)
        marker.write_text(kwargs["submission_id"])
        time.sleep(3600)  # killed here by the test
        return created

    ray_jobs.submit = submit_then_stall
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
