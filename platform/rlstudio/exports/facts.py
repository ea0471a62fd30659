"""What a model card says about a run (`card.CardFacts`), read from the platform's records: the run's
model and datasets by their catalog names, its frozen config seen as its user owns it
(`runs.gate.changes.user_view`: every key the platform sets reset, so no server path), the held-out reward
from the stored metrics, and the finished evaluations that include the exported step."""
from __future__ import annotations

from typing import Any

from rlstudio.runs.gate.changes import user_view
from rlstudio.runs.gate.flat import changed_keys, flatten
from rlstudio.runs.gate.keys import USER_KEYS

from .card import CardFacts, EvalFigures, HeldOut

# Keys of the config that are not about the model the run trained (how it reported, where it logged).
NOT_ABOUT_THE_MODEL = ("report.", "trainer.logger", "trainer.project_name", "trainer.experiment_name")


def user_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The user-settable keys (gate.keys.USER_KEYS) whose values differ from the trainer's defaults, dotted.
    A string value that looks like an absolute path is left out, whatever its key."""
    flat = flatten(user_view(config or {}))
    out = {}
    for key in changed_keys({}, flat):
        if key not in USER_KEYS or key.startswith(NOT_ABOUT_THE_MODEL):
            continue
        value = flat[key]
        if isinstance(value, str) and value.startswith(("/", "~", "\\")):
            continue
        out[key] = value
    return out


def _visible_to(owner, dataset) -> bool:
    return dataset.owner_id == owner.pk or dataset.visibility == "everyone"


def card_facts(*, run, step: int, lora: bool) -> CardFacts:
    """The facts of the card of checkpoint `step` of `run`."""
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.telemetry.compare import held_out_of

    flat = flatten(run.config or {})
    datasets = [("training", run.dataset.name)]
    if run.val_dataset_id:
        datasets.append(("validation", run.val_dataset.name))
    lora_cfg = None
    if lora:
        lora_cfg = {"rank": flat.get("actor_rollout_ref.model.lora_rank", 0),
                    "alpha": flat.get("actor_rollout_ref.model.lora_alpha"),
                    "target_modules": flat.get("actor_rollout_ref.model.target_modules")}
    held = [HeldOut(metric=k, **v) for k, v in sorted(held_out_of(run.pk).items())]
    figures = []
    for ev in (Evaluation.objects.filter(run=run, status=EvaluationStatus.SUCCEEDED)
               .select_related("dataset").order_by("created", "id")):
        # A dataset of someone else the run's owner may not see stays unnamed in the owner's card.
        name = ev.dataset.name if _visible_to(run.owner, ev.dataset) else "(a dataset not shared with the run's owner)"
        prompts = len((ev.results or {}).get("prompts", []))
        columns = (ev.results or {}).get("checkpoints", [])
        mine = [c for c in columns if not c.get("base") and c.get("step") == step]
        base = [c for c in columns if c.get("base")]
        for label, c in [(f"step {step}", c) for c in mine] + [("base model", c) for c in base if mine]:
            figures.append(EvalFigures(model=label, dataset=name, k=ev.k, prompts=prompts,
                                       mean_at_k=float(c["mean_at_k"]), pass_at_k=float(c["pass_at_k"]),
                                       maj_at_k=float(c["maj_at_k"])))
    estimator = flat.get("algorithm.adv_estimator") or "grpo"
    loss = flat.get("actor_rollout_ref.actor.policy_loss.loss_mode") or "vanilla"
    return CardFacts(run_id=run.pk, run_name=run.name, step=step, run_step=max(run.step or 0, step),
                     base_model=run.model.name, datasets=datasets,
                     algorithm=str(estimator) if loss == "vanilla" else f"{estimator} ({loss} policy loss)",
                     lora=lora_cfg, settings=user_settings(run.config), held_out=held, evaluations=figures)
