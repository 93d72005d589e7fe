#!/usr/bin/env bash
# The sanitizer stages of CI (after tools/run-tests.sh):
#  1. the whole C test suite (unit, CLI, fuzz replays, reliability) built with
#     AddressSanitizer + UndefinedBehaviorSanitizer;
#  2. the threaded paths (pack -j, verify -j, the reader's I/O threads with
#     every engine, the host-copy device, images decoded in the I/O threads)
#     under ThreadSanitizer;
#  3. valgrind memcheck on a pack + verify + read + export run, zero errors;
#  4. the CUDA delivery code (lib/reader/device_cuda.c, tools/gpu/gpu_check.cu)
#     on the fake CUDA runtime (tests/fakecuda, -DSHARDFEED_CUDA=FAKE): its
#     tests plain and under ASan+UBSan, the GPU check and the CUDA device
#     path of `shardfeed bench` under TSan. Skipped without a CUDA toolkit
#     (the headers and nvcc; no GPU needed).
# Usage: tools/ci-sanitizers.sh [WORK_DIR]
# WORK_DIR (default build-san) receives the builds and test data: it must not
# exist yet (the script makes it, with a marker file) or be one the script
# made, whose data/ it replaces; any other folder is refused untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build-san}
marker=.shardfeed-ci-sanitizers
if [ -e "$work" ] && [ ! -f "$work/$marker" ]; then
    echo "ci-sanitizers.sh: $work exists and was not made by this script (no $marker in it): give a new folder" >&2
    exit 1
fi
mkdir -p "$work" && echo "made by tools/ci-sanitizers.sh; it replaces asan/ tsan/ plain/ fake*/ and data/ here" >"$work/$marker"
jobs=$(nproc)
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1

echo "== 1/4 ASan+UBSan: every C test"
cmake -S . -B "$work/asan" -DSHARDFEED_WERROR=ON -DSHARDFEED_SANITIZE=address,undefined \
      -DSHARDFEED_CUDA=OFF -DSHARDFEED_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$work/asan" -j "$jobs" >/dev/null
# Fewer kill runs under ASan: each pack start is slow there; the full 200 run
# in the plain build.
SF_CRASH_RUNS=40 ctest --test-dir "$work/asan" --output-on-failure -j "$jobs"

echo "== 2/4 TSan: threaded packing, verifying and reading"
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
# More shards than the descriptor cap (half of 32): the I/O threads open and close
# them through the dataset's LRU set.
for engine in uring pread; do
    (ulimit -n 32 && "$sf" bench "$data/ds" --engine "$engine" --threads 3 --batch-size 16 \
          --epochs 2 --shuffle global --prefetch 3 >/dev/null)
done
"$sf" bench "$data/ds" --device host-copy --batch-size 16 --epochs 3 --prefetch 2 >/dev/null
# Compressed records, a claim at a time (lib/reader/staged.c): the copy, the
# hash and the decompression of each claim in the I/O threads.
"$sf" pack "$data/npy" -o "$data/zds" -j 4 --shard-size 256KiB --compress img=zstd --quiet
for engine in pread mmap; do
    "$sf" bench "$data/zds" --engine "$engine" --threads 3 --batch-size 16 --epochs 3 \
          --shuffle global --prefetch 3 >/dev/null
done
"$sf" bench "$data/ds" --engine pread --direct --batch-size 16 --epochs 2 >/dev/null 2>&1 || true
# Images decoded in the I/O threads (lib/image through lib/reader/transform.c).
rm -rf "$data/imgtree" "$data/imgds"
/usr/bin/python3 tools/make-image-tree.py "$data/imgtree" --count 48 --classes 3 >/dev/null
"$sf" pack "$data/imgtree" -o "$data/imgds" --quiet
for engine in pread mmap; do
    "$sf" bench "$data/imgds" --engine "$engine" --threads 3 --batch-size 8 --epochs 2 \
          --shuffle global --prefetch 3 --image image=rrc:64:flip >/dev/null
done
"$sf" bench "$data/imgds" --threads 2 --batch-size 8 --image image=center:48:56 --skip-corrupt >/dev/null
# Images re-encoded at pack time: the pre-pass threads and the spool.
"$sf" pack "$data/imgtree" -o "$data/imgds-small" -j 4 --shard-size 64KiB --image-max-side 48 --quiet
# A dataset at a URL (nginx on 127.0.0.1, where installed): I/O threads taking and giving
# back the cache's pins at once (without the lock while a shard is held), and the holds
# given up for the byte budget (a 1 MiB limit keeps 128 KiB of idle shards) and for the
# descriptor share (101 shards, 64 descriptors under ulimit -n 128).
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
    rm -rf "$data/www"
    "$sf" pack "$data/npy" -o "$data/www/rds" --shard-size 48KiB --quiet
    /usr/bin/python3 - "$sf" "$data" <<'EOF_REMOTE'
