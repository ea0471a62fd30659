"""Sample.token_view: jsonb -> zlib-compressed JSON in bytea (see rlstudio/telemetry/fields.py).

Forward, existing rows keep their JSON as plain UTF-8 bytes (the field reads both forms); backward,
every row (compressed or plain) is decoded back into jsonb.
"""
import json
import zlib

from django.db import migrations

import rlstudio.telemetry.fields

FORWARD = ("ALTER TABLE telemetry_sample ALTER COLUMN token_view TYPE bytea "
           "USING convert_to(token_view::text, 'UTF8')")


def backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cur:
        cur.execute("ALTER TABLE telemetry_sample ADD COLUMN token_view_jsonb jsonb")
        cur.execute("SELECT id, token_view FROM telemetry_sample WHERE token_view IS NOT NULL")
        for pk, raw in cur.fetchall():
            raw = bytes(raw)
            text = (zlib.decompress(raw) if raw[:1] == b"\x78" else raw).decode("utf-8")
            json.loads(text)  # never write something that is not JSON
            cur.execute("UPDATE telemetry_sample SET token_view_jsonb = %s::jsonb WHERE id = %s", [text, pk])
        cur.execute("ALTER TABLE telemetry_sample DROP COLUMN token_view")
        cur.execute("ALTER TABLE telemetry_sample RENAME COLUMN token_view_jsonb TO token_view")


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0002_run_retention'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop),
                migrations.RunPython(migrations.RunPython.noop, backward),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='sample',
                    name='token_view',
                    field=rlstudio.telemetry.fields.CompressedJSONField(blank=True, null=True),
                ),
            ],
        ),
    ]
