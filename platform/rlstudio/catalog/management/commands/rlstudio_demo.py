"""Register the demo content on first start (idempotent); the launcher runs it.

    python manage.py rlstudio_demo [--user admin] [--warm-start] [--gsm8k PATH] [--no-dataset]

Builds and registers the trainer's tiny demo model (optionally warm-started with trainer.sft),
uploads the GSM8K test split through the same service as a browser upload (validated by the
Celery worker), and saves a `demo_tool_arith` RunConfig when the user has none of that name.
"""
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files import File
from django.core.management.base import BaseCommand, CommandError

from rlstudio.catalog.services import dataset_upload, model_register_demo

DEMO_CONFIG_NAME = "demo_tool_arith"


class Command(BaseCommand):
    help = "Register the demo model, the GSM8K test split and a demo RunConfig (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--user", default=None, help="owner (default: the first superuser)")
        parser.add_argument("--warm-start", action="store_true", help="also warm-start the model (slow)")
        parser.add_argument("--gsm8k", default=str(Path(settings.BASE_DIR).parent / "shared" / "data" / "gsm8k" / "test.jsonl"))
        parser.add_argument("--no-dataset", action="store_true")

    def handle(self, *args, **opts):
        User = get_user_model()
        if opts["user"]:
            user = User.objects.filter(username=opts["user"]).first()
        else:
            user = User.objects.filter(is_superuser=True).order_by("id").first()
        if user is None:
            raise CommandError("no such user (create the admin first, or pass --user)")
        model = model_register_demo(owner=user, warm_start=opts["warm_start"])
        self.stdout.write(f"model {model.name} (id {model.pk}, {model.num_parameters} parameters) at {model.path}")
        if not opts["no_dataset"]:
            path = Path(opts["gsm8k"])
            if not path.is_file():
                self.stderr.write(f"GSM8K file {path} not found: no demo dataset registered")
            else:
                with open(path, "rb") as f:
                    dataset, created = dataset_upload(owner=user, upload=File(f, name=path.name), name="gsm8k-test",
                                                      preset="gsm8k", split="val", stats_model=model)
                self.stdout.write(f"dataset {dataset.name} (id {dataset.pk}, {dataset.status}, "
                                  f"{'new' if created else 'already there'})")
        from rlstudio.runs.models import RunConfig
        from trainer.recipes import REGISTRY, get_recipe

        if not RunConfig.objects.filter(owner=user, name=DEMO_CONFIG_NAME).exists():
            RunConfig.objects.create(owner=user, name=DEMO_CONFIG_NAME, config=get_recipe(DEMO_CONFIG_NAME).to_dict(),
                                     description=REGISTRY[DEMO_CONFIG_NAME].description)
            self.stdout.write(f"config {DEMO_CONFIG_NAME} saved")
