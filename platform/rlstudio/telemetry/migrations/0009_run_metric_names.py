"""RunIngestCount.metric_names: the names of every metric a run stored, kept by the ingest; filled here
from each counted run's stored rows (a run with no counter row yet gets one, names included, with its
next batch; until then its names are read from its rows)."""
from django.db import migrations, models

# As ingest_caps.METRIC_NAMES_SQL, written out: a migration does not import code that may change.
BACKFILL = """
UPDATE telemetry_runingestcount c SET metric_names = (
  SELECT COALESCE(jsonb_agg(k ORDER BY k COLLATE "C"), '[]'::jsonb)
  FROM (SELECT DISTINCT jsonb_object_keys(m.metrics) AS k FROM telemetry_metricrow m WHERE m.run_id = c.run_id) names)
"""


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0008_sample_run_finish_idx'),
    ]

    operations = [
        migrations.AddField(
            model_name='runingestcount',
            name='metric_names',
            field=models.JSONField(blank=True, default=list, help_text='Every metric name the run reported, sorted (kept by the ingest; null: not known).', null=True),
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
    ]
