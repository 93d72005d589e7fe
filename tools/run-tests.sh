#!/usr/bin/env bash
# Builds shardfeed with warnings as errors and runs every test (unit, CLI,
# reliability, Python, the remote-dataset tests against local servers)
# through ctest. Usage: tools/run-tests.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh build python demo test remote
build=${1:-build}
cmake -S . -B "$build" -DSHARDFEED_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" || status=$?
if [ "$status" -ne 0 ]; then
    # Repeat the end of each failed test's output last, where the tail of a
    # CI log (often all that is kept) shows it.
    tmp_dir="$build/Testing/Temporary"
    while IFS=: read -r _ name; do
        echo "---- $name (end of its output):"
        awk -v t="Testing: $name" '$0 ~ t"$" {on=1} on && /^<end of output>/ {exit} on' \
            "$tmp_dir/LastTest.log" | tail -n 25
    done < <(cat "$tmp_dir/LastTestsFailed.log" 2>/dev/null)
    exit "$status"
fi
