"""Register the demo content (idempotent); the launcher runs it in the background after start-up.

    python manage.py rlstudio_demo [--user admin] [--warm-steps 600] [--gsm8k PATH] [--no-gsm8k]
                                   [--wait 600] [--val-rows 128]

For the owner (the admin, who must be staff), in this order, each shared with everyone (read-only for the
other users, who launch runs on them without registering anything):
1. the untrained tiny demo model (quick; it also gives the datasets' token statistics);
2. the GSM8K test split, uploaded through the same service as a browser upload;
3. the arithmetic demo datasets (`trainer.tasks.arith`: 4,096 train rows, 128 held-out rows, or
   --val-rows / RLSTUDIO_DEMO_VAL_ROWS: the launcher's end-to-end test uses 8), written
   in the trainer's row format (verl's shape, the calculator in `extra_info.tools` /
   `tools_kwargs`) and uploaded with the "verl" preset, so the Celery worker validates and converts
   them like any upload;
4. the warm-started demo model (`trainer.models.demo`, bounded by --warm-steps), built once under
   STATE_DIR/models and reused by later starts;
5. once the worker has validated the datasets: the saved RunConfig "Demo: tool-calling arithmetic
   (GRPO)", recipe `demo_tool_arith` with the paths of the model and both datasets. Launching it is
   one click on the runs page (rlstudio.demo.services).
All along it keeps STATE_DIR/demo/status.json current (stage, warm-start steps done), which the
runs page reads to say "the demo model is being prepared (N s left)"; it ends "ready" or "failed".
Every step is idempotent: a second call finds everything and only refreshes the config.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files import File
from django.core.management.base import BaseCommand, CommandError

from rlstudio.catalog.models import Dataset, Visibility
from rlstudio.catalog.services.datasets import dataset_upload
from rlstudio.catalog.services.model_assets import model_register_demo
from rlstudio.catalog.sharing import catalog_set_visibility

ARITH_TRAIN_ROWS, ARITH_VAL_ROWS = 4096, 128  # what bench/learning.py measured the demo with
ARITH_TRAIN_NAME, ARITH_VAL_NAME = "demo-arith-train", "demo-arith-heldout"


def arith_rows(split: str, n: int, seed: int) -> list[dict]:
    """The arithmetic task's RL rows with the calculator spelled out as `demo_tool_arith` expects."""
    from trainer.tasks import arith

    rows = arith.make_rl_rows(split, n, seed=seed)
    for row in rows:
        row["ability"] = "math"
        row["extra_info"]["tools_kwargs"] = {"calculator": {"create_kwargs": {}}}
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def _raise_on_sigterm(signum, _frame):
    raise SystemExit(f"stopped by signal {signum} before the demo was ready")


