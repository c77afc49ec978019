#pragma once
// Moved to the runtime layer (qkv/runtime/translation_data.h, issue 43); its names stay reachable as train::.
#include "qkv/runtime/translation_data.h"
#include "qkv/train/runtime_names.h"
