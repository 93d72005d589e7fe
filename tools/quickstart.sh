#!/usr/bin/env bash
# The main job end to end on real data: builds shardfeed, turns Debian's
# Fashion-MNIST (60,000 training images) into img_{i}.npy + label_{i}.npy
# files, packs them, verifies the shards, inspects the dataset and exports it
# back, checking the round trip with numpy.
# Usage: tools/quickstart.sh [WORK_DIR]   (default: ./quickstart)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
work=${1:-quickstart}
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc)" --target shardfeed_cli >/dev/null
sf=build/shardfeed
rm -rf "$work"; mkdir -p "$work"

echo "== 1. Fashion-MNIST as one .npy file per image and per label"
/usr/bin/python3 tools/make-npy-samples.py fashion-mnist "$work/npy"
echo "== 2. pack"
# 784-byte samples: align records to 64 bytes instead of the default 4096
# (page alignment only pays off for O_DIRECT reads of page-sized fields).
$sf pack "$work/npy" -o "$work/dataset" --align 64
echo "== 3. verify"
$sf verify "$work/dataset"
echo "== 4. inspect"
$sf inspect "$work/dataset"
echo "== 5. export and compare with the inputs"
$sf export "$work/dataset" -o "$work/exported"
/usr/bin/python3 - "$work/npy" "$work/exported" <<'PY'
import os, sys
import numpy as np
src, dst = sys.argv[1:]
names = sorted(os.listdir(src))
assert sorted(os.listdir(dst)) == names, "exported file names differ"
for n in names:
    a, b = np.load(os.path.join(src, n)), np.load(os.path.join(dst, n))
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), n
print(f"round trip ok: {len(names)} exported arrays equal the inputs")
PY
