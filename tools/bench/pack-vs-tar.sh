#!/usr/bin/env bash
# Measures `shardfeed pack` against `tar cf` of the same inputs, and
# `shardfeed verify` against `cat` of the same shard bytes, side by side in
# one run (warm page cache: every input is read once before timing).
#
#   tools/bench/pack-vs-tar.sh INPUT WORK_DIR [JOBS]
#
# INPUT is anything pack takes (a directory of .npy files, an ImageFolder
# tree, ...); PACK_OPTS adds pack options (e.g. PACK_OPTS="--align 64").
# WORK_DIR receives a tar file and a dataset: it must not exist yet (the
# script makes it, with a marker file) or be one the script made, whose
# tar files and dataset it replaces; any other folder is refused untouched.
set -euo pipefail
in=${1:?INPUT_DIR}; work=${2:?WORK_DIR}; jobs=${3:-$(nproc)}
sf=${SHARDFEED:-$(dirname "$0")/../../build/shardfeed}
marker=.shardfeed-pack-vs-tar
if [ -e "$work" ] && [ ! -f "$work/$marker" ]; then
    echo "pack-vs-tar.sh: $work exists and was not made by this script: give a new folder" >&2
    exit 1
fi
mkdir -p "$work" && touch "$work/$marker"
rm -rf "${work:?}/ds" "${work:?}/in.tar" "${work:?}/in2.tar"
bytes=$(du -sb "$in" | cut -f1)

t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
rate() { echo "scale=0; $bytes / $1 / 1000000" | bc; }

find "$in" -type f -exec cat {} + >/dev/null   # warm the inputs
tar_s=$(t tar cf "$work/in.tar" -C "$in" .)
tar_sync_s=$(t bash -c "rm -f '$work/in2.tar'; tar cf '$work/in2.tar' -C '$in' . && sync -f '$work/in2.tar'")
rm -f "$work/in.tar" "$work/in2.tar"
# shellcheck disable=SC2086
pack_s=$(t "$sf" pack "$in" -o "$work/ds" -j "$jobs" --quiet ${PACK_OPTS:-})

shard_bytes=$(du -cb "$work"/ds/*.sfs | tail -1 | cut -f1)
cat "$work"/ds/*.sfs >/dev/null  # warm the shards
cat_s=$(t bash -c "cat '$work'/ds/*.sfs > /dev/null")
verify_s=$(t "$sf" verify "$work/ds" -j "$jobs")
vrate() { echo "scale=0; $shard_bytes / $1 / 1000000" | bc; }

printf '%-34s %9s %9s %7s\n' "what ($((bytes / 1000000)) MB in, $((shard_bytes / 1000000)) MB of shards)" seconds MB/s ratio
printf '%-34s %9.2f %9d %7s\n' "tar cf (no fsync)" "$tar_s" "$(rate "$tar_s")" 1.00
printf '%-34s %9.2f %9d %7s\n' "tar cf + sync" "$tar_sync_s" "$(rate "$tar_sync_s")" "$(echo "scale=2; $tar_s / $tar_sync_s" | bc)"
printf '%-34s %9.2f %9d %7s\n' "shardfeed pack -j $jobs (fsync'd)" "$pack_s" "$(rate "$pack_s")" "$(echo "scale=2; $tar_s / $pack_s" | bc)"
printf '%-34s %9.2f %9d %7s\n' "cat shards > /dev/null" "$cat_s" "$(vrate "$cat_s")" 1.00
printf '%-34s %9.2f %9d %7s\n' "shardfeed verify -j $jobs" "$verify_s" "$(vrate "$verify_s")" "$(echo "scale=2; $cat_s / $verify_s" | bc)"
