#pragma once
// The model `qkv serve` translates with, reloadable from its folder while requests are served:
// runtime::Translator (runtime/translator.h), whose reload() loads and checks the folder and swaps
// it in only when that succeeded (a damaged folder is refused; the old model keeps serving).
// Batches that started on the old model finish with it.
#include "qkv/runtime/translator.h"

namespace qkv::serve {

using ModelHolder = runtime::Translator;

}  // namespace qkv::serve
