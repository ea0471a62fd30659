"""Run.stop_requested: when a graceful stop was asked, so the reconcile can force it after the grace."""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [
        migrations.AddField(
            model_name="run",
            name="stop_requested",
            field=models.DateTimeField(
                blank=True, null=True,
                help_text="When a graceful stop was asked (the force-stop grace counts from it).",
            ),
        ),
    ]
