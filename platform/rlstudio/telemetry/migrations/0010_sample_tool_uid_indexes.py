# The samples table's "has a tool call" filter and the API's ?uid= across steps read every sample row
# of the run (bench/long_run.py: 300,000 samples), for the count and for the page. Built CONCURRENTLY,
# as 0007's.
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("telemetry", "0009_run_metric_names"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="sample",
            index=models.Index(condition=models.Q(("has_tool_call", True)), fields=["run", "seq"],
                               name="sample_run_tool_idx"),
        ),
        AddIndexConcurrently(
            model_name="sample",
            index=models.Index(fields=["run", "uid", "seq"], name="sample_run_uid_idx"),
        ),
    ]
