"""The converted rows' size on disk (Dataset.converted_bytes), counted in a user's dataset storage.

Ready datasets converted before this migration get the size of their rows file where it is readable
here (the uploads folder mounted as the web process mounts it); where it is not, 0 (not counted).
"""

import os

from django.conf import settings
from django.db import migrations, models


def fill_converted_bytes(apps, schema_editor):
    Dataset = apps.get_model("catalog", "Dataset")
    for ds in Dataset.objects.exclude(converted_path="").only("pk", "converted_path").iterator():
        try:
            size = os.path.getsize(ds.converted_path)
        except OSError:
            continue
        Dataset.objects.filter(pk=ds.pk).update(converted_bytes=size)


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0007_modelasset_kind"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="converted_bytes",
            field=models.BigIntegerField(
                default=0,
                help_text="Size of the converted rows on disk (0 until they are written; counted in storage).",
            ),
        ),
        migrations.AddConstraint(
            model_name="dataset",
            constraint=models.CheckConstraint(
                condition=models.Q(("converted_bytes__gte", 0)),
                name="dataset_converted_bytes_nonneg",
            ),
        ),
        migrations.RunPython(fill_converted_bytes, migrations.RunPython.noop),
    ]
