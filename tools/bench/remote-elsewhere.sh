#!/usr/bin/env bash
# tools/bench/run's remote sets (remote, remote-large: issue 18's reads over loopback against
# curl) on another x86-64 Linux machine that has a C compiler, CMake and python3 with numpy
# but no nginx, curl, libcurl or the other libraries shardfeed builds with, and cannot fetch
# packages: the GPU machine, whose 16 cores give nginx, curl and shardfeed cores of their own
# (on the 2-core VM the server takes one of the reader's two).
#
#   tools/bench/remote-elsewhere.sh --fetch   here (Debian 12, apt): download the .debs into
#                                             .remote-debs/ (git-ignored, about 15 MB)
#   tools/bench/remote-elsewhere.sh [ARGS]    there, from the repository root, .remote-debs/
#                                             carried along: unpack, build, run; ARGS go to
#                                             tools/bench/run (e.g. --quick)
#
# The .debs are unpacked into a private prefix, never into /. nginx and curl run through
# wrappers that alone see the prefix's libraries (LD_LIBRARY_PATH), and shardfeed is linked
# with an RPATH to them (DT_RPATH, which libcurl's own dependencies follow too), so python3
# and everything else keep the machine's libraries. Results: $OUT/bench when $OUT is set (the
# device tool's folder), else the work folder's bench/.
#
#   SF_R_SETS=remote-large   the sets to run (default: remote,remote-large)
#   PYTHON=...               the interpreter (default: python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
debs=.remote-debs
if [ "${1:-}" = "--fetch" ]; then
    mkdir -p "$debs"
    # shardfeed's own libraries, then nginx, curl and libcurl with what they link on Debian 12
    # (apt-cache depends --recurse, less what every machine has: libc, libgcc).
    (cd "$debs" && apt-get download liburing2 liburing-dev libxxhash0 libxxhash-dev libzstd1 \
        libzstd-dev libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev zlib1g zlib1g-dev \
        libwebp7 libwebp-dev nginx curl libcurl4 libcurl4-openssl-dev libssl3 libssl-dev \
        libbrotli1 libcom-err2 libgmp10 libgnutls30 libgssapi-krb5-2 libhogweed6 libidn2-0 \
        libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 libnettle8 \
        libnghttp2-14 libp11-kit0 libpcre2-8-0 libpsl5 librtmp1 libsasl2-2 libssh2-1 \
        libtasn1-6 libunistring2 libffi8 libcrypt1)
    ls "$debs" | wc -l
    exit 0
fi
[ -d "$debs" ] || { echo "remote-elsewhere: no $debs/: run it with --fetch first (where apt works)" >&2; exit 2; }
prefix=${SF_R_PREFIX:-/tmp/sf-rprefix}
build=${SF_R_BUILD:-/tmp/sf-rbuild}
work=${SF_R_WORK:-/tmp/sf-rwork}
bin=$prefix/wrappers
mkdir -p "$prefix" "$bin" "$work"
for d in "$debs"/*.deb; do dpkg -x "$d" "$prefix"; done
lib=$prefix/usr/lib/x86_64-linux-gnu
for t in usr/sbin/nginx usr/bin/curl; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$lib" "$prefix/$t" >"$bin/${t##*/}"
    chmod +x "$bin/${t##*/}"
done
export PATH=$bin:$PATH
nginx -v
curl --version | head -1
echo "$(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDFEED_CUDA=OFF \
      -DSHARDFEED_TESTS=OFF -DSHARDFEED_PYTHON=OFF -DSHARDFEED_REMOTE=ON \
      -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
      -DCMAKE_BUILD_RPATH="$lib" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >"$work/cmake.log"
cmake --build "$build" -j "$(nproc)" --target shardfeed_cli >"$work/build.log" ||
    { tail -30 "$work/build.log"; exit 2; }
export PYTHON=${PYTHON:-python3}
"$PYTHON" tools/bench/run --build "$build" --work "$work" --out "${OUT:-$work}/bench" --no-cold \
    --sets "${SF_R_SETS:-remote,remote-large}" "$@"
# One cold epoch of each set in mode cache again, with --trace: where its time goes (the first
# batch waits for every shard under a global shuffle; then the reads from the files just
# written). The traces go next to the results; a line each summarizes them.
"$PYTHON" - "$build/shardfeed" "$work" "${OUT:-$work}/bench" <<'PY'
import glob, json, os, shutil, subprocess, sys
sys.path.insert(0, os.path.join("tests", "remote"))
import servers
sf, work, out = sys.argv[1:4]
for d in sorted(glob.glob(os.path.join(work, "*-*", "shards-remote"))):
    kind = os.path.basename(os.path.dirname(d))
    batch = "256" if kind.startswith("small") else "32"
    cache = os.path.join(work, "trace-cache")
    trace = os.path.join(out, f"trace-{kind}-cold.json")
    shutil.rmtree(cache, ignore_errors=True)
    with servers.Nginx(os.path.dirname(d)) as ng:
        j = json.loads(subprocess.run(
            [sf, "bench", ng.url + "/shards-remote", "--batch-size", batch, "--shuffle", "global",
             "--epochs", "1", "--remote-mode", "cache", "--cache-dir", cache, "--json",
             "--trace", trace], capture_output=True, text=True, check=True).stdout)
    shutil.rmtree(cache, ignore_errors=True)
    ev = json.load(open(trace))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    io = sorted((e for e in ev if e.get("cat") == "io"), key=lambda e: e["ts"])
    t0 = min(e["ts"] for e in ev if "ts" in e)
    print(f"{kind} cold epoch {j['seconds']:.3f} s (open {j.get('open_seconds', 0):.3f} s): first "
          f"batch read by {(io[0]['ts'] + io[0]['dur'] - t0) / 1e3:.1f} ms, last by "
          f"{(io[-1]['ts'] + io[-1]['dur'] - t0) / 1e3:.1f} ms, {len(io)} reads; {trace}")
PY
