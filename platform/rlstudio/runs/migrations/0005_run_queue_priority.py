from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0004_run_tool_set_resume_from"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="queue_priority",
            field=models.IntegerField(
                default=0,
                help_text="Admission order among queued runs: higher first, then oldest first (staff move a "
                          "run to the front or back of the queue).",
            ),
        ),
    ]
