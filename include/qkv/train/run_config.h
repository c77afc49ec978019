#pragma once
// Moved to the runtime layer (qkv/runtime/run_config.h, issue 43); its names stay reachable as train::.
#include "qkv/runtime/run_config.h"
#include "qkv/train/runtime_names.h"
