"""Sample.token_view is kept as compressed JSON in bytea (rlstudio/telemetry/fields.py): what goes in
comes out, NULL stays None, rows written as plain JSON bytes (migration 0003's conversion) still read,
and the stored bytes really are compressed."""
import zlib

import pytest
from django.db import connection

from rlstudio.runs.services import run_create
from rlstudio.telemetry.fields import json_pack, json_unpack
from rlstudio.telemetry.models import Sample

pytestmark = pytest.mark.django_db
VIEW = {"ids": [1, 2, 3], "pieces": ["a", "é", "<b>"], "loss_mask": [0, 1, 1],
        "logprobs": [None, -0.5, -1.25], "ref_logprobs": None, "advantages": [0.0, 0.5, 0.5]}


def test_pack_unpack_round_trip_and_plain_json_bytes():
    packed = json_pack(VIEW)
    assert packed[0] == 0x78 and json_unpack(packed) == VIEW
    assert json_unpack(b'{"ids": [1]}') == {"ids": [1]} and json_unpack(memoryview(b"[1, 2]")) == [1, 2]


def test_sample_token_view_stored_compressed_and_read_back(alice, make_dataset, make_model):
    run, _ = run_create(owner=alice, name="tv", dataset=make_dataset(alice), model=make_model(alice),
                        config={}, gpus=0)
    kept = Sample.objects.create(run=run, seq=1, step=1, uid="u", index=0, transcript={}, token_view=VIEW)
    none = Sample.objects.create(run=run, seq=2, step=1, uid="u", index=1, transcript={}, token_view=None)
    old = Sample.objects.create(run=run, seq=3, step=1, uid="u", index=2, transcript={}, token_view=None)
    with connection.cursor() as cur:
        cur.execute("UPDATE telemetry_sample SET token_view = convert_to(%s, 'UTF8') WHERE id = %s",
                    ['{"ids": [7], "pieces": ["x"]}', old.pk])
        cur.execute("SELECT token_view FROM telemetry_sample WHERE id = %s", [kept.pk])
        raw = bytes(cur.fetchone()[0])
    assert zlib.decompress(raw)  # compressed on disk
    assert Sample.objects.get(pk=kept.pk).token_view == VIEW
    assert Sample.objects.get(pk=none.pk).token_view is None
    assert Sample.objects.get(pk=old.pk).token_view == {"ids": [7], "pieces": ["x"]}
