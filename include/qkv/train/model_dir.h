#pragma once
// Moved to the runtime layer (qkv/runtime/model_dir.h, with the text pipeline in runtime/text.h
// and translating in runtime/translate.h; issue 43); the names stay reachable as train::.
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translate.h"
#include "qkv/train/runtime_names.h"
