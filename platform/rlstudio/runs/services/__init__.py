"""Writes of the runs app, by concern; every public service is importable from here.

    transitions  THE run state machine (`run_transition`) and `run_reach`, the one rule for reaching
                 a state Ray or the trainer reports
    creation     a queued run's record and its ingest token; the `on_run_created` hooks (its retention)
    admission    quotas, the cluster and the fair queue (`run_admit`, `queue_admit_all`, `run_queue_move`);
                 what it asks is registered in queue_registry, the queue's order is queue_order's,
                 the cluster's GPUs cluster's
    submission   submit to Ray, re-send, adopt a job a lost task made, record progress
    stop         cancel, graceful stop, force kill
    lineage      new runs from a config, resume, clone, saved configs (the config gate runs here)
    fork         a new run from one kept checkpoint of a finished run, with fork-changeable keys changed
    deletion     deleting a finished run: its records (after the `on_run_delete` hooks), then its folder;
                 `runs_delete`, many runs at once, all or none
    sharing      who controls a run (owner, staff), its tags and note, sharing it read-only, its project
    export       a succeeded run's exported policy registered in the catalog
    errors       RunRefused (409), RunInputInvalid (400 naming the field), RunNotPermitted (403),
                 RunsNotDeleted (a bulk delete refused: a DeleteRefusal per run in the way)
"""
from .admission import (
    SUBMIT_UNSENT_REASON,
    queue_admit_all,
    queue_admit_launched,
    queue_paused,
    run_admit,
    run_launch_recorded,
    run_queue_move,
    run_requeue_unsent,
)
from .queue_order import QUEUE_ORDER
from .creation import INGEST_TOKEN_PREFIX, on_run_created, run_create, run_issue_ingest_token, run_token_check, token_hash
from ..errors import DeleteRefusal, RunInputInvalid, RunNotPermitted, RunRefused, RunsNotDeleted
from .deletion import (
    bulk_delete_max,
    bulk_delete_refusals,
    clean_run_ids,
    delete_refusal,
    on_run_delete,
    run_delete,
    runs_delete,
)
from .export import on_run_succeeded, run_register_export
from .fork import run_fork
from .lineage import clean_retention, run_clone, run_config_save, run_launch_admit, run_new, run_resume
from .sharing import (
    check_can_manage,
    check_project_of,
    on_access_changed,
    run_annotate,
    run_set_project,
    run_share,
    runs_access_changed,
)
from .stop import run_force_kill, run_output_dir, run_stop
from .submission import (
    on_job_adopted,
    run_adopt_job,
    run_record_progress,
    run_resubmit,
    run_submit,
)
from .transitions import (
    ALLOWED_TRANSITIONS,
    IllegalTransition,
    TransitionMade,
    on_run_transition,
    run_fail_unsubmitted,
    run_mark_finished,
    run_mark_running,
    run_reach,
    run_transition,
    transition_path,
)

__all__ = [
    "ALLOWED_TRANSITIONS", "INGEST_TOKEN_PREFIX", "QUEUE_ORDER", "SUBMIT_UNSENT_REASON", "clean_retention",
    "IllegalTransition", "RunInputInvalid", "RunNotPermitted", "RunRefused", "TransitionMade", "check_can_manage",
    "on_run_created", "on_run_succeeded", "on_run_transition", "run_register_export",
    "delete_refusal", "on_run_delete", "run_delete", "runs_delete", "bulk_delete_max",
    "bulk_delete_refusals", "clean_run_ids", "DeleteRefusal", "RunsNotDeleted", "run_annotate", "run_share", "run_set_project", "runs_access_changed", "check_project_of", "on_access_changed", "on_job_adopted",
    "queue_admit_all", "queue_paused", "run_adopt_job", "run_admit", "run_clone", "run_config_save", "run_create",
    "run_force_kill", "run_fork", "run_issue_ingest_token", "queue_admit_launched", "run_launch_admit", "run_launch_recorded", "run_queue_move", "run_fail_unsubmitted", "run_mark_finished",
    "run_mark_running", "run_new", "run_output_dir", "run_reach", "run_record_progress",
    "run_requeue_unsent", "run_resubmit", "run_resume", "run_stop", "run_submit", "run_token_check",
    "run_transition", "token_hash", "transition_path",
]
