#!/usr/bin/env bash
# Installs the Debian packages qkv needs to build and test, only those missing (idempotent).
# Usage: scripts/install_deps.sh [--with-torch]   (python3-torch is only needed by tools/ and bench/)
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config libdnnl-dev ocl-icd-opencl-dev libcli11-dev
      nlohmann-json3-dev libzip-dev zlib1g-dev libutf8proc-dev libcairo2-dev libgtest-dev
      libbenchmark-dev libsentencepiece-dev python3
      openmpi-bin libopenmpi-dev)
# Python package (python/, `make python`, ctest label python): pybind11, numpy, pytest; matplotlib
# for examples/python/chapter.py's heatmaps; setuptools/pip/venv for `pip install --no-build-isolation .`.
pkgs+=(pybind11-dev python3-dev python3-numpy python3-pytest python3-setuptools python3-pip python3-venv
       python3-matplotlib)
# The chapter's notebooks (notebooks/, ctest label notebooks, make notebooks / notebooks-html): nbconvert
# executes them headless with ipykernel; jupyter-notebook serves them.
pkgs+=(python3-nbconvert python3-ipykernel jupyter-notebook)
# qkv serve: cpp-httplib (the HTTP server), curl (tests/cli/test_serve_page.sh), chromium (the
# page in a headless browser, tests/cli/test_serve_page.sh).
pkgs+=(libcpp-httplib-dev curl chromium)
pkgs+=(clang-14 libclang-rt-14-dev libomp-14-dev)  # make fuzz / fuzz-ci: libFuzzer, OpenMP for clang
# The multi-host test bed (tests/dist/netns_testbed.sh, ctest dist.netns): ip netns, tc; unshare.
pkgs+=(iproute2 util-linux)
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
