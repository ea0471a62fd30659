"""bench/playground.py's pure part: the table (ratios and milliseconds from the measured figures)."""
from __future__ import annotations

from bench.playground import table


def test_table_rows_give_the_ratio_and_milliseconds():
    r = {"one_shot_tps": 200.0, "streamed_tps": 150.0, "first_text_s": 0.0234, "stop_median_s": 0.1,
         "stop_max_s": 0.25, "repeats": 3, "tokens": 256}
    lines = table([("tiny", r)]).splitlines()
    assert lines[0].startswith("| model | one-shot tok/s | streamed tok/s |") and len(lines) == 3
    assert lines[2] == "| tiny | 200 | 150 | 0.75x | 23 ms | 100 ms, 250 ms |"
