# The samples table's finish_reason filter (with or without a reward range) read every sample row of the
# run, for its count and for its page (bench/long_run.py: 0.3 s each at 300,000 samples). Built
# CONCURRENTLY, as 0007's.
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("telemetry", "0007_long_run_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="sample",
            index=models.Index(fields=["run", "finish_reason", "reward"], name="sample_run_finish_idx"),
        ),
    ]
