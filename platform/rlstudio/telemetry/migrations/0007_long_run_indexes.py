# Indexes a long run's reads need (bench/long_run.py, docs/benchmarks.md "A long run's pages and API"):
# the log tail (a partial index of the log events only) and the samples table's sorts by response length
# and by advantage. Built CONCURRENTLY (outside a transaction): a platform with big tables keeps ingesting
# while they are made.
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("telemetry", "0006_sample_prompt_identity"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="runevent",
            index=models.Index(condition=models.Q(("type", "log")), fields=["run", "seq"], name="runevent_run_log_idx"),
        ),
        AddIndexConcurrently(
            model_name="sample",
            index=models.Index(fields=["run", "response_length", "seq"], name="sample_run_length_idx"),
        ),
        AddIndexConcurrently(
            model_name="sample",
            index=models.Index(fields=["run", "advantage", "seq"], name="sample_run_advantage_idx"),
        ),
    ]