class Command(BaseCommand):
    help = "Register the demo model, datasets and the one-click demo config (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--user", default=None, help="owner (default: the first superuser)")
        parser.add_argument("--warm-steps", type=int, default=None,
                            help="warm-start SFT steps of the demo model (default: trainer.models.demo's)")
        # The GSM8K test split the repository carries (MIT; tests/fixtures/gsm8k/README.md).
        parser.add_argument("--gsm8k", default=str(Path(settings.BASE_DIR) / "tests" / "fixtures" / "gsm8k" / "test.jsonl"),
                            help="the GSM8K test split to register as gsm8k-test (JSONL)")
        parser.add_argument("--no-gsm8k", "--no-dataset", dest="no_gsm8k", action="store_true",
                            help="do not upload the GSM8K test split")
        parser.add_argument("--wait", type=float, default=600.0,
                            help="seconds to wait for the worker to validate the demo datasets")
        parser.add_argument("--val-rows", type=int,
                            default=int(os.environ.get("RLSTUDIO_DEMO_VAL_ROWS") or ARITH_VAL_ROWS),
                            help=f"held-out rows of the demo (env RLSTUDIO_DEMO_VAL_ROWS; default {ARITH_VAL_ROWS}): "
                                 "the demo validates on all of them before its first step")

    def handle(self, *args, **opts):
        from rlstudio.demo.services import write_status

        User = get_user_model()
        if opts["user"]:
            user = User.objects.filter(username=opts["user"]).first()
        else:
            user = User.objects.filter(is_superuser=True).order_by("id").first()
        if user is None:
            raise CommandError("no such user (create the admin first, or pass --user)")
        if not user.is_staff:
            raise CommandError(f"the demo owner {user.get_username()!r} must be staff: the demo kit is a "
                               "staff-owned config, model and datasets shared with everyone")
        if opts["warm_steps"] is not None and opts["warm_steps"] < 2:
            raise CommandError(f"--warm-steps must be >= 2 (one per warm-start phase), got {opts['warm_steps']}")
        if opts["val_rows"] < 1:
            raise CommandError(f"--val-rows must be >= 1, got {opts['val_rows']}")
        # The launcher stops a preparation still running with SIGTERM: end through the handler below,
        # so the status says "failed: stopped" instead of going stale.
        signal.signal(signal.SIGTERM, _raise_on_sigterm)
        self.status = {"state": "preparing", "stage": "datasets", "started": time.time()}
        write_status(**self.status)
        try:
            self._prepare(user, opts)
        except BaseException as exc:
            write_status(**{**self.status, "state": "failed", "error": f"{type(exc).__name__}: {exc}"[:1000]})
            raise
        write_status(**{**self.status, "state": "ready", "stage": "done", "finished": time.time()})

    def _stage(self, stage: str, **fields) -> None:
        from rlstudio.demo.services import write_status

        self.status.update(stage=stage, **fields)
        write_status(**self.status)

    @staticmethod
    def _share(item, user):
        catalog_set_visibility(item=item, by=user, visibility=Visibility.EVERYONE)
        return item

    def _prepare(self, user, opts) -> None:
        base = self._share(model_register_demo(owner=user), user)
        self.stdout.write(f"model {base.name} (id {base.pk}, {base.num_parameters} parameters) at {base.path}")
        if not opts["no_gsm8k"]:
            path = Path(opts["gsm8k"])
            if not path.is_file():
                self.stderr.write(f"GSM8K file {path} not found: no GSM8K dataset registered")
            else:
                with open(path, "rb") as f:
                    gsm, created = dataset_upload(owner=user, upload=File(f, name=path.name), name="gsm8k-test",
                                                  preset="gsm8k", split="val", stats_model=base)
                self._share(gsm, user)
                self.stdout.write(f"dataset {gsm.name} (id {gsm.pk}, {gsm.status}, "
                                  f"{'new' if created else 'already there'})")

        data_dir = Path(settings.STATE_DIR) / "demo" / "data"
        datasets = {}
        for name, split, n, seed in ((ARITH_TRAIN_NAME, "train", ARITH_TRAIN_ROWS, 0),
                                     (ARITH_VAL_NAME, "val", opts["val_rows"], 1)):
            path = write_rows(data_dir / f"{name}.jsonl", arith_rows("train" if split == "train" else "test", n, seed))
            with open(path, "rb") as f:
                ds, created = dataset_upload(owner=user, upload=File(f, name=path.name), name=name, preset="verl",
                                             split=split, stats_model=base)
            datasets[split] = self._share(ds, user)
            self.stdout.write(f"dataset {ds.name} (id {ds.pk}, {ds.status}, {'new' if created else 'already there'})")

        # The long part; the worker validates the datasets meanwhile.
        from trainer.models.demo import WARM_START_STEPS, copy_gate_note

        steps = opts["warm_steps"] or WARM_START_STEPS
        self._stage("warm-start", warm_started=time.time(), steps_done=0, steps_total=steps)
        last = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 2.0 or done == total:
                last[0] = now
                # The first step reported: the pace is measured from it (demo.services.seconds_left).
                first = {} if "first_step_at" in self.status else {"first_step": done, "first_step_at": time.time()}
                self._stage("warm-start", steps_done=done, steps_total=total, **first)

        t0 = time.monotonic()
        model = self._share(model_register_demo(owner=user, warm_start=True, warm_start_steps=steps,
                                                progress=progress), user)
        info = json.loads((Path(model.path) / "warm_start.json").read_text())
        self.stdout.write(f"model {model.name} (id {model.pk}) at {model.path}: {info['steps']}/"
                          f"{info['steps_requested']} warm-start steps in {info['seconds']} s"
                          f"{copy_gate_note(info)}"
                          f"{' (SAFETY CAP HIT)' if info.get('cap_hit') else ''}; this call {time.monotonic() - t0:.1f} s")

        self._stage("validating the datasets")
        deadline = time.monotonic() + opts["wait"]
        for split, ds in datasets.items():
            ds.refresh_from_db()
            while ds.status == Dataset.Status.VALIDATING and time.monotonic() < deadline:
                time.sleep(0.5)
                self._stage("validating the datasets")
                ds.refresh_from_db()
            if ds.status != Dataset.Status.READY:
                why = (f"still validating after {opts['wait']:.0f} s (is the Celery worker running?)"
                       if ds.status == Dataset.Status.VALIDATING else f"{ds.status}: {ds.error}")
                raise CommandError(f"demo dataset {ds.name!r} is {why}")
            self.stdout.write(f"dataset {ds.name} ready ({ds.num_rows} rows)")

        self._stage("saving the demo config")
        config = self._save_config(user, model, datasets["train"], datasets["val"])
        self.stdout.write(f"config {config.name!r} (id {config.pk}) ready: one click launches it")

    def _save_config(self, user, model, train, val):
        from rlstudio.accounts.services import audit_record
        from rlstudio.runs import launch
        from rlstudio.demo.services import DEMO_CONFIG_NAME, DEMO_RECIPE
        from rlstudio.runs.models import RunConfig
        from trainer.recipes import REGISTRY

        try:
            config = launch.build_config(preset=DEMO_RECIPE, dataset=train, val_dataset=val, model=model)
        except launch.ConfigInvalid as exc:
            raise CommandError(f"the demo config does not validate: {exc.key}: {exc.message}") from None
        description = (f"{REGISTRY[DEMO_RECIPE].description}. Model {model.name}, datasets {train.name} / "
                       f"{val.name}. Launch it with one click on the runs page.")
        saved, created = RunConfig.objects.update_or_create(
            owner=user, name=DEMO_CONFIG_NAME, defaults={"config": config, "description": description})
        if created:
            audit_record(actor=user, action="config.create", obj=saved, data={"name": DEMO_CONFIG_NAME})
        return saved
