#!/usr/bin/env bash
# Builds shardfeed with warnings as errors and runs every test (unit, CLI,
# reliability) through ctest. Usage: tools/run-tests.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh build python demo test
build=${1:-build}
cmake -S . -B "$build" -DSHARDFEED_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
