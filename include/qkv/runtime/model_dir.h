#pragma once
// A trained model's folder (what `qkv train --out DIR` writes and translate/eval/heatmap read):
//   config.json        RunConfig (runtime/run_config.h)
//   src_vocab.txt, tgt_vocab.txt   one token per line (data/vocab.h)
//   model.safetensors  parameters, PyTorch names (runtime/checkpoint.h)
//   spm.model          subword runs with a shared vocabulary: the SentencePiece model
//                      (spm_src.model + spm_tgt.model without --shared-vocab); config.json's
//                      data.subword_files names them. Folders without them are word models.
//   checkpoint.safetensors, metrics.jsonl, loss.png   (training only)
// Translating with it: runtime/translate.h and runtime/translator.h.
// A language model's folder (`qkv train --model lm`, config.json "model_kind": "lm") holds
// config.json, vocab.txt (one character per line), model.safetensors and the training files; qkv
// generate samples it (runtime/generate.h generate_text).
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/data/vocab.h"
#include "qkv/models/bahdanau.h"
#include "qkv/models/transformer.h"
#include "qkv/runtime/run_config.h"

namespace qkv::runtime {

/// Writes config.json, src_vocab.txt and tgt_vocab.txt into dir (created), atomically, and the
/// SentencePiece model file(s) of a subword run (subword_files names); removes the SentencePiece
/// files the run does not use (left by an earlier run of another kind: the loader refuses a word
/// folder holding spm.model). Throws qkv::Error when cfg.data.subword is set but `subwords` is
/// empty.
void write_run_files(const std::string& dir, const RunConfig& cfg, const data::Vocab& src_vocab,
                     const data::Vocab& tgt_vocab, const SubwordModels& subwords = {});

/// Every file name `qkv train` writes into a model folder (the run files above, the SentencePiece
/// models, checkpoint.safetensors, metrics.jsonl, loss.png; a language model's vocab.txt).
inline constexpr const char* kModelDirFiles[] = {"model.safetensors", "checkpoint.safetensors", "config.json",
                                                 "src_vocab.txt",     "tgt_vocab.txt",          "spm.model",
                                                 "spm_src.model",     "spm_tgt.model",          "metrics.jsonl",
                                                 "loss.png",          "vocab.txt"};

/// File names of a subword run's SentencePiece models in its folder: {"spm.model", "spm.model"}
/// with a shared vocabulary, else {"spm_src.model", "spm_tgt.model"}; {"", ""} for words.
std::pair<std::string, std::string> subword_files(const DataConfig& d);
/// Loads the SentencePiece model(s) of a model folder (none for a word model). Throws
/// qkv::Error naming the file when config.json's data.subword disagrees with the files present (a
/// word model's folder holding spm.model / spm_src.model / spm_tgt.model, a subword model's
/// missing), or a file is corrupt or truncated ("DIR/spm.model is corrupt or truncated
/// (SentencePiece: ...)", data::SubwordModel::load).
SubwordModels load_model_dir_subwords(const std::string& dir, const RunConfig& cfg);
/// A subword folder's vocabulary files against its SentencePiece model(s) (the same pieces in the
/// same order); nothing for a word model (`subwords` inactive). Throws qkv::Error naming both files
/// and the first token that differs ("DIR/src_vocab.txt: token 9 is 'x', but piece 9 of
/// DIR/spm_src.model is 'y'"): a model file or vocabulary replaced or edited.
void check_vocabs_list_pieces(const std::string& dir, const RunConfig& cfg, const data::Vocab& src_vocab,
                              const data::Vocab& tgt_vocab, const SubwordModels& subwords);

/// "" unless `dir` holds DIR/.qkv-replaced, where `qkv train --overwrite` keeps the earlier run's
/// files until its first checkpoint: then a sentence for error messages saying that the earlier
/// model waits there (that run was killed, or is still running) and how to put it back; when
/// the folder holds a checkpoint (the new run got that far and was killed while removing them),
/// that --resume continues the new run.
std::string replaced_run_note(const std::string& dir);

/// The message for a model folder `dir` that does not exist: "no model folder 'DIR' (looked in
/// /abs/DIR): train one with: qkv train --out DIR (make demo trains one into runs/qkv, ...)".
std::string missing_model_folder_message(const std::string& dir);

/// The number of parameters build_model(cfg) gives (named_parameters(), a tied matrix once),
/// computed from the sizes without allocating: Transformer (D2L 11.7) N·(12C² + 10C + 4CF + 2F +
/// 2C) + C·(V_src + V_tgt) + C·V_tgt + V_tgt (one V·C matrix instead of three when tied);
/// Bahdanau (D2L 11.4) the GRU layers' 3H'(I + H' + 2) per direction, the embeddings, the
/// additive attention's 2H² + H and the output layer. A double: sizes from a config.json edited
/// by hand may overflow int64.
double estimate_parameters(const RunConfig& cfg);
/// Bytes a model of `cfg` needs: 4 bytes per float32 parameter times `copies` (1: the weights, for
/// translate/eval; kTrainingCopies: weights, gradients and Adam's two moments), plus the
/// Transformer's positional-encoding table (max_len × C floats). Activations are not counted.
double estimate_model_bytes(const RunConfig& cfg, int copies = 1);
constexpr int kTrainingCopies = 4;
/// Throws qkv::Error when estimate_model_bytes(cfg, copies) exceeds this machine's physical
/// memory (sysconf), before anything is allocated: "the model of <what> would need about 40.2 GiB
/// (1.08e+10 parameters × 4 bytes × 1 copy), more than this machine's 23.4 GiB of memory ...".
void check_model_fits_memory(const RunConfig& cfg, int copies, const std::string& what);

/// A fresh model of the run's architecture (Transformer or Bahdanau), vocabulary sizes from
/// cfg.model, parameters drawn from the default generator. Refuses a model that does not fit in
/// memory first (check_model_fits_memory(cfg, copies, "this configuration")).
std::shared_ptr<models::EncoderDecoder> build_model(const RunConfig& cfg, int copies = 1);

/// The settings that define what the weights mean ("model" of to_json(cfg), with the architecture,
/// plus data.num_steps, data.subword, data.shared_vocab and data.pipeline), as a JSON object.
/// Two configurations with equal architecture_json load the same weights into the same function.
nlohmann::json architecture_json(const RunConfig& cfg);
/// The keys ("model.num_heads", ...) whose values differ between architecture_json(a) and
/// architecture_json(b), each as "key: A vs B"; empty when they agree.
std::vector<std::string> architecture_differences(const RunConfig& a, const RunConfig& b);
/// Whether a model folder's config.json agrees with the configuration stored with its weights
/// (model.safetensors' metadata "qkv.config", written by qkv train since session 5).
struct Consistency {
    enum class State { consistent, no_record, inconsistent } state = State::no_record;
    std::vector<std::string> differences;  // architecture_differences(config.json, stored)
};
/// Compares `cfg` (config.json of `dir`) with `weights`' stored configuration. A weights file
/// without "qkv.config" (an older folder, or a file written elsewhere) gives no_record; one whose
/// "qkv.config" is not a configuration throws qkv::Error naming the file.
Consistency check_architecture(const std::string& weights, const RunConfig& cfg);
/// The same with the weights file's metadata already read (read_checkpoint_metadata).
Consistency check_architecture(const std::string& weights, const std::map<std::string, std::string>& meta,
                               const RunConfig& cfg);

/// The metadata keys of model.safetensors that record the vocabularies it was trained with
/// (vocab_fingerprint of src_vocab.txt and tgt_vocab.txt; written by qkv train since this
/// version, kept by qkv average).
inline constexpr const char* kSrcVocabKey = "qkv.src_vocab_fnv1a64";
inline constexpr const char* kTgtVocabKey = "qkv.tgt_vocab_fnv1a64";
/// The same for the language model's vocab.txt (qkv train --model lm).
inline constexpr const char* kLmVocabKey = "qkv.vocab_fnv1a64";

/// FNV-1a 64 of the vocabulary's tokens in id order, each followed by '\n', as 16 hex digits: an
/// edited, reordered or damaged vocabulary file (which loads, but maps ids to other words) gives
/// another value.
std::string vocab_fingerprint(const data::Vocab& v);

/// Throws qkv::Error ("VOCAB_FILE is not the vocabulary WEIGHTS was trained with ...") when the
/// weights file's metadata `meta` records a fingerprint under `key` that `vocab` (read from
/// `vocab_file`) does not have; nothing when it records none (a folder of an older qkv).
void check_vocab_fingerprint(const std::map<std::string, std::string>& meta, const char* key,
                             const data::Vocab& vocab, const std::string& vocab_file, const std::string& weights);
/// The same for a translation folder's two files, DIR/src_vocab.txt and DIR/tgt_vocab.txt.
void check_vocab_fingerprints(const std::map<std::string, std::string>& meta, const std::string& dir,
                              const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, const std::string& weights);
/// One line for logs: architecture, parameter count and sizes.
std::string describe_model(const RunConfig& cfg, const models::EncoderDecoder& model);

struct ModelDir {
    std::string dir;
    RunConfig config;                               // config.architecture: the kind
    /// Pieces for a subword model; a language model's vocab.txt is tgt_vocab (src_vocab empty).
    data::Vocab src_vocab, tgt_vocab;
    SubwordModels subwords;                         // inactive for a word model
    std::shared_ptr<models::EncoderDecoder> model;  // eval mode; null for a language model
    std::shared_ptr<models::TransformerLM> lm;      // a language model (eval mode); else null
    /// The model as its concrete type (nullptr when it is the other architecture).
    models::Transformer* transformer() const { return dynamic_cast<models::Transformer*>(model.get()); }
    models::Bahdanau* bahdanau() const { return dynamic_cast<models::Bahdanau*>(model.get()); }
};

/// config.json of a model folder; throws qkv::Error naming the file when missing or invalid, or
/// when an object repeats a key ("duplicate key \"model.num_heads\"": JSON parsers keep one of
/// the two values silently). A language model's is refused ("'DIR' holds a language model (qkv
/// train --model lm): qkv generate reads it; ...") unless `language_model_ok`.
RunConfig load_model_dir_config(const std::string& dir, bool language_model_ok = false);
/// The kind config.json of `dir` names ("model_kind": "lm", else model.architecture); nullopt when
/// there is none or it cannot be read.
std::optional<ModelKind> model_dir_kind(const std::string& dir);
/// The data settings of the model folder `dir` whose config.json is `cfg`, for eval and resume:
/// cfg.data with `data_flag` (--data) as the path when non-empty; otherwise the recorded path
/// (absolute since qkv train records the canonical path; older folders may hold the path as it
/// was given, read relative to the working directory), or "" (QKV_DATA, then the default, as
/// data::locate_fra_eng). A recorded path that does not exist gives way to $QKV_DATA when set
/// (noted on stderr). Throws qkv::Error when neither exists, naming config.json, the path tried,
/// --data and QKV_DATA. `src_flag` and `tgt_flag` (--src-file/--tgt-file, both or neither) replace
/// a recorded file pair (files moved); with --data they are refused (ConfigError).
DataConfig model_data_config(const std::string& dir, const RunConfig& cfg, const std::string& data_flag,
                             const std::string& src_flag = "", const std::string& tgt_flag = "");
/// Compares the data just loaded for the model folder `dir` (eval, resume) with the fingerprint
/// its config.json `cfg` recorded at training time (translation_data.h DataFingerprint). Returns
/// true when they match, false when config.json records none (a folder of an older build: no
/// check). Throws qkv::Error when they differ, naming the data file (d.origin), the folder and
/// what differs: "the data file 'F' is not the data the model in 'DIR' was trained on: it gives
/// 41000 pairs (after config.json's filters), DIR/config.json records 40594 (data.fingerprint)",
/// or, for the same count, that the pairs' contents or order differ (the two hashes), which would
/// give another split (training pairs in the held-out set).
bool check_data_fingerprint(const std::string& dir, const RunConfig& cfg, const TranslationData& d);

/// src_vocab.txt and tgt_vocab.txt of a model folder.
std::pair<data::Vocab, data::Vocab> load_model_dir_vocabs(const std::string& dir);

/// Loads a model folder (with its SentencePiece model(s) when config.json says subword). Throws
/// qkv::Error naming the file and the mismatch: a missing or damaged file (a missing
/// model.safetensors: "not found", with the hint to train first or check --model); config.json
/// against the files (load_model_dir_subwords); a vocabulary file's size against config.json's
/// model.*_vocab_size; a subword model's vocabulary files against its SentencePiece pieces (count,
/// then each piece); a word model's vocabulary files that list SentencePiece pieces (tokens that
/// start with U+2581, SentencePiece's word-start mark) or whose reserved tokens are not where
/// training put them ("F:2: line 2 must be '<pad>', got '<unk>'"; a D2L EN vocabulary must be sorted
/// byte-wise); model.safetensors' tensor shapes against the sizes config.json and the
/// vocabularies give (read from its header before the weights are loaded); config.json against the
/// configuration stored in model.safetensors (check_architecture: a config.json edited by hand
/// after training, e.g. model.num_heads, which changes no tensor shape, is refused naming each
/// differing key; a folder whose weights store none loads as before, with a note on stderr);
/// a model that would not fit in memory (check_model_fits_memory).
/// `language_model` (qkv generate, and qkv info on a folder model_dir_kind says is one): loads a
/// language model's folder instead: config.json, vocab.txt (its size against model.vocab_size, and
/// against the fingerprint the weights record: check_vocab_fingerprint with kLmVocabKey) and
/// model.safetensors (checkpoint.safetensors when the run has not finished), naming the folder or
/// file ("model folder 'DIR' does not exist (train one with: qkv train --model lm --out DIR)").
ModelDir load_model_dir(const std::string& dir, bool language_model = false);

}  // namespace qkv::runtime
