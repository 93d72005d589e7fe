#!/bin/bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined,
# the library instrumented too) and fuzzes them.
#
#   tests/fuzz/run.sh [TARGET|all] [SECONDS]     (defaults: all, 60)
#
# TARGET is one of fuzz_npy fuzz_manifest fuzz_shard fuzz_dataset
# fuzz_roundtrip fuzz_list fuzz_tar fuzz_image (the "fuzz_" may be left out). Each target fuzzes for
# SECONDS starting from its committed seeds in tests/fuzz/corpus/TARGET;
# new inputs go to $SF_FUZZ_WORK/corpus/TARGET (default build-fuzz/work), so
# the committed corpus only changes when you copy a finding there on
# purpose (minimise first: ./build-fuzz/tests/TARGET -minimize_crash=1 FILE).
# Crashes are written to $SF_FUZZ_WORK/artifacts/. Extra libFuzzer flags can
# be passed in SF_FUZZ_FLAGS (e.g. "-jobs=2 -workers=2").
# Exit status: 0 when no target found anything, 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${1:-all}
seconds=${2:-60}
build=${SF_FUZZ_BUILD:-$root/build-fuzz}
work=${SF_FUZZ_WORK:-$build/work}
all=(fuzz_npy fuzz_manifest fuzz_shard fuzz_dataset fuzz_roundtrip fuzz_list fuzz_tar fuzz_image)

if [[ $target == all ]]; then
    targets=("${all[@]}")
else
    [[ $target == fuzz_* ]] || target=fuzz_$target
    [[ " ${all[*]} " == *" $target "* ]] || { echo "unknown target $target (one of: ${all[*]})" >&2; exit 2; }
    targets=("$target")
fi
[[ $seconds =~ ^[0-9]+$ ]] || { echo "SECONDS must be a number" >&2; exit 2; }

cc=${CC:-}
if [[ -z $cc ]]; then
    for c in clang clang-14 clang-15 clang-16; do
        if command -v "$c" >/dev/null; then cc=$c; break; fi
    done
fi
[[ -n $cc ]] || { echo "no clang found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHARDFEED_FUZZ=ON -DSHARDFEED_WERROR=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

# detect_leaks: the targets free what they allocate; a leak is a finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
    mkdir -p "$work/corpus/$t" "$work/artifacts"
    log="$work/$t.log"
    echo "== $t: ${seconds}s"
    set +e
    # -rss_limit_mb: a decoder that allocates from a stored count would
    # blow this (inputs are small); -malloc_limit_mb the same per call.
    "$build/tests/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
        -rss_limit_mb=2048 -malloc_limit_mb=256 -max_len=16384 \
        -artifact_prefix="$work/artifacts/$t-" ${SF_FUZZ_FLAGS:-} \
        "$work/corpus/$t" "$here/corpus/$t" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    if [[ $rc -ne 0 ]]; then
        status=1
        echo "   FOUND SOMETHING (exit $rc): see $log and $work/artifacts/"
        grep -E 'ERROR|FUZZ_CHECK|runtime error|SUMMARY' "$log" | head -5 | sed 's/^/   /'
    fi
    echo "   executions: $execs  ($cov)"
done
exit $status
