#!/usr/bin/env bash
# Installs the Debian packages a job needs, by group:
#   build   compiler, CMake and the libraries shardfeed links (image codecs, libcurl,
#           libcrypto)
#   python  the Python module's build (headers, DLPack), numpy, and what
#           `pip install --no-build-isolation .` needs offline (setuptools,
#           wheel, pip, venv)
#   demo    the quick start's data and training demo (torch, Fashion-MNIST)
#   test    what the test suite uses besides (Criterion, torchvision, MPI,
#           python3-build for the wheel test, man-db for the man page's, ...)
#   ci      the sanitizer, valgrind and fuzzing stages of .ci/run
#   bench   the peers tools/bench/run measures (fio, h5py, lmdb, matplotlib)
#   remote  the remote-dataset tests' local servers (tests/remote): nginx, curl,
#           Node.js and npm (Debian's, unless a node with npm is already there),
#           and s3rver, pinned, from npm into $S3RVER_PREFIX (npm's registry
#           must be reachable)
# Usage: tools/install-deps.sh GROUP...   (no group: every group)
# Run as root (CI is root); otherwise it prints the apt-get command to run.
set -euo pipefail
declare -A group=(
    [build]="build-essential cmake pkg-config liburing-dev libzstd-dev libxxhash-dev libarchive-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libcurl4-openssl-dev libssl-dev"
    [python]="python3 python3-dev libdlpack-dev python3-numpy python3-setuptools python3-wheel python3-pip python3-venv"
    [demo]="python3-torch dataset-fashion-mnist"
    [test]="libcriterion-dev python3-torch python3-torchvision python3-pil python3-skimage dataset-fashion-mnist openmpi-bin bc python3-build man-db"
    [ci]="clang-14 libclang-rt-14-dev valgrind"
    [bench]="fio python3-h5py python3-lmdb python3-matplotlib"
    [remote]="nginx-light curl libcurl4-openssl-dev libssl-dev"
)
# s3rver for tests/remote/servers.py (S3Server), where it looks for it.
S3RVER_VERSION=3.7.1
S3RVER_PREFIX=/usr/local/lib/shardfeed-test/s3rver
groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(build python demo test ci bench remote)
pkgs=()
want_s3rver=0
for g in "${groups[@]}"; do
    [ -n "${group[$g]:-}" ] || { echo "install-deps: no group '$g' (build python demo test ci bench remote)" >&2; exit 2; }
    read -r -a more <<<"${group[$g]}"
    pkgs+=("${more[@]}")
    if [ "$g" = remote ]; then
        want_s3rver=1
        # A node with npm already installed (NodeSource's, say) is used as is:
        # Debian's npm package would conflict with it.
        command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
    fi
done
missing=()
for p in $(printf '%s\n' "${pkgs[@]}" | sort -u); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
s3rver_installed() {
    grep -qs "\"version\": \"$S3RVER_VERSION\"" "$S3RVER_PREFIX/node_modules/s3rver/package.json" &&
        [ -x "$S3RVER_PREFIX/node_modules/.bin/s3rver" ]
}
install_s3rver() {
    [ "$want_s3rver" = 1 ] && ! s3rver_installed || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "s3rver $S3RVER_VERSION is not installed in $S3RVER_PREFIX" >&2
        echo "install it with: sudo npm install --prefix $S3RVER_PREFIX --no-audit --no-fund s3rver@$S3RVER_VERSION" >&2
        return 1
    fi
    echo "installing: s3rver@$S3RVER_VERSION (npm) into $S3RVER_PREFIX"
    mkdir -p "$S3RVER_PREFIX"
    npm install --prefix "$S3RVER_PREFIX" --no-audit --no-fund --loglevel=error "s3rver@$S3RVER_VERSION" >/dev/null
}
if [ ${#missing[@]} -eq 0 ]; then
    install_s3rver
    exit
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]}" >&2
    echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
    install_s3rver || true
    exit 1
fi
echo "installing: ${missing[*]}"
# apt waits up to two minutes for a lock another apt or dpkg holds (an
# unattended upgrade, say), then says so in one line instead of a wall of text.
apt_get() {
    local err
    if ! err=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 "$@" 2>&1 >/dev/null); then
        if grep -q "Could not get lock" <<<"$err"; then
            echo "install-deps: apt is busy: another process holds its lock ($(grep -o 'held by process [0-9]* ([^)]*)' <<<"$err" | head -1)); wait for it to finish, then run this again" >&2
        else
            echo "$err" >&2
        fi
        return 1
    fi
}
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}"
install_s3rver
