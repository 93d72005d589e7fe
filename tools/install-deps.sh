#!/usr/bin/env bash
# Installs the Debian packages shardfeed builds, tests and demos with.
# Run as root (CI is root); prints what it would need otherwise.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      liburing-dev libzstd-dev libxxhash-dev libarchive-dev libcriterion-dev
      python3 python3-numpy python3-dev libdlpack-dev python3-torch
      dataset-fashion-mnist bc valgrind fio python3-h5py python3-lmdb python3-matplotlib
      clang-14 libclang-rt-14-dev
      openmpi-bin python3-torchvision)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]}" >&2
    echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "installing: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
