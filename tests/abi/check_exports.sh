#!/bin/sh
# The shared library exports exactly the functions the public headers
# declare with SF_API, each in the version node of lib/shardfeed.map.
# Usage: check_exports.sh LIBSHARDFEED_SO INCLUDE_DIR MAP_FILE
set -eu
so=$1 inc=$2 map=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | sed 's/@.*//' | sort -u > "$tmp/exported"
grep -rhoE 'SF_API [^;(]*[^a-z0-9_](sf_[a-z0-9_]+)[[:space:]]*\(' "$inc" |
    grep -oE 'sf_[a-z0-9_]+[[:space:]]*\($' | tr -d '( ' | sort -u > "$tmp/declared"
sed -n 's/^[[:space:]]*\(sf_[a-z0-9_]*\);$/\1/p' "$map" | sort -u > "$tmp/pinned"
status=0
if ! diff -u "$tmp/declared" "$tmp/exported" > "$tmp/d1"; then
    echo "exported symbols differ from the SF_API declarations (- declared, + exported):"; cat "$tmp/d1"; status=1
fi
if ! diff -u "$tmp/declared" "$tmp/pinned" > "$tmp/d2"; then
    echo "lib/shardfeed.map differs from the SF_API declarations (- declared, + in the map):"; cat "$tmp/d2"; status=1
fi
versioned=$(nm -D --defined-only "$so" | awk '$2 == "T"' | grep -c '@@SHARDFEED_0' || true)
if [ "$versioned" -ne "$(wc -l < "$tmp/declared")" ]; then
    echo "not every exported function carries the version SHARDFEED_0 ($versioned do)"; status=1
fi
[ $status -eq 0 ] && echo "ABI: $(wc -l < "$tmp/declared") functions, all pinned in SHARDFEED_0"
exit $status
