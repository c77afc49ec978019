# Fails when an intrinsic (_mm*, _tile_*), an x86 vector type (__m128/__m256/__m512, __mmask) or
# <immintrin.h> appears in src/ outside the SIMD layer: src/kernels/cpu/simd.h and its simd_*.h
# siblings (docs/kernels/recipe.md). The one file outside kernels allowed to touch the MXCSR is
# src/core/parallel.cpp (flush-to-zero, process state). Comments are not checked.
# Run by ctest as: cmake -DROOT=<source dir> -P test_simd_layer.cmake
cmake_minimum_required(VERSION 3.20)
set(violations "")
file(GLOB_RECURSE files ${ROOT}/src/*.cpp ${ROOT}/src/*.h ${ROOT}/src/*.inc)
foreach(f ${files})
    if(f MATCHES "/src/kernels/cpu/simd(_[a-z0-9]+)?\\.h$" OR f MATCHES "/src/core/parallel\\.cpp$")
        continue()
    endif()
    file(STRINGS "${f}" lines)
    foreach(line IN LISTS lines)
        string(REGEX REPLACE "//.*$" "" code "${line}")
        if(code MATCHES "(^|[^A-Za-z0-9_])(_mm[0-9]*_[a-z]|_tile_[a-z]|__m(128|256|512)|__mmask)" OR
           code MATCHES "#include <immintrin\\.h>")
            list(APPEND violations "${f}: ${line}")
        endif()
    endforeach()
endforeach()
if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "intrinsics outside the SIMD layer (src/kernels/cpu/simd*.h):\n  ${text}")
endif()
message(STATUS "simd layer: no intrinsics outside src/kernels/cpu/simd*.h")
