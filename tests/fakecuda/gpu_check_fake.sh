#!/usr/bin/env bash
# cli.gpu_check_fake: the GPU check program (tools/gpu/gpu_check.cu) run to
# completion against the fake CUDA runtime, strictly: a misuse or race aborts
# it, a leak at exit fails it. It must say that its timings mean nothing there.
# Usage: gpu_check_fake.sh GPU_CHECK SHARDFEED PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
gpu_check=$1 sf=$2 py=$3 src=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
"$py" "$src/tools/make-npy-samples.py" synthetic "$work/npy" --count 300 --shape 3,32,32 >/dev/null
"$sf" pack "$work/npy" -o "$work/ds" --quiet
status=0
out=$(FAKECUDA_STRICT=1 FAKECUDA_COPY_DELAY_US=20 "$gpu_check" "$work/ds" --batch-size 32 --epochs 20) ||
    status=$?
echo "$out"
if [ "$status" -ne 0 ]; then
    echo "gpu_check_fake: gpu_check exited with $status under the fake"
    exit 1
fi
if ! grep -q "fake CUDA runtime.*meaningless" <<<"$out"; then
    echo "gpu_check_fake: gpu_check did not say that its timings are meaningless under the fake"
    exit 1
fi
grep -q "^gpu_check: all checks passed" <<<"$out"
rm -rf "$work"
