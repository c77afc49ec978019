#pragma once
// Continuing a prompt with a language-model folder (runtime::ModelDir of ModelKind::lm): what
// `qkv generate` does, and what `qkv train --model lm` samples at its end. Characters are the
// tokens, after D2L's preprocessing (9.2.1: lower case, every run of non-letters one space); the
// model is trained by train::run (train/lm.h).
#include <cstdint>
#include <functional>
#include <string>

#include "qkv/runtime/model_dir.h"

namespace qkv::runtime {

/// D2L's preprocessing (9.2.1): letters lower-cased, every run of other characters one space.
std::string preprocess_lm_text(const std::string& text);

struct GenerateOptions {
    int64_t max_new_tokens = 100;
    /// 0: greedy; > 0: sampling with this temperature (and top_k / top_p).
    double temperature = 0.0;
    int64_t top_k = 0;
    double top_p = 1.0;
    uint64_t seed = 0;
    bool use_cache = true;  // false: recompute the whole prefix every token (for the benchmark)
};
/// Continues `prompt` with the language model of `m` (runtime::load_model_dir(dir, true);
/// preprocessed as the training text; "" starts at a word boundary) token by
/// token through decode::generate (greedy, or sampling from Generator(seed); <unk> and <pad> never
/// emitted) with the KV cache (use_cache false: TransformerLM::set_recompute_prefix), calling
/// on_token with each new character as it comes. Returns the
/// new text. Throws qkv::Error, before any token is generated, when the prompt holds letters the
/// vocabulary lacks (naming them), when a non-empty prompt has no letter (it would preprocess to
/// nothing), when prompt + max_new_tokens exceeds a sinusoidal model's max_len positions (naming
/// --prompt and --max-new-tokens), or when an option is out of range.
std::string generate_text(const runtime::ModelDir& m, const std::string& prompt, const GenerateOptions& opt,
                          const std::function<void(const std::string&)>& on_token = {});

}  // namespace qkv::runtime
