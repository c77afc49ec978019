#!/usr/bin/env bash
# Install test: qkv installed into a temporary prefix is usable from an out-of-tree CMake project
# (tests/install/consumer: find_package(qkv 0.1 REQUIRED), qkv::qkv).
#   test_install.sh SOURCE_DIR BUILD_DIR   installs BUILD_DIR, an already built tree (ctest install.consumer)
#   test_install.sh SOURCE_DIR             configures a fresh tree (the program on, as by default) and
#                                          builds only the library (--target qkv) first (slow: the whole
#                                          library; ctest install.fresh, `make test-install`)
# Checks: the installed files (every public header, libqkv.a, the three package files, bin/qkv exactly
# when the tree built it), that the consumer configures, compiles every installed header, links and
# runs, and that find_package(qkv 0.2) refuses this 0.1 package. JOBS sets the fresh build's -j.
set -euo pipefail
src=$(cd "$1" && pwd)
build=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/qkv_install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if [[ -z $build ]]; then
    build=$work/build
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQKV_BUILD_TESTS=OFF \
        -DQKV_BUILD_BENCH=OFF -DQKV_BUILD_EXAMPLES=OFF
    cmake --build "$build" -j "${JOBS:-2}" --target qkv
fi

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix"

# Every public header, nothing else under include/.
diff <(cd "$src/include" && find qkv -name '*.h' | sort) <(cd "$prefix/include" && find . -type f | sed 's|^\./||' | sort) \
    || fail "installed headers differ from include/qkv (diff above: < source, > installed)"
[[ -f $prefix/lib/libqkv.a ]] || fail "no lib/libqkv.a under $prefix"
for f in qkvConfig.cmake qkvConfigVersion.cmake qkvTargets.cmake; do
    [[ -f $prefix/lib/cmake/qkv/$f ]] || fail "no lib/cmake/qkv/$f under $prefix"
done
if [[ -x $build/bin/qkv ]]; then
    [[ -x $prefix/bin/qkv ]] || fail "the tree built the qkv program but bin/qkv is not installed"
    "$prefix/bin/qkv" --help >/dev/null || fail "installed bin/qkv --help failed"
else
    [[ ! -e $prefix/bin/qkv ]] || fail "the tree did not build the qkv program but bin/qkv is installed"
fi
# The package must not point back into the source or build tree.
if grep -n -e "$src/" -e "$build" "$prefix"/lib/cmake/qkv/*.cmake; then
    fail "the installed package refers to the source or build tree (lines above)"
fi

cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DQKV_EXPECTED_INCLUDE="$prefix/include"
cmake --build "$work/consumer"
"$work/consumer/consumer"

# Version check: a 0.2 request must not accept the 0.1 package (SameMinorVersion).
mkdir -p "$work/v02"
cat > "$work/v02/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(v02 LANGUAGES CXX)
find_package(qkv 0.2 QUIET)
if(qkv_FOUND)
    message(FATAL_ERROR "find_package(qkv 0.2) accepted qkv ${qkv_VERSION}")
endif()
CM
cmake -S "$work/v02" -B "$work/v02/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null \
    || fail "find_package(qkv 0.2) accepted the 0.1 package"
echo "install test: ok"
