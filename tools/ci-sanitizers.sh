#!/usr/bin/env bash
# The sanitizer stages of CI (after tools/run-tests.sh):
#  1. the whole C test suite (unit, CLI, fuzz replays, reliability) built with
#     AddressSanitizer + UndefinedBehaviorSanitizer;
#  2. the threaded paths (pack -j, verify -j, the reader's I/O threads with
#     every engine, the host-copy device stage) under ThreadSanitizer;
#  3. valgrind memcheck on a pack + verify + read + export run, zero errors.
# Usage: tools/ci-sanitizers.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build-san}
mkdir -p "$work"
jobs=$(nproc)
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1

echo "== 1/3 ASan+UBSan: every C test"
cmake -S . -B "$work/asan" -DSHARDFEED_WERROR=ON -DSHARDFEED_SANITIZE=address,undefined \
      -DSHARDFEED_CUDA=OFF -DSHARDFEED_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$work/asan" -j "$jobs" >/dev/null
# Fewer kill runs under ASan: each pack start is slow there; the full 200 run
# in the plain build.
SF_CRASH_RUNS=40 ctest --test-dir "$work/asan" --output-on-failure -j "$jobs"

echo "== 2/3 TSan: threaded packing, verifying and reading"
cmake -S . -B "$work/tsan" -DSHARDFEED_WERROR=ON -DSHARDFEED_SANITIZE=thread \
      -DSHARDFEED_CUDA=OFF -DSHARDFEED_PYTHON=OFF -DSHARDFEED_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$work/tsan" -j "$jobs" --target shardfeed_cli >/dev/null
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
sf="$work/tsan/shardfeed"
data="$work/data"
rm -rf "$data"
/usr/bin/python3 tools/make-npy-samples.py synthetic "$data/npy" --count 300 --shape 3,32,32 >/dev/null
"$sf" pack "$data/npy" -o "$data/ds" -j 4 --shard-size 256KiB --quiet
"$sf" verify "$data/ds" -j 4 >/dev/null
for engine in uring pread mmap; do
    "$sf" bench "$data/ds" --engine "$engine" --threads 3 --batch-size 16 --epochs 3 \
          --shuffle global --prefetch 3 >/dev/null
done
"$sf" bench "$data/ds" --device host-copy --batch-size 16 --epochs 3 --prefetch 2 >/dev/null
"$sf" bench "$data/ds" --engine pread --direct --batch-size 16 --epochs 2 >/dev/null 2>&1 || true
echo "TSan: no data races reported"

echo "== 3/3 valgrind memcheck: pack, verify, read, export"
cmake -S . -B "$work/plain" -DSHARDFEED_CUDA=OFF -DSHARDFEED_PYTHON=OFF -DSHARDFEED_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$work/plain" -j "$jobs" --target shardfeed_cli >/dev/null
vg="valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
sf="$work/plain/shardfeed"
rm -rf "$data/vds" "$data/vexp"
$vg "$sf" pack "$data/npy" -o "$data/vds" -j 2 --shard-size 256KiB --quiet
$vg "$sf" verify "$data/vds" >/dev/null
$vg "$sf" inspect "$data/vds" >/dev/null
# Memory the kernel fills through io_uring is invisible to valgrind, so the
# read runs use the pread and mmap engines.
$vg "$sf" bench "$data/vds" --engine pread --batch-size 16 --epochs 2 >/dev/null
$vg "$sf" bench "$data/vds" --engine mmap --batch-size 16 --epochs 1 >/dev/null
$vg "$sf" export "$data/vds" -o "$data/vexp" >/dev/null
echo "valgrind: 0 errors"
