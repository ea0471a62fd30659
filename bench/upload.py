"""Upload benchmark: validation + conversion speed on GSM8K train, and peak memory against file size.

    .venv/bin/python bench/upload.py --data PATH/TO/gsm8k/train.jsonl [--sizes-mib 64,256,1024]

Part 1 runs the same validate-and-convert code the Celery task runs (catalog.conversion) on GSM8K
train (7,473 rows, given by `--data`: the repository carries only its first 64, tests/fixtures/gsm8k/)
end to end and reports rows/s. Part 2 writes JSONL files of growing size (GSM8K rows repeated) and
validates each in a fresh process, reporting that process's peak RSS: flat memory means the reader
streams. Results go to docs/benchmarks.md (the upload section) by hand.
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

CHILD = r"""
import resource, sys, time
sys.path[:0] = [sys.argv[2] + "/platform", sys.argv[2]]
from pathlib import Path
from rlstudio.catalog.conversion import convert_file
from rlstudio.catalog.formats import Detected, Limits
src = Path(sys.argv[1]); t = time.perf_counter()
r = convert_file(src, detected=Detected("jsonl"), preset="gsm8k", split="train", limits=Limits(max_upload_bytes=2 << 30),
                 out_path=src.with_suffix(".out"), work_dir=src.with_suffix(".d"))
dt = time.perf_counter() - t
src.with_suffix(".out").unlink()
print(r.num_rows, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", "--train", dest="data", default=None,
                    help="GSM8K train.jsonl (7,473 rows, openai/grade-school-math) to validate and convert")
    ap.add_argument("--sizes-mib", default="64,256,1024")
    args = ap.parse_args()
    if not args.data or not Path(args.data).is_file():
        given = f"{args.data} is not a file" if args.data else "not given"
        ap.error(f"--data: GSM8K's train.jsonl is needed ({given}); "
                 "get it from openai/grade-school-math (grade_school_math/data/train.jsonl) and pass its path")
    from rlstudio.catalog.conversion import convert_file
    from rlstudio.catalog.formats import Limits, detect_format

    src = Path(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        r = convert_file(src, detected=detect_format(src.name, src.read_bytes()[:8]), preset="auto", split="train",
                         limits=Limits(), out_path=Path(tmp) / "rows.jsonl", work_dir=Path(tmp) / "w")
        dt = time.perf_counter() - t
        print(f"GSM8K train: {r.num_rows} rows in {dt:.2f} s = {r.num_rows / dt:,.0f} rows/s (validate + convert)")
        line = src.read_bytes()
        for mib in [int(x) for x in args.sizes_mib.split(",") if x]:
            big = Path(tmp) / f"big{mib}.jsonl"
            with open(big, "wb") as f:
                while f.tell() < mib << 20:
                    f.write(line)
            out = subprocess.run([sys.executable, "-c", CHILD, str(big), str(ROOT)], capture_output=True, text=True,
                                 check=True).stdout.split()
            rows, secs, rss_kib = int(out[0]), float(out[1]), int(out[2])
            print(f"{mib} MiB JSONL: {rows} rows in {secs:.1f} s ({rows / secs:,.0f} rows/s), "
                  f"peak RSS {rss_kib / 1024:.0f} MiB")
            big.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
