"""RunIngestCount.metric_names: the names of every metric a run stored, kept by the ingest. Added as
null (not known yet: the ingest fills a run's at its next batch, and reads fall back to its rows), then
filled here a run at a time, each in a transaction of its own, so that no ingest waits for the whole
backfill (the ingest locks a run's counter row for its batch)."""
from django.db import migrations, models

# As ingest_caps.METRIC_NAMES_SQL, written out: a migration does not import code that may change.
BACKFILL_ONE = """
UPDATE telemetry_runingestcount c SET metric_names = (
  SELECT COALESCE(jsonb_agg(k ORDER BY k COLLATE "C"), '[]'::jsonb)
  FROM (SELECT DISTINCT jsonb_object_keys(m.metrics) AS k FROM telemetry_metricrow m WHERE m.run_id = c.run_id) names)
WHERE c.run_id = %s AND c.metric_names IS NULL
"""


def backfill(apps, schema_editor):
    counts = apps.get_model("telemetry", "RunIngestCount")
    run_ids = list(counts.objects.filter(metric_names__isnull=True).values_list("run_id", flat=True))
    with schema_editor.connection.cursor() as cur:
        for run_id in run_ids:  # autocommit (atomic = False): one short transaction a run
            cur.execute(BACKFILL_ONE, [run_id])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('telemetry', '0008_sample_run_finish_idx'),
    ]

    operations = [
        migrations.AddField(
            model_name='runingestcount',
            name='metric_names',
            field=models.JSONField(blank=True, default=None, help_text='Every metric name the run reported, sorted (kept by the ingest; null: not known yet).', null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