import os, subprocess, sys
sys.path.insert(0, "tests/remote")
import servers
sf, data = sys.argv[1:3]
with servers.Nginx(os.path.join(data, "www")) as ng:
    url = ng.url + "/rds"
    runs = (("mmap", [], None), ("pread", [], None), ("pread", ["--cache-limit", "1MiB"], None),
            ("mmap", ["--cache-limit", "1MiB"], None), ("pread", [], 128))
    for i, (engine, extra, nofile) in enumerate(runs):  # each from an empty cache of its own
        cmd = [sf, "bench", url, "--engine", engine, "--threads", "4", "--batch-size", "16",
               "--epochs", "2", "--shuffle", "global", "--cache-dir", os.path.join(data, f"rcache{i}")] + extra
        limit = (lambda: __import__("resource").setrlimit(
            __import__("resource").RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, preexec_fn=limit, timeout=600)
EOF_REMOTE
else
    echo "no nginx: the URL reads under TSan skipped"
fi
echo "TSan: no data races reported"

echo "== 3/4 valgrind memcheck: pack, verify, read, export"
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
# Images re-encoded at pack time. JSIMD_FORCENONE: libjpeg-turbo's SIMD
# decoder computes lanes from row padding that it then discards, which
# valgrind cannot follow through the vector ops (it reported uninitialised
# pixels that are not: the plain-C code paths are clean).
rm -rf "$data/vimg"
JSIMD_FORCENONE=1 $vg "$sf" pack "$data/imgtree" -o "$data/vimg" -j 2 --image-max-side 48 --quiet
echo "valgrind: 0 errors"

echo "== 4/4 the CUDA delivery code on the fake CUDA runtime: plain, ASan+UBSan, TSan"
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
    echo "no CUDA toolkit: skipped"
    exit 0
fi
fake_targets="test_fakecuda test_device_cuda gpu_check shardfeed_cli"
fake_tests='^unit\.test_fakecuda$|^unit\.test_device_cuda$|^cli\.gpu_check_fake$'
for leg in plain asan; do
    opts=(-DSHARDFEED_CUDA=FAKE) targets=$fake_targets tests=$fake_tests
    if [ "$leg" = asan ]; then
        opts+=(-DSHARDFEED_PYTHON=OFF -DSHARDFEED_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug)
    else # the Python device path on the fake too (tests/python/test_device.py, FakeCuda)
        targets="$targets shardfeed_python" tests="$tests|^python\.test_device\$"
    fi
    cmake -S . -B "$work/fake-$leg" -DSHARDFEED_WERROR=ON "${opts[@]}" >/dev/null
    cmake --build "$work/fake-$leg" -j "$jobs" --target $targets >/dev/null
    ctest --test-dir "$work/fake-$leg" --output-on-failure -R "$tests"
done
# Criterion's test runner does not start under TSan: the reader's threads,
# the copies they enqueue and the fake's stream threads run under TSan in the
# GPU check (release_after on a stream, kernels, 20 epochs) and in bench on
# every engine, copies delayed; FAKECUDA_STRICT=1 aborts at a misuse or race.
cmake -S . -B "$work/fake-tsan" -DSHARDFEED_WERROR=ON -DSHARDFEED_SANITIZE=thread \
      -DSHARDFEED_CUDA=FAKE -DSHARDFEED_PYTHON=OFF -DSHARDFEED_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$work/fake-tsan" -j "$jobs" --target gpu_check shardfeed_cli >/dev/null
sf="$work/fake-tsan/shardfeed"
tests/fakecuda/gpu_check_fake.sh "$work/fake-tsan/gpu_check" "$sf" /usr/bin/python3 "$PWD" \
    "$work/fake-tsan/gpu-check-data"
for engine in uring pread mmap; do
    FAKECUDA_STRICT=1 FAKECUDA_COPY_DELAY_US=1000 "$sf" bench "$data/ds" --device cuda:0 \
        --engine "$engine" --threads 3 --batch-size 16 --epochs 3 --shuffle global --prefetch 2 >/dev/null
done
echo "fake CUDA: device tests passed plain and under ASan+UBSan; no data races under TSan"
