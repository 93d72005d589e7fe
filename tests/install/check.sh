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
log=$tmp/step.log
# quiet STEP CMD...: runs CMD with its output in a log, shown (with the step's
# name) only if it fails, so a CI failure says which step and why.
quiet() {
    what=$1; shift
    if ! "$@" >"$log" 2>&1; then
        echo "install check: $what failed: $*" >&2
        tail -n 40 "$log" >&2
        exit 1
    fi
}
quiet "cmake --install" cmake --install "$build" --prefix "$prefix"

"$py" - "$tmp/npy" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d)
for i in range(10):
    np.save(os.path.join(d, f"img_{i}.npy"), np.full((2, 3), i, np.uint8))
    np.save(os.path.join(d, f"label_{i}.npy"), np.int64(i * 3))
PY
quiet "the installed CLI's pack" "$prefix/bin/shardfeed" pack "$tmp/npy" -o "$tmp/ds" --quiet
want="10 samples, label sum 135"

quiet "configuring the CMake consumer" \
    cmake -S "$src/tests/install/consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix"
quiet "building the CMake consumer" cmake --build "$tmp/cmake-build"
for how in shared static; do
    out=$("$tmp/cmake-build/consumer_$how" "$tmp/ds" 2>&1) || { echo "consumer_$how failed: $out" >&2; exit 1; }
    echo "cmake ($how): $out"
    case $out in *"$want"*) ;; *) echo "expected: $want, got: $out" >&2; exit 1 ;; esac
done

# The build tree without installing: PKG_CONFIG_PATH=BUILD finds shardfeed-uninstalled.pc.
flags=$(PKG_CONFIG_PATH="$build" pkg-config --cflags --libs shardfeed) ||
    { echo "install check: pkg-config found no shardfeed-uninstalled.pc in $build" >&2; exit 1; }
quiet "building against the build tree" cc -o "$tmp/consumer_tree" "$src/tests/install/consumer/consumer.c" $flags
out=$("$tmp/consumer_tree" "$tmp/ds" 2>&1) || { echo "consumer_tree failed: $out" >&2; exit 1; }
echo "pkg-config (build tree): $out"
case $out in *"$want"*) ;; *) echo "expected: $want, got: $out" >&2; exit 1 ;; esac
case $(ldd "$tmp/consumer_tree") in *"$build/libshardfeed.so"*) ;; *) echo "not linked to $build" >&2; exit 1 ;; esac

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs shardfeed) || { echo "install check: pkg-config found no shardfeed.pc in $PKG_CONFIG_PATH" >&2; exit 1; }
quiet "building the pkg-config consumer" cc -o "$tmp/consumer_pc" "$src/tests/install/consumer/consumer.c" \
    $flags -Wl,-rpath,"$prefix/lib"
out=$("$tmp/consumer_pc" "$tmp/ds" 2>&1) || { echo "consumer_pc failed: $out" >&2; exit 1; }
echo "pkg-config: $out"
case $out in *"$want"*) ;; *) echo "expected: $want, got: $out" >&2; exit 1 ;; esac
# The program uses the installed library, not the build tree's.
libs=$(ldd "$tmp/consumer_pc")
case $libs in *"$prefix/lib/libshardfeed.so"*) ;; *) printf 'not linked to the prefix:\n%s\n' "$libs" >&2; exit 1 ;; esac
echo "install: ok"
