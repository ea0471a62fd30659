"""`{% run_evaluations %}`: the run page's "Evaluations" card (the form for whoever manages the run,
the newest finished evaluation as a curve, a table and the prompts x columns matrix whose cells open
their transcripts, and the list with a stop button on an active one and a failed one's error, with
its error log for whoever manages the run).

`{% model_evaluations %}`: the same card on a catalog model's page (the form for whoever sees a policy
model, with the rewards it may be scored with; the user's own evaluations of it, staff: all, each with
its reward, mean@k, pass@k and maj@k; the newest finished one's prompts, whose cells open their
transcripts)."""
from django import template

from rlstudio.catalog.rewardcheck import reward_names
from rlstudio.catalog.selectors import dataset_list_for
from rlstudio.runs.checkpoints import checkpoint_steps
from rlstudio.runs.selectors import can_manage

from ..matrix import matrix_rows
from ..models import ACTIVE_EVALUATION_STATUSES, Evaluation, EvaluationStatus
from ..selectors import evaluation_error_log_for, evaluation_queue_reason_for, model_evaluations_of
from ..services import DEFAULT_SAMPLING, MAX_GPUS, MAX_K, MAX_NEW_TOKENS, MAX_PROMPTS

register = template.Library()


def gpu_choices(user) -> tuple[list[int], str]:
    """The GPU counts the evaluation form offers `user` (0, the CPU, always; then each up to MAX_GPUS their
    quotas allow at once: the rule a submitted evaluation is refused by, `gpus_refusal`), and the sentence
    of the first count left out ('' when none is)."""
    from rlstudio.runs.services.cluster import gpus_refusal

    choices = [0]
    for n in range(1, MAX_GPUS + 1):
        if why := gpus_refusal(user=user, gpus=n, what="evaluation"):
            return choices, why
        choices.append(n)
    return choices, ""


@register.inclusion_tag("evaluations/run_section.html", takes_context=True)
def run_evaluations(context):
    """Context of the card for `run` (already checked readable by the run page's view)."""
    run, user = context["run"], context["request"].user
    evaluations = list(Evaluation.objects.filter(run=run).select_related("dataset", "run")[:20])
    done = next((e for e in evaluations if e.status == EvaluationStatus.SUCCEEDED), None)
    manage = can_manage(user=user, run=run)
    data = {"api": f"/api/v1/runs/{run.pk}/evaluations/", "latest": None}
    if done is not None:
        data["latest"] = {"id": done.pk, "k": done.k, "columns": done.columns,
                          "figures": (done.results or {}).get("checkpoints", []),
                          "prompts": matrix_rows(done.results, done.columns)}
    for e in evaluations:
        e.active = e.status in ACTIVE_EVALUATION_STATUSES
        e.error_detail = evaluation_error_log_for(user=user, ev=e)  # "" for a reader
        e.shown_reason = evaluation_queue_reason_for(user=user, ev=e)  # no team of the owner's for a reader
    return {"run": run, "can_manage": manage, "evaluations": evaluations, "latest": done, "eval_data": data,
            "steps": list(checkpoint_steps(run)) if manage else [],
            "datasets": list(dataset_list_for(user=user).filter(status="ready")[:100]) if manage else [],
            **_gpu_context(user, manage), "defaults": DEFAULT_SAMPLING, "max_k": MAX_K, "max_prompts": MAX_PROMPTS,
            "max_new_tokens": MAX_NEW_TOKENS, "csrf_token": context.get("csrf_token")}


def _gpu_context(user, shown: bool) -> dict:
    """The form's `gpu_choices` and `gpu_note` (`gpu_choices`), read only when the form is shown."""
    choices, note = gpu_choices(user) if shown else ([0], "")
    return {"gpu_choices": choices, "gpu_note": note}


def reward_choices() -> list[str]:
    """The rewards a model's evaluation may name (those a run's `reward.name` may be: the built-ins and
    the operator's ready reward functions, `catalog.rewardcheck.reward_names`), `default` first."""
    names = reward_names()
    return ["default"] + [name for name in names if name != "default"]


@register.inclusion_tag("evaluations/model_section.html", takes_context=True)
def model_evaluations(context):
    """Context of the card for catalog `model` (already checked visible by the model page's view)."""
    model, user = context["model"], context["request"].user
    evaluations = list(model_evaluations_of(user=user, model=model)[:20])
    done = next((e for e in evaluations if e.status == EvaluationStatus.SUCCEEDED), None)
    for e in evaluations:
        e.active = e.status in ACTIVE_EVALUATION_STATUSES
        e.error_detail = evaluation_error_log_for(user=user, ev=e)
        e.shown_reason = evaluation_queue_reason_for(user=user, ev=e)
        figures = (e.results or {}).get("checkpoints") or []
        e.figure = figures[0] if figures and isinstance(figures[0], dict) else None
        e.n_prompts = len((e.results or {}).get("prompts") or []) if e.results else None
    can_evaluate = model.kind == "policy"
    data = {"api": f"/api/v1/models/{model.pk}/evaluations/", "latest": None, "labels": {"base": model.name}}
    if done is not None:
        data["latest"] = {"id": done.pk, "k": done.k, "columns": done.columns,
                          "figures": (done.results or {}).get("checkpoints", []),
                          "prompts": matrix_rows(done.results, done.columns)}
    return {"model": model, "user": user, "can_evaluate": can_evaluate, "not_policy": not can_evaluate,
            "evaluations": evaluations, "latest": done, "eval_data": data,
            "datasets": list(dataset_list_for(user=user).filter(status="ready")[:100]) if can_evaluate else [],
            "rewards": reward_choices() if can_evaluate else [],
            **_gpu_context(user, can_evaluate),
            "defaults": DEFAULT_SAMPLING, "max_k": MAX_K, "max_prompts": MAX_PROMPTS,
            "max_new_tokens": MAX_NEW_TOKENS, "csrf_token": context.get("csrf_token")}
