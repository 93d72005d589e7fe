#!/usr/bin/env bash
# The main job end to end on real data: builds shardfeed and its Python
# module, turns Debian's Fashion-MNIST (60,000 training images) into
# img_{i}.npy + label_{i}.npy files, packs them, verifies the shards,
# inspects the dataset, exports it back (checking the round trip with numpy),
# and ends with a few seconds of training a small CNN through
# shardfeed.Loader, printing its held-out accuracy. Installs only what that
# needs (tools/install-deps.sh build python demo).
# Usage: tools/quickstart.sh [WORK_DIR]   (default: ./quickstart)
# WORK_DIR must not exist, or be one this script made (it holds the marker
# file below): the script removes only what it made itself.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-quickstart}
marker=.shardfeed-quickstart
# Checked before anything is built or installed: a folder the user made is
# never written to, let alone removed.
if [ -e "$work" ] || [ -L "$work" ]; then
    if [ -L "$work" ] || [ ! -d "$work" ] || [ ! -f "$work/$marker" ]; then
        echo "quickstart: $work exists and is not a work directory quickstart.sh made (no $marker in it); give a new folder" >&2
        exit 1
    fi
fi
tools/install-deps.sh build python demo
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc)" --target shardfeed_cli shardfeed_python >/dev/null
sf=build/shardfeed
if [ -d "$work" ]; then
    # Its own work directory from an earlier run: only what it wrote there.
    rm -rf "${work:?}/npy" "${work:?}/dataset" "${work:?}/exported" "${work:?}/test-npy" "${work:?}/test"
else
    mkdir -p "$work"
    echo "made by tools/quickstart.sh; it may remove npy/, dataset/, exported/, test-npy/ and test/ here" >"$work/$marker"
fi

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
echo "== 6. train a small CNN for a few seconds through shardfeed.Loader"
/usr/bin/python3 tools/make-npy-samples.py fashion-mnist "$work/test-npy" --split t10k >/dev/null
$sf pack "$work/test-npy" -o "$work/test" --align 64 --quiet
PYTHONPATH=build/python /usr/bin/python3 tools/demo/train_fashion.py "$work/dataset" "$work/test"
echo "== disk used: $(du -sh build | cut -f1) by build/, $(du -sh "$work" | cut -f1) by $work/"
