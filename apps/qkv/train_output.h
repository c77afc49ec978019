#pragma once
// What `qkv train` prints after training: the summary, the held-out samples, and how a run ended
// early (nothing to do, a signal: the message and the exit status).
#include <string>

#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/translation_data.h"
#include "qkv/train/run.h"

namespace qkv::cli {

/// The first n held-out test pairs translated (greedy), and for en->fr models D2L's book sentences
/// with their BLEU (k = 2).
void print_samples(runtime::ModelDir& m, const runtime::TranslationData& d, int n);

/// Steps, time, stop reason, the last epoch's losses, throughput, peak memory and the model folder.
void print_summary(const train::TrainResult& r, const std::string& out,
                   const char* files = "model.safetensors, config.json, vocabularies, metrics.jsonl, loss.png");

/// Before the summary: "nothing to do" (returns true: the folder stays as it is, exit 0); throws
/// ExitStatus for a run that put an overwritten run's files back, or an LM run stopped before its
/// first checkpoint.
bool report_early_end(const train::RunResult& r, bool lm);

/// After the summary: a caught signal's message (what is saved, the command that continues) and
/// ExitStatus 128 + signal. No samples then: whoever pressed Ctrl-C wants the prompt back.
void report_signal(const train::RunResult& r, const std::string& out, bool lm);

}  // namespace qkv::cli
