"""New runs and where they come from: a new run from a config, a resume, a clone, a saved config.

Every config a user gives passes the config gate and the trainer's schema here (launch.build_config)
before anything is queued; each new run is checked against its owner's queued-runs cap, and its GPUs
against its owner's quota's max_gpus (`_check_gpus`: a run that could only wait forever is refused,
not queued; more GPUs than the cluster has now is accepted and waits, as GPUs may join).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.conf import settings
from django.db import connection, transaction

from rlstudio.accounts.services import audit_record
from rlstudio.retention import Retention, RetentionInvalid, retention_check

from ..models import Run
from ..selectors import trained_to_the_end
from .admission import queue_admit_launched, run_launch_recorded
from .cluster import gpus_refusal
from .queue_registry import quota_policy
from .creation import run_create
from ..errors import RunInputInvalid, RunRefused


def run_new(
    *,
    owner: AbstractBaseUser,
    name: str,
    dataset,
    model,
    gpus: int = 0,
    val_dataset=None,
    preset: str | None = None,
    config: dict[str, Any] | None = None,
    saved: dict[str, Any] | None = None,
    overrides=None,
    tool_set: str = "",
    reward_model=None,
    admit: bool = True,
    project: int | None = None,
    tags=None,
    retention=None,
) -> Run:
    """Validate the config (the gate, then the trainer's schema, before anything is queued), create
    the run, launch it.

    `config` is a whole config the user typed, `saved` a stored one (a saved config), `preset` a
    recipe name; `overrides` are the user's dotted keys. `dataset` / `model` / `reward_model` are
    objects the caller already checked the owner may see. A dataset that is not ready is refused: the
    trainer would fail on it minutes later. `tool_set` names an operator-registered tool set. The
    model must be a policy and `reward_model` (optional) a reward model of the catalog (their kind).
    With `admit` False the run is only recorded, queued: a caller inside its own transaction (the run
    form saves a config with it) commits, then calls `run_launch_admit`. `project` (an id) puts the run
    in a project of `owner`'s (another's, or none by that id: RunInputInvalid on `project`). `tags` are
    the run's tags (`sharing.clean_tags`); `retention` an object {"mode", "k"} (k defaults to 1), the
    run's sample retention, checked as PUT /api/v1/runs/{id}/retention/ checks it (RunInputInvalid on
    `retention.mode` or `retention.k`; None: keep every sample).
    """
    from .sharing import check_project_of, clean_tags

    check_model_kinds(model=model, reward_model=reward_model)
    check_project_of(owner=owner, project_id=project)
    checked_retention = clean_retention(retention)
    tags = clean_tags(tags) if tags is not None else []
    status = getattr(dataset, "status", "ready")
    if status != "ready":
        raise RunInputInvalid(f"dataset {dataset.name!r} is {status}, not ready", field="dataset")
    if val_dataset is not None and getattr(val_dataset, "status", "ready") != "ready":
        raise RunInputInvalid(f"dataset {val_dataset.name!r} is not ready", field="val_dataset")
    if gpus < 0:
        raise RunInputInvalid("gpus must be >= 0", field="gpus")
    _check_gpus(owner=owner, gpus=gpus)
    if tool_set:
        from rlstudio.registry.services import tool_set_names

        if tool_set not in tool_set_names():
            raise RunInputInvalid(f"no ready tool set named {tool_set!r}", field="tool_set")
    frozen = _config_or_invalid(preset=preset, config=config, base=saved, overrides=overrides,
                                dataset=dataset, val_dataset=val_dataset, model=model, gpus=gpus,
                                reward_model=reward_model)
    if tool_set and not frozen["actor_rollout_ref"]["rollout"]["multi_turn"]["enable"]:
        raise RunInputInvalid("a tool set is offered only in multi-turn rollout: set "
                              "actor_rollout_ref.rollout.multi_turn.enable=true", field="tool_set")
    return _create_and_launch(owner=owner, by=owner, name=name, dataset=dataset, model=model,
                              val_dataset=val_dataset, config=frozen, gpus=gpus, tool_set=tool_set,
                              reward_model=reward_model, audit=("", {}), admit=admit, project_id=project,
                              tags=tags, retention=checked_retention)


def clean_retention(retention) -> Retention | None:
    """A launch's `retention` ({"mode", "k"}, or None) as a Retention; RunInputInvalid naming
    `retention`, `retention.mode` or `retention.k` (the checks of rlstudio.retention)."""
    if retention is None or isinstance(retention, Retention):
        return retention
    if not isinstance(retention, Mapping):
        raise RunInputInvalid(f'retention must be an object {{"mode": ..., "k": N}}, got {type(retention).__name__}',
                              field="retention")
    extra = sorted(set(retention) - {"mode", "k"})
    if extra:
        raise RunInputInvalid(f"retention takes mode and k only, not {str(extra[0])[:40]!r}", field="retention")
    if "mode" not in retention:
        raise RunInputInvalid("retention.mode is required (all, per_step or every_kth_step)", field="retention.mode")
    try:
        return retention_check(retention["mode"], retention.get("k", 1))
    except RetentionInvalid as exc:
        raise RunInputInvalid(str(exc), field=f"retention.{exc.field}") from None


def check_model_kinds(*, model, reward_model) -> None:
    """A run trains a policy (a causal LM) and scores with a reward model: a catalog model of the
    other kind is refused on its field (a reward model cannot generate; a policy gives no score)."""
    if model is not None and getattr(model, "kind", "policy") != "policy":
        raise RunInputInvalid(f"model {model.name!r} is a reward model (a sequence-classification "
                              "checkpoint): choose it as reward_model_id, and a policy as the model", field="model")
    if reward_model is not None and getattr(reward_model, "kind", "policy") != "reward":
        raise RunInputInvalid(f"model {reward_model.name!r} is not a reward model: a run's reward model is a "
                              "catalog model of kind reward (a one-label sequence-classification checkpoint)",
                              field="reward_model_id")


def run_resume(*, run: Run, by: AbstractBaseUser) -> Run:
    """A new run (parent = `run`, kind resume) that continues from `run`'s last checkpoint.

    Only from a checkpoint in `run`'s own folder (the trainer's commit marker there, or the path it
    reported when that lies inside the folder); the new run records it, and its spec is made again
    from `run`'s record (its user keys, the platform's paths), never from what `run`'s config said.
    Only its owner or staff (RunNotPermitted for a user it is shared with)."""
    from .. import launch
    from .sharing import check_can_manage

    check_can_manage(user=by, run=run, action="resume")

    if not run.is_terminal:
        raise RunRefused(f"the run is {run.status}: only a finished run can be resumed (stop it first)")
    ckpt = launch.latest_checkpoint_of(run)
    if ckpt is None:
        raise RunRefused("the run has no checkpoint to resume from")
    if trained_to_the_end(run=run, checkpoint=str(ckpt)):
        raise RunRefused(f"the run succeeded with its last checkpoint at its last step ({run.total_steps}): a "
                         "resume would have no step left to train")
    _check_still_visible(run)
    _check_gpus(owner=run.owner, gpus=run.gpus, kind="resume", by=by)
    config = _config_or_invalid(base=run.config, dataset=run.dataset, val_dataset=run.val_dataset,
                                model=run.model, gpus=run.gpus, reward_model=run.reward_model, resume=True)
    new = _create_and_launch(
        owner=run.owner, by=by, name=f"{run.name} (resumed)"[:200], dataset=run.dataset, model=run.model,
        reward_model=run.reward_model, val_dataset=run.val_dataset, config=config, gpus=run.gpus, parent=run, parent_kind="resume",
        tool_set=run.tool_set, resume_from=str(ckpt), project_id=run.project_id,
        audit=("run.resume", {"parent": run.pk, "from": str(ckpt)}))
    return new


def run_clone(*, run: Run, by: AbstractBaseUser, name: str | None = None, overrides=None, retention=None) -> Run:
    """A new queued run with `run`'s config (its user keys; the platform's paths from `run`'s dataset
    and model; its own folder, no resume) and the caller's overrides, which go through the gate; its
    sample retention `retention` ({"mode", "k"}, checked as a launch's) or, None, `run`'s.
    Only its owner or staff: the clone is the owner's run (RunNotPermitted for a user it is shared with)."""
    from .sharing import check_can_manage

    check_can_manage(user=by, run=run, action="clone")
    retention = clean_retention(retention)
    _check_still_visible(run)
    _check_gpus(owner=run.owner, gpus=run.gpus, kind="clone", by=by)
    config = _config_or_invalid(base=run.config, overrides=overrides, dataset=run.dataset,
                                val_dataset=run.val_dataset, model=run.model, gpus=run.gpus,
                                reward_model=run.reward_model)
    return _create_and_launch(
        owner=run.owner, by=by, name=(name or f"{run.name} (clone)")[:200], dataset=run.dataset,
        model=run.model, reward_model=run.reward_model, val_dataset=run.val_dataset, config=config, gpus=run.gpus, parent=run,
        parent_kind="clone", tool_set=run.tool_set, project_id=run.project_id, retention=retention,
        audit=("run.clone", {"parent": run.pk}))


def _check_gpus(*, owner: AbstractBaseUser, gpus: int, kind: str = "", by: AbstractBaseUser | None = None) -> None:
    """RunInputInvalid on `gpus` when a run of `owner` on `gpus` GPUs could never be admitted: more than
    their quota allows at once (`cluster.gpus_refusal`; more than the cluster has in all now is
    accepted, and waits queued for GPUs to join). `kind` ("resume", "clone"): the new run asks as many
    as its source did (the quota may have been lowered since); `by`, who asks (staff read "its
    owner's quota")."""
    why = gpus_refusal(user=owner, gpus=gpus, by=by)
    if why:
        if kind:
            why += f" (a {kind} asks as many GPUs as the run it comes from)"
        raise RunInputInvalid(why, field="gpus")


def _check_still_visible(run: Run) -> None:
    """A clone or resume trains on the source run's dataset and model again: its owner must still be
    allowed to see them (a shared one may have been made private since)."""
    from django.http import Http404

    from rlstudio.catalog.selectors import dataset_get_for, model_asset_get_for

    for field, getter, kind in (("dataset", dataset_get_for, "dataset"), ("val_dataset", dataset_get_for, "dataset"),
                                ("model", model_asset_get_for, "model"),
                                ("reward_model", model_asset_get_for, "model")):
        obj_id = getattr(run, f"{field}_id")
        if obj_id is None:
            continue
        try:
            getter(user=run.owner, **{f"{kind}_id": obj_id})
        except Http404:
            raise RunInputInvalid(f"the run's {kind} (id {obj_id}) is no longer shared with its owner",
                                  field=field) from None


def _config_or_invalid(**kwargs) -> dict[str, Any]:
    """launch.build_config (its ConfigInvalid is a RunInputInvalid naming the config key)."""
    from .. import launch

    return launch.build_config(**kwargs)


def _create_and_launch(*, owner, by, audit: tuple[str, dict[str, Any]], resume_from: str = "",
                       tool_set: str = "", admit: bool = True, **fields) -> Run:
    """Create a queued run (refused past the owner's queued-runs cap) and record how it was made, in
    one transaction; once it commits, `run_launch_admit` (unless not `admit`: the caller calls it once
    its own transaction commits). A new, resumed or cloned run goes into the project given (the
    source run's for a resume or clone), locked so that it cannot be deleted before the run commits."""
    from .. import launch
    from .sharing import check_project_of

    policy = quota_policy()
    with transaction.atomic():
        # The lock order: the referenced rows', then the owner's.
        _lock_referenced(fields)
        check_project_of(owner=owner, project_id=fields.get("project_id"), lock=True)
        policy.lock_owner(user=owner)
        refusal = policy.queue_refusal(user=owner)
        if refusal:
            raise RunRefused(refusal)
        run, _token = run_create(owner=owner, total_steps=launch.total_steps_of(fields["config"]),
                                 tool_set=tool_set, resume_from=resume_from, **fields)
        action, data = audit
        if action:
            audit_record(actor=by, action=action, obj=run, data=data)
    if not admit:
        return run
    return run_launch_admit(run=run, by=by)


def run_launch_admit(*, run: Run, by: AbstractBaseUser) -> Run:
    """After a launch's transaction committed: one pass of the queue (`queue_admit_launched`) admits
    the run if its place in the one queue, its owner's quota and the cluster allow (the submit task is
    sent then), as every queued job is (the reconcile's pass may even come first): never ahead of an
    older queued job the pass would try before it. When the pass could not run (busy past its wait,
    or failed: logged) the run stays queued with `LAUNCH_PASS_REASON`, and is returned all the same.
    The launch is audited (`run.launch`)."""
    queue_admit_launched(Run, pk=run.pk)
    return run_launch_recorded(run=run, by=by)


def _lock_referenced(fields: dict[str, Any]) -> None:
    """Lock the rows the new run will reference (`rowlocks.lock_for_use`: its dataset, validation
    dataset, model, reward model and parent run) so none of them is deleted before the run commits; one
    deleted meanwhile is RunInputInvalid naming its field (`parent` is the run cloned or resumed: `run`)."""
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.rowlocks import lock_for_use

    refs = [("dataset", Dataset), ("val_dataset", Dataset), ("model", ModelAsset), ("reward_model", ModelAsset),
            ("parent", Run)]
    gone = lock_for_use((field, cls, getattr(fields.get(field), "pk", None)) for field, cls in refs)
    if gone is None:
        return
    obj = fields[gone]
    if gone == "parent":
        raise RunInputInvalid(f"the run {obj.name!r} (#{obj.pk}) was deleted", field="run")
    kind = "model" if "model" in gone else "dataset"
    raise RunInputInvalid(f"the {kind} {obj.name!r} (#{obj.pk}) was deleted",
                          field="reward_model_id" if gone == "reward_model" else gone)


_CONFIG_SAVE_LOCK_SPACE = 0x524C5343  # "RLSC": the advisory-lock key space of one owner's config saves


def run_config_save(*, owner: AbstractBaseUser, name: str, config: dict[str, Any] | None = None,
                    preset: str | None = None, overrides=None, description: str = "", gpus: int = 0,
                    adapt: bool = False):
    """Save a named config: what the user typed (through the gate), stored without the platform's keys
    (data and model paths, resources: a run sets them from its own record).

    It is checked as a run on `gpus` GPUs (0: the CPU) would be; with `adapt` a preset is first fitted
    to them as a launched run's is (the new-run form saves what its run starts from). An owner keeps at
    most RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER configs (staff included): past it, and for a name they
    already use, RunInputInvalid on `name`, checked under a per-owner advisory lock."""
    from .. import gate
    from ..models import RunConfig

    checked = _config_or_invalid(config=config or None, preset=None if config else (preset or None),
                                 overrides=overrides, gpus=gpus, adapt=adapt)
    with transaction.atomic():
        # One owner's saves count and create one at a time, so two at once cannot both pass the cap.
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_CONFIG_SAVE_LOCK_SPACE, owner.pk])
        if RunConfig.objects.filter(owner=owner, name=name).exists():
            raise RunInputInvalid(f"you already have a config named {name!r}", field="name")
        cap = settings.RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER
        held = RunConfig.objects.filter(owner=owner).count()
        if held >= cap:
            raise RunInputInvalid(f"you already have {held} saved configs, the most one user may keep "
                                  f"(RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER is {cap}); delete one first", field="name")
        saved = RunConfig.objects.create(owner=owner, name=name, config=gate.user_view(checked),
                                         description=description)
        audit_record(actor=owner, action="config.create", obj=saved, data={"name": name})
    return saved
