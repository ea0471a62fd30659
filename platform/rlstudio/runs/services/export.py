"""A finished run's exported policy in the catalog: the trainer writes `huggingface/` (the merged
model; with LoRA also `lora_adapter/` next to it) into the run's own folder at the end of a run that
succeeds; `run_register_export` checks that folder as any model is checked and registers it for the
run's owner (source `run_export`, linked to the run). `on_run_succeeded` sends the task that does it
after each transition to succeeded."""
from __future__ import annotations

import logging

from ..models import Run, RunStatus
from .transitions import TransitionMade

log = logging.getLogger(__name__)
EXPORT_FOLDER = "huggingface"


def run_register_export(*, run_id: int):
    """Register run `run_id`'s export (a ModelAsset), or None when the run wrote none. The folder comes
    from the run's record (launch.run_folder), never from a user; the model check runs inside it."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.catalog.services.model_assets import model_register

    from .. import launch

    run = Run.objects.select_related("owner").get(pk=run_id)
    folder = launch.run_folder(run)
    export = folder / EXPORT_FOLDER
    if run.status != RunStatus.SUCCEEDED or not (export / "config.json").is_file():
        return None
    return model_register(owner=run.owner, name=f"{run.name} (run {run.pk})", path=str(export),
                          source=ModelAsset.Source.RUN_EXPORT, source_run=run, roots=[folder])


def on_run_succeeded(made: TransitionMade) -> None:
    """The transition hook: a run that succeeded gets its export registered by a Celery task."""
    if made.after != RunStatus.SUCCEEDED:
        return
    from rlstudio.config.celery import publish

    error = publish("runs.register_export", made.run_id)
    if error is not None:
        log.warning("run %s: the export's registration was not sent (%s); register it again from the "
                    "run page or the API", made.run_id, error)
