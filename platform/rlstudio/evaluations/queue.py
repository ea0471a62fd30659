"""Queued evaluations in the platform's one queue (`rlstudio.runs.queue`): registered with the runs'
admission by the app's `ready`, so that one pass admits queued runs and evaluations in the order they
were queued, against the same quotas and GPUs."""
from __future__ import annotations

from rlstudio.runs.dispatch import broker_was_down
from rlstudio.runs.queue import NEVER_PREFIX, Attempt, QueuedJob
from rlstudio.runs.services.admission import clip_reason
from rlstudio.runs.services.queue_order import q_ahead
from rlstudio.runs.services.queue_registry import QueuedKind

from .models import Evaluation, EvaluationStatus
from .services import QUEUE_KIND, evaluation_admit, evaluation_job


class EvaluationQueue(QueuedKind):
    kind = QUEUE_KIND

    def queued(self) -> list[QueuedJob]:
        return [evaluation_job(ev) for ev in Evaluation.objects.filter(status=EvaluationStatus.QUEUED)]

    def earlier_of(self, *, job: QueuedJob) -> str:
        # One that can never be admitted as it is (its reason says so) holds none of its owner's back.
        q = q_ahead(job, kind=self.kind)
        if q is None:
            return ""
        ev = (Evaluation.objects.filter(owner=job.owner_id, status=EvaluationStatus.QUEUED)
              .exclude(queue_reason__startswith=NEVER_PREFIX).filter(q).order_by("created", "id").first())
        return "" if ev is None else f"evaluation #{ev.pk}"

    def try_admit(self, *, job_id: int, cluster_free_gpus: float | None) -> Attempt | None:
        admitted = evaluation_admit(evaluation_id=job_id, cluster_free_gpus=cluster_free_gpus)
        if admitted is None:  # deleted, or its row locked elsewhere: not tried this pass
            return None
        # Admitted while the task queue was down at its last try: its submission tries it again and
        # the pass stops there (as for runs: `_try_admit_run`).
        if admitted:
            return Attempt(admitted=True, unsent=broker_was_down())
        ev = Evaluation.objects.filter(pk=job_id).values("status", "queue_reason").first()
        if ev is None or ev["status"] != EvaluationStatus.QUEUED:
            return None
        reason = ev["queue_reason"]
        return Attempt(admitted=False, reason=reason, cluster=reason.startswith("the cluster"))

    def count_ahead(self, *, job: QueuedJob) -> int:
        q = q_ahead(job, kind=self.kind)
        return 0 if q is None else Evaluation.objects.filter(status=EvaluationStatus.QUEUED).filter(q).count()

    def hold(self, *, job_ids: list[int], reason: str) -> None:
        reason = clip_reason(reason)  # the one rule (runs' `_hold_runs` too), so the comparison holds
        (Evaluation.objects.filter(pk__in=job_ids, status=EvaluationStatus.QUEUED).exclude(queue_reason=reason)
         .update(queue_reason=reason))
