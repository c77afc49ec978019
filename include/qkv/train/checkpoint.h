#pragma once
// Moved to the runtime layer (qkv/runtime/checkpoint.h, issue 43); its names stay reachable as train::.
#include "qkv/runtime/checkpoint.h"
#include "qkv/train/runtime_names.h"
