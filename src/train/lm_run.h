#pragma once
// Private to src/train: train::run's language-model branch (train/lm.cpp), for a RunConfig of kind
// runtime::ModelKind::lm.
#include "qkv/train/run.h"

namespace qkv::train {

/// train::run for a language model (cfg.architecture == lm; validated): the text (load_lm_data), the
/// model (models::TransformerLM behind models::LMTrainingView), config.json and vocab.txt, training
/// with the translation models' Trainer and folder guards, then "validation perplexity P". A fresh
/// run stopped before its first checkpoint removes what it wrote (trained = false); a resume whose
/// checkpoint already met a stopping rule returns nothing_to_do. Throws ConfigError under mpirun
/// (opt.comm of size > 1: one process trains it) and as train::run does.
RunResult run_language_model(RunConfig cfg, const RunOptions& opt, const RunOverrides& given);

}  // namespace qkv::train
