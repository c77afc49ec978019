#pragma once
// Umbrella header for every qkv op.
#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
