#!/usr/bin/env bash
# The GPU check: builds shardfeed with CUDA on a machine with a GPU, packs a
# dataset, and prints what tools/gpu/gpu_check.cu measures (identical bytes,
# H2D GB/s against a plain pinned copy, consumer wait with a kernel longer
# than the copy, device memory over 20 epochs), then `shardfeed bench
# --device cuda:0`. Finishes in a few minutes on one H200.
#
#   tools/gpu-check.sh --fetch   on a Debian 12 machine with apt (here): download the
#                                .debs a bare GPU image lacks into .gpu-debs/ (git-ignored)
#   tools/gpu-check.sh           on the GPU machine, from the repository root, with
#                                .gpu-debs/ carried along: unpack, build, run
#
# The GPU image is expected to have nvcc (/usr/local/cuda), cmake, a C
# compiler and python3 with numpy; liburing, libxxhash, libzstd and the image codecs
# (libjpeg62-turbo, libpng, libwebp, with zlib's headers for png.h) come from the .debs
# (libarchive is optional and left out: tar inputs are compiled out there),
# unpacked into a private prefix (never into /).
set -euo pipefail
cd "$(dirname "$0")/.."
debs=.gpu-debs
if [ "${1:-}" = "--fetch" ]; then
    mkdir -p "$debs"
    (cd "$debs" && apt-get download liburing2 liburing-dev libxxhash0 libxxhash-dev libzstd1 libzstd-dev \
        libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev zlib1g-dev libwebp7 libwebp-dev)
    ls -l "$debs"
    exit 0
fi
prefix=${SF_GPU_PREFIX:-/tmp/sf-prefix}
work=${SF_GPU_WORK:-/tmp/sf-gpu}
samples=${SF_GPU_SAMPLES:-2000}
mkdir -p "$prefix" "$work"
for d in "$debs"/*.deb; do dpkg -x "$d" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

cmake -S . -B "$work/build" -DSHARDFEED_CUDA=ON -DSHARDFEED_TESTS=OFF -DSHARDFEED_PYTHON=OFF \
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
exit $status
