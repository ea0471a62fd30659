"""The dataset storage quota (GB). AddField fills every existing row, the shipped default row and
users' own rows alike, with RLSTUDIO_DEFAULT_DATASET_STORAGE_GB as it is when the migration runs."""

import rlstudio.quotas.models
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0004_gpuhoursspent"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="gpuquota",
            name="dataset_storage_gb",
            field=models.FloatField(
                default=rlstudio.quotas.models.default_dataset_storage_gb,
                help_text="Dataset storage in GB (10^9 bytes): an upload past it is refused; 0 = no new uploads (staff included).",
            ),
        ),
        migrations.AddConstraint(
            model_name="gpuquota",
            constraint=models.CheckConstraint(
                condition=models.Q(("dataset_storage_gb__gte", 0)),
                name="gpuquota_dataset_storage_nonneg",
            ),
        ),
    ]
