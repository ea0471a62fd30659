"""Run.submit_requested / submit_resends: the reconcile re-sends a lost submit task, a bounded number of times."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0002_run_stop_requested")]
    operations = [
        migrations.AddField(
            model_name="run",
            name="submit_requested",
            field=models.DateTimeField(
                blank=True, null=True,
                help_text="When the submit task was last sent (the reconcile's submit timeout counts from it).",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="submit_resends",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text="How many times the reconcile re-sent a lost submit task in this submitting phase.",
            ),
        ),
    ]
