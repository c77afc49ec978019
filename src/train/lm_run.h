#pragma once
// Private to src/train: what train::run does for every model kind (train_in_folder: the folder
// guards around the Trainer) and its language-model branch (train/lm.cpp).
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "qkv/data/nmt_data.h"
#include "qkv/models/encoder_decoder.h"
#include "qkv/train/out_folder.h"
#include "qkv/train/run.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

/// What train_in_folder trains: the model as the Trainer's EncoderDecoder, its arrays and padding
/// id, the checkpoint metadata (the vocabularies' fingerprints, ...), and the files a run writes
/// into the folder before its first step (called on rank 0 only, also on resume: the kind decides).
struct FolderTraining {
    models::EncoderDecoder& model;
    const data::NmtArrays& train;
    const data::NmtArrays& valid;
    int64_t pad = 0;
    std::map<std::string, std::string> metadata;
    std::function<void()> write_files;
    /// A fresh run stopped before its first checkpoint removes what it wrote (the language model's
    /// rule; a translation run leaves its config.json, which a later fresh run replaces).
    bool undo_unstarted = false;
};
enum class FolderOutcome { trained, restored_earlier, undone };

/// Trains res.config's run into opt.out_dir with the Trainer (made in `trainer`, for the caller's
/// evaluation): signals caught (opt.catch_signals), an overwritten run's files aside until the first
/// checkpoint after a step (`replace`), a failed fresh run's files removed, RunOptions' optimizer,
/// gradient sync, hooks and callbacks. Fills res.train and res.signal. Returns restored_earlier when
/// the earlier files were put back (stopped before that checkpoint), undone (undo_unstarted).
FolderOutcome train_in_folder(RunResult& res, const FolderTraining& t, const RunOptions& opt, const OutFolder& out,
                              bool replace, std::optional<Trainer>& trainer);

/// train::run for a language model (cfg.architecture == lm; validated): the text (load_lm_data), the
/// model (models::TransformerLM behind models::LMTrainingView), config.json and vocab.txt,
/// train_in_folder, then "validation perplexity P". A fresh run stopped before its first checkpoint
/// removes what it wrote (trained = false); a resume whose checkpoint already met a stopping rule
/// returns nothing_to_do. Throws ConfigError under mpirun (opt.comm of size > 1: one process trains
/// it) and as train::run does.
RunResult run_language_model(RunConfig cfg, const RunOptions& opt, const RunOverrides& given);

}  // namespace qkv::train
