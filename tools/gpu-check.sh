#!/usr/bin/env bash
# The GPU check: builds shardfeed with CUDA on a machine with a GPU, packs a
# dataset, and prints what tools/gpu/gpu_check.cu measures (identical bytes,
# H2D GB/s against a plain pinned copy, consumer wait with a kernel longer
# than a batch's copy and its read, device memory over 20 epochs), then `shardfeed bench
# --device cuda:0`, also as an ordinary user under an 8 MiB RLIMIT_MEMLOCK
# (cudaHostRegister of the slab must not depend on it). Then the Python leg
# (tools/gpu/python_check.py: bytes equal to the CPU path for an epoch; a
# small conv net trained at batch 256, reading its loss every step, with the
# consumer's wait at most 2% of the steps; the same net queuing its steps
# without waiting, an epoch from the Loader at most 2% slower than on batches
# already on the GPU; memory_allocated and the device's free memory constant
# over 20 epochs) where the Python module builds and torch has CUDA; else it says why
# not, and the C leg's status stands. Finishes in a few minutes on one H200.
#
#   tools/gpu-check.sh --fetch   on a Debian 12 machine with apt (here): download the
#                                .debs a bare GPU image lacks into .gpu-debs/ (git-ignored)
#   tools/gpu-check.sh           on the GPU machine, from the repository root, with
#                                .gpu-debs/ carried along: unpack, build, run
#
#   SF_GPU_CUDA=FAKE tools/gpu-check.sh   a dry run of the script here, on the fake CUDA
#                                runtime (tests/fakecuda): the logic, not the GPU
#
# The GPU image is expected to have nvcc (/usr/local/cuda), cmake, a C
# compiler and python3 with numpy (PYTHON=... names another interpreter, e.g.
# one with a CUDA build of torch, and its headers for the module);
# liburing, libxxhash, libzstd, DLPack's header and the image codecs (libjpeg62-turbo,
# libpng, libwebp, with zlib's headers for png.h) come from the .debs
# (libarchive is optional and left out: tar inputs are compiled out there),
# unpacked into a private prefix (never into /).
set -euo pipefail
cd "$(dirname "$0")/.."
debs=.gpu-debs
if [ "${1:-}" = "--fetch" ]; then
    mkdir -p "$debs"
    (cd "$debs" && apt-get download liburing2 liburing-dev libxxhash0 libxxhash-dev libzstd1 libzstd-dev \
        libdlpack-dev libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev zlib1g-dev \
        libwebp7 libwebp-dev)
    ls -l "$debs"
    exit 0
fi
prefix=${SF_GPU_PREFIX:-/tmp/sf-prefix}
work=${SF_GPU_WORK:-/tmp/sf-gpu}
samples=${SF_GPU_SAMPLES:-2000}
cuda=${SF_GPU_CUDA:-ON}
py=${PYTHON:-python3}
mkdir -p "$prefix" "$work"
for d in "$debs"/*.deb; do if [ -e "$d" ]; then dpkg -x "$d" "$prefix"; fi; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

cmake -S . -B "$work/build" -DSHARDFEED_CUDA="$cuda" -DSHARDFEED_TESTS=OFF -DSHARDFEED_PYTHON=ON \
      -DPython3_EXECUTABLE="$(command -v "$py")" \
      -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 >"$work/cmake.log"
cmake --build "$work/build" -j "$(nproc)" >"$work/build.log" || { tail -30 "$work/build.log"; exit 2; }
sf="$work/build/shardfeed"

if [ ! -f "$work/ds/manifest.sfm" ]; then
    "${PYTHON:-python3}" tools/make-npy-samples.py synthetic "$work/npy" --count "$samples"
    "$sf" pack "$work/npy" -o "$work/ds" --quiet
fi
"$sf" verify "$work/ds"
echo "== gpu_check"
status=0
"$work/build/gpu_check" "$work/ds" --batch-size 32 --epochs 20 || status=$?
echo "== shardfeed bench --device cuda:0 (warm, global shuffle, batch 32)"
"$sf" bench "$work/ds" --batch-size 32 --epochs 3 --shuffle global --device cuda:0
"$sf" bench "$work/ds" --batch-size 32 --epochs 3 --shuffle global
echo "== as nobody, RLIMIT_MEMLOCK 8 MiB: cudaHostRegister of the slab, io_uring in pieces"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && command -v prlimit >/dev/null; then
    chmod -R a+rX "$work/ds" "$work/build"
    prlimit --memlock=8388608 setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$sf" bench "$work/ds" --batch-size 32 --epochs 1 --device cuda:0 || status=1
elif [ "$(id -u)" != 0 ]; then
    (ulimit -l 8192 && "$sf" bench "$work/ds" --batch-size 32 --epochs 1 --device cuda:0) || status=1
else
    echo "skipped: needs setpriv and prlimit (util-linux) to drop root"
fi

echo "== Python leg (tools/gpu/python_check.py)"
if ! ls "$work"/build/python/shardfeed/_shardfeed*.so >/dev/null 2>&1; then
    echo "skipped: the Python module was not built (see $work/cmake.log: Python headers or DLPack's)"
elif ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "skipped: $py has no CUDA build of torch (torch.cuda.is_available() is not True); the C leg ran"
else
    if [ ! -f "$work/ds-py/manifest.sfm" ]; then
        "$py" tools/make-npy-samples.py synthetic "$work/npy-py" --count 4096 --shape 3,64,64
        "$sf" pack "$work/npy-py" -o "$work/ds-py" --quiet
    fi
    PYTHONPATH="$work/build/python" "$py" tools/gpu/python_check.py "$work/ds-py" \
        --device cuda:0 --epochs 20 --batch-size 256 || status=1
fi
exit $status
