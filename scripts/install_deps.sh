#!/usr/bin/env bash
# Installs the Debian packages qkv needs to build and test, only those missing (idempotent).
# Usage: scripts/install_deps.sh [--with-torch]   (python3-torch is only needed by tools/ and bench/)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libdnnl-dev ocl-icd-opencl-dev libcli11-dev
      nlohmann-json3-dev libzip-dev libutf8proc-dev libcairo2-dev libgtest-dev
      libbenchmark-dev libsentencepiece-dev python3
      clang-14 libclang-rt-14-dev libomp-14-dev)  # make fuzz / fuzz-ci: libFuzzer, OpenMP for clang
[[ "${1:-}" == "--with-torch" ]] && pkgs+=(python3-torch)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "qkv: installing missing packages: ${missing[*]}"
    sudo_cmd=""; [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
