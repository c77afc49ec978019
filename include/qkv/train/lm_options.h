#pragma once
// `qkv train --model lm`'s configuration from a preset or a resumed folder plus the flags: the rows
// of the run-configuration table (runtime::config_fields()) the language model shares, by config.json
// key, and its own three (key/value heads, positions, window).
#include <cstdio>
#include <optional>
#include <string>

#include "qkv/runtime/run_config_fields.h"
#include "qkv/train/lm.h"

namespace qkv::train {

/// The language model's own settings (`qkv train --num-kv-heads/--positions/--window`; unset: the preset's).
struct LmOverrides {
    std::optional<int64_t> num_kv_heads, window;
    std::optional<std::string> positions;  // "rope" or "sinusoidal"
};

/// Whether the language model takes the table row `key` ("train.lr"): model widths, heads, blocks,
/// dropout, batch size, num_steps, lr, seed, warmup, precision, logging, the stopping rules and the
/// data path.
bool lm_takes(const std::string& key);

/// The run's LmConfig. Fresh: lm_preset(preset) with the overrides; a ConfigError naming the flags
/// for heads that do not divide the width, key/value heads that do not divide the heads, or RoPE
/// with an odd head width. resume: out_dir's config.json (check_resume_checkpoint, a folder that
/// holds a translation model refused), the model-changing flags that differ refused (a ConfigError
/// listing them), the others ignored with a warning line on `log`; `preset_given` ("" none) is
/// ignored likewise. Then (both) the stopping rules and the data path given. Overrides of rows the
/// LM does not take are refused ("--subword does not apply to --model lm").
LmConfig configure_lm(const std::string& preset, bool resume, const std::string& out_dir, const RunOverrides& o,
                      const LmOverrides& lm, const std::string& preset_given, std::FILE* log);

}  // namespace qkv::train
