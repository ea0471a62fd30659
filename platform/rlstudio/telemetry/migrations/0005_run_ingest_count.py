# Per-run ingest counters (the caps RLSTUDIO_RUN_MAX_* are checked against them). Depends on runs 0003 only: the counter needs no later Run field.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0003_run_submit_requested'),
        ('telemetry', '0004_memorypoint_rank_device_used'),
    ]

    operations = [
        migrations.CreateModel(
            name='RunIngestCount',
            fields=[
                ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='ingest_count', serialize=False, to='runs.run')),
                ('events', models.BigIntegerField(default=0, help_text='RunEvents stored.')),
                ('samples', models.BigIntegerField(default=0, help_text='Sample events stored (a transcript each, under retention).')),
                ('metric_rows', models.BigIntegerField(default=0, help_text='MetricRows (steps with metrics).')),
                ('caps_reached', models.JSONField(blank=True, default=dict)),
            ],
        ),
    ]
