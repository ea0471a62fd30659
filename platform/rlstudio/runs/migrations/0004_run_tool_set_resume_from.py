from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0003_run_submit_requested"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="tool_set",
            field=models.CharField(
                blank=True, help_text="The operator-registered tool set the run offers (by name).", max_length=64
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="resume_from",
            field=models.CharField(
                blank=True,
                help_text="The checkpoint a resumed run starts from, recorded by the platform in the parent's folder.",
                max_length=1024,
            ),
        ),
    ]
