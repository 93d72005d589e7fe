#!/bin/sh
# Installs shardfeed into a scratch prefix and builds a program against it
# the two ways users do: CMake (find_package, shared and static library)
# and pkg-config (cc $(pkg-config --cflags --libs shardfeed)). Each program
# reads a dataset that the installed CLI packed, and must print the same
# sample count and label sum.
# Usage: check.sh BUILD_DIR SOURCE_DIR SCRATCH PYTHON
set -eu
build=$1 src=$2 tmp=$3 py=$4
rm -rf "$tmp"
mkdir -p "$tmp"
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

"$py" - "$tmp/npy" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d)
for i in range(10):
    np.save(os.path.join(d, f"img_{i}.npy"), np.full((2, 3), i, np.uint8))
    np.save(os.path.join(d, f"label_{i}.npy"), np.int64(i * 3))
PY
"$prefix/bin/shardfeed" pack "$tmp/npy" -o "$tmp/ds" --quiet
want="10 samples, label sum 135"

cmake -S "$src/tests/install/consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
for how in shared static; do
    out=$("$tmp/cmake-build/consumer_$how" "$tmp/ds")
    echo "cmake ($how): $out"
    case $out in *"$want"*) ;; *) echo "expected: $want" >&2; exit 1 ;; esac
done

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -o "$tmp/consumer_pc" "$src/tests/install/consumer/consumer.c" \
   $(pkg-config --cflags --libs shardfeed) -Wl,-rpath,"$prefix/lib"
out=$("$tmp/consumer_pc" "$tmp/ds")
echo "pkg-config: $out"
case $out in *"$want"*) ;; *) echo "expected: $want" >&2; exit 1 ;; esac
# The program uses the installed library, not the build tree's.
ldd "$tmp/consumer_pc" | grep -q "$prefix/lib/libshardfeed.so" || { echo "not linked to the prefix" >&2; exit 1; }
echo "install: ok"
