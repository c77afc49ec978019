#pragma once
// The model folder, run configuration, checkpoints and translation data moved from train to the
// runtime layer (qkv/runtime/, issue 43); training code and its callers keep calling them train::.
namespace qkv::runtime {}
namespace qkv::train {
using namespace qkv::runtime;
}  // namespace qkv::train
