// Model folders: writing the run files, loading a trained model, translating token lists.
#include "qkv/runtime/model_dir.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/dist/communicator.h"
#include "qkv/nn/module.h"
#include "qkv/runtime/checkpoint.h"
#include "qkv/runtime/translation_data.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/progress.h"
#include "qkv/util/shell.h"
#include "runtime/json_error.h"

namespace qkv::runtime {

namespace fs = std::filesystem;

std::pair<std::string, std::string> subword_files(const DataConfig& d) {
    if (d.subword == data::SubwordKind::none) return {"", ""};
    if (d.shared_vocab) return {"spm.model", "spm.model"};
    return {"spm_src.model", "spm_tgt.model"};
}

namespace {

/// Every SentencePiece model file name a model folder may hold (subword_files).
const char* const kSubwordFileNames[] = {"spm.model", "spm_src.model", "spm_tgt.model"};

std::string in_dir(const std::string& dir, const std::string& file) { return (fs::path(dir) / file).string(); }

/// config.json's data.subword against the SentencePiece files present: a word model must hold
/// none (a left-over spm.model means the folder mixes two runs, or config.json was edited), a
/// subword model the file(s) subword_files names.
void check_subword_files_present(const std::string& dir, const RunConfig& cfg) {
    std::error_code ec;
    std::vector<std::string> present;
    for (const char* f : kSubwordFileNames)
        if (fs::exists(in_dir(dir, f), ec)) present.push_back(f);
    std::string listed;
    for (const auto& f : present) listed += (listed.empty() ? "" : ", ") + in_dir(dir, f);
    const std::string cfg_file = in_dir(dir, "config.json");
    const auto& d = cfg.data;
    if (d.subword == data::SubwordKind::none) {
        QKV_CHECK(present.empty(), cfg_file, " says data.subword \"none\" (a word model), but the folder holds ",
                  listed, " (a subword model's SentencePiece file). Delete ", present.size() == 1 ? "it" : "them",
                  " if left over from an earlier run; if the model was trained with subwords, config.json's "
                  "data.subword is wrong");
        return;
    }
    const auto [f_src, f_tgt] = subword_files(d);
    for (const std::string& f : {f_src, f_tgt}) {
        if (fs::exists(in_dir(dir, f), ec)) continue;
        throw Error(detail::str(cfg_file, " says data.subword \"", data::subword_kind_name(d.subword), "\" with ",
                                d.shared_vocab ? "one shared vocabulary (data.shared_vocab true)"
                                               : "a vocabulary per language (data.shared_vocab false)",
                                ", but ", in_dir(dir, f), " is missing",
                                present.empty() ? std::string(" (the folder holds no SentencePiece model)")
                                                : " (the folder holds " + listed + ": is data.shared_vocab right?)"));
    }
}

}  // namespace

SubwordModels load_model_dir_subwords(const std::string& dir, const RunConfig& cfg) {
    check_subword_files_present(dir, cfg);
    SubwordModels s;
    const auto [fs_src, fs_tgt] = subword_files(cfg.data);
    if (fs_src.empty()) return s;
    // SubwordModel::load: "DIR/spm.model is corrupt or truncated (SentencePiece: ...)"
    s.src = std::make_shared<const data::SubwordModel>(data::SubwordModel::load(in_dir(dir, fs_src)));
    s.tgt = fs_tgt == fs_src ? s.src
                             : std::make_shared<const data::SubwordModel>(data::SubwordModel::load(in_dir(dir, fs_tgt)));
    return s;
}

void write_run_files(const std::string& dir, const RunConfig& cfg, const data::Vocab& src_vocab,
                     const data::Vocab& tgt_vocab, const SubwordModels& subwords) {
    const auto [fs_src, fs_tgt] = subword_files(cfg.data);
    QKV_CHECK(fs_src.empty() || subwords.active(), "write_run_files: config.json says subword ",
              data::subword_kind_name(cfg.data.subword), " but no SentencePiece model was given");
    fs::create_directories(dir);
    // Temporaries of these files' writes cut short by a kill of an earlier run (the files are
    // whole: old or new); the trainer removes those of the checkpoint, model, metrics and plot.
    for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt", "spm.model", "spm_src.model", "spm_tgt.model"})
        util::remove_stale_temp_files(in_dir(dir, f));
    // A SentencePiece file this run does not use is left from an earlier run of another kind
    // (the loader would refuse the folder, load_model_dir_subwords): remove it.
    for (const char* f : kSubwordFileNames)
        if (f != fs_src && f != fs_tgt) fs::remove(in_dir(dir, f));
    if (!fs_src.empty()) {
        subwords.src->save((fs::path(dir) / fs_src).string());
        if (fs_tgt != fs_src) subwords.tgt->save((fs::path(dir) / fs_tgt).string());
    }
    util::write_file_atomic((fs::path(dir) / "config.json").string(), to_json(cfg).dump(2) + "\n");
    src_vocab.save((fs::path(dir) / "src_vocab.txt").string());
    tgt_vocab.save((fs::path(dir) / "tgt_vocab.txt").string());
}

std::optional<ModelKind> model_dir_kind(const std::string& dir) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / "config.json";
    if (!fs::is_regular_file(p, ec)) return std::nullopt;
    try {
        const auto j = nlohmann::json::parse(util::read_file(p.string()));
        if (!j.is_object()) return std::nullopt;
        if (j.contains("model_kind")) return j["model_kind"] == "lm" ? std::optional(ModelKind::lm) : std::nullopt;
        if (j.contains("model") && j["model"].is_object() && j["model"].contains("architecture"))
            return parse_model_kind(j["model"]["architecture"].get<std::string>());
        return ModelKind::transformer;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

RunConfig load_model_dir_config(const std::string& dir, bool language_model_ok) {
    std::error_code ec;
    QKV_CHECK(fs::is_directory(dir, ec) || !fs::exists(dir, ec), "'", dir,
              "' is a file, not a model folder (a folder written by qkv train --out)");
    QKV_CHECK(fs::is_directory(dir, ec), missing_model_folder_message(dir));
    const std::string cfg_path = (fs::path(dir) / "config.json").string();
    QKV_CHECK(fs::exists(cfg_path), "model folder '", dir, "' has no config.json", replaced_run_note(dir));
    try {
        const auto j = detail::parse_json_unique_keys<nlohmann::json>(util::read_file(cfg_path));
        if (!language_model_ok && j.is_object() && j.contains("model_kind") && j["model_kind"] == "lm")
            throw Error(detail::str("'", dir, "' holds a language model (qkv train --model lm): qkv generate reads it; "
                                    "translate, eval, serve, heatmap and average read translation models"));
        return run_config_from_json(j);
    } catch (const nlohmann::json::exception& e) {
        throw Error(detail::str("'", cfg_path, "': not valid JSON: ", detail::json_error_text(e)));
    } catch (const Error& e) {
        if (std::string(e.what()).find("holds a language model") != std::string::npos) throw;
        throw Error(detail::str("'", cfg_path, "': ", e.what()));
    }
}

DataConfig model_data_config(const std::string& dir, const RunConfig& cfg, const std::string& data_flag,
                             const std::string& src_flag, const std::string& tgt_flag) {
    DataConfig d = cfg.data;
    if (src_flag.empty() != tgt_flag.empty())
        throw ConfigError("--src-file and --tgt-file go together: give both (line i of one translates line i of the other)");
    if (!src_flag.empty()) {
        if (!data_flag.empty())
            throw ConfigError("--data and --src-file/--tgt-file both name the training data: give one of them");
        d.path.clear();
        d.src_file = src_flag, d.tgt_file = tgt_flag;
        return d;  // the fingerprint check after loading guards the choice
    }
    if (!data_flag.empty()) {
        d.path = data_flag;
        d.src_file.clear(), d.tgt_file.clear();
        return d;
    }
    std::error_code ec;
    if (!d.src_file.empty()) {  // a file pair: no fallback (QKV_DATA names one file)
        for (const std::string* f : {&d.src_file, &d.tgt_file})
            QKV_CHECK(fs::exists(*f, ec), "the data file '", *f, "' in ", (fs::path(dir) / "config.json").string(),
                      " does not exist; pass the moved files with --src-file PATH --tgt-file PATH (or a TSV file with --data PATH)");
        return d;
    }
    if (d.path.empty() || fs::exists(d.path, ec)) return d;  // "": QKV_DATA, then the default
    const std::string cfg_file = (fs::path(dir) / "config.json").string();
    // The recorded file is not here (another machine or folder): $QKV_DATA names the data file
    // as it does for qkv train; the vocabulary check after loading still guards the choice.
    if (const char* env = std::getenv("QKV_DATA"); env != nullptr && *env != '\0') {
        std::fprintf(stderr, "data: '%s' (recorded in %s) not found; using $QKV_DATA '%s'\n", d.path.c_str(),
                     cfg_file.c_str(), env);
        d.path = env;
        return d;
    }
    if (fs::path(d.path).is_relative())
        throw Error(detail::str("the data path '", d.path, "' in ", cfg_file,
                                " is relative to the folder qkv train ran in; not found from here (tried '",
                                fs::absolute(d.path, ec).string(),
                                "'). Run from that folder, or pass the data file with --data PATH or $QKV_DATA "
                                "(--data replaces the recorded path; $QKV_DATA is used only when the recorded file "
                                "is missing)"));
    throw Error(detail::str("the data path '", d.path, "' in ", cfg_file,
                            " does not exist; pass the data file with --data PATH or $QKV_DATA (--data replaces the "
                            "recorded path; $QKV_DATA is used only when the recorded file is missing)"));
}

bool check_data_fingerprint(const std::string& dir, const RunConfig& cfg, const TranslationData& d) {
    const DataFingerprint& want = cfg.data.fingerprint;
    if (!want.known()) return false;
    const DataFingerprint& got = d.fingerprint;
    if (got == want) return true;
    const std::string cfg_file = in_dir(dir, "config.json");
    const std::string head = detail::str("the data file '", d.origin, "' is not the data the model in '", dir,
                                         "' was trained on: ");
    const std::string tail =
        "; pass the training data with --data or --src-file/--tgt-file (or train a new model on this file)";
    if (got.pairs != want.pairs)
        throw Error(detail::str(head, "it gives ", got.pairs, " pairs (after the filters in config.json), ",
                                cfg_file, " records ", want.pairs, " (data.fingerprint)", tail));
    throw Error(detail::str(head, "it gives the same number of pairs (", got.pairs,
                            ") but their contents or order differ (FNV-1a 64 hash ", fingerprint_hex(got.fnv1a64),
                            ", ", cfg_file, " records ", fingerprint_hex(want.fnv1a64),
                            "), so its split would put training pairs in the held-out set", tail));
}

std::pair<data::Vocab, data::Vocab> load_model_dir_vocabs(const std::string& dir) {
    return {data::Vocab::load((fs::path(dir) / "src_vocab.txt").string()),
            data::Vocab::load((fs::path(dir) / "tgt_vocab.txt").string())};
}

namespace {

constexpr const char* kPieceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's word-start mark

/// A word vocabulary's reserved tokens at the indices training gave them (the embeddings and the
/// output layer were trained with those ids; a moved "<unk>" would turn unknown words into padding):
/// the anchor and ZH pipelines put <unk> <pad> <bos> <eos> on lines 1 to 4 (data::Vocab::build,
/// frequency order); D2L EN's vocabulary is sorted byte-wise, which fixes where its reserved tokens
/// are. Throws naming the file and line.
void check_reserved_tokens(const std::string& dir, const char* file, const data::Vocab& v, bool d2l_en) {
    const std::string path = in_dir(dir, file);
    if (!d2l_en) {
        const char* reserved[] = {data::Vocab::kUnk, data::Vocab::kPad, data::Vocab::kBos, data::Vocab::kEos};
        for (int64_t i = 0; i < 4; ++i) {
            const std::string got = i < v.size() ? v.idx_to_token(i) : std::string("(end of file)");
            QKV_CHECK(got == reserved[i], path, ":", i + 1, ": line ", i + 1, " must be '", reserved[i], "', got '", got,
                      "' (the reserved tokens <unk> <pad> <bos> <eos> come first, in that order: the model was "
                      "trained with those ids)");
        }
        return;
    }
    for (int64_t i = 1; i < v.size(); ++i)
        QKV_CHECK(v.idx_to_token(i - 1) < v.idx_to_token(i), path, ":", i + 1, ": '", v.idx_to_token(i),
                  "' comes after '", v.idx_to_token(i - 1), "' on line ", i,
                  ": a D2L EN vocabulary is sorted byte-wise, and the model was trained with the ids of that order");
}

/// A word vocabulary (config.json data.subword "none") that lists SentencePiece pieces: some of
/// its tokens start with U+2581, SentencePiece's word-start mark, which D2L words (Tatoeba text)
/// do not contain. (A small piece vocabulary is mostly single characters, so "most tokens" would
/// miss it.)
void check_not_pieces(const std::string& dir, const char* file, const data::Vocab& v) {
    int64_t marked = 0;
    for (int64_t i = 0; i < v.size(); ++i) marked += v.idx_to_token(i).rfind(kPieceMark, 0) == 0;
    QKV_CHECK(marked == 0, in_dir(dir, file), " lists SentencePiece pieces (", marked, " of its ", v.size(),
              " tokens start with U+2581, the word-start mark), but ", in_dir(dir, "config.json"),
              " says data.subword \"none\" (a word model): the folder mixes files of two runs, or config.json "
              "was edited");
}

/// A vocabulary file against the SentencePiece model it must list (same pieces, same order).
void check_lists_pieces(const std::string& dir, const char* file, const std::string& spm_file,
                        const data::Vocab& v, const data::SubwordModel& spm) {
    const data::Vocab pieces = spm.vocab();
    QKV_CHECK(v.size() == pieces.size(), in_dir(dir, file), " has ", v.size(), " tokens, but ", in_dir(dir, spm_file),
              " has ", pieces.size(), " pieces (the vocabulary must list the SentencePiece model's pieces)");
    for (int64_t i = 0; i < v.size(); ++i)
        QKV_CHECK(v.idx_to_token(i) == pieces.idx_to_token(i), in_dir(dir, file), ": token ", i, " is '",
                  v.idx_to_token(i), "', but piece ", i, " of ", in_dir(dir, spm_file), " is '",
                  pieces.idx_to_token(i), "' (the vocabulary must list the SentencePiece model's pieces)");
}

}  // namespace

void check_vocabs_list_pieces(const std::string& dir, const RunConfig& cfg, const data::Vocab& src_vocab,
                              const data::Vocab& tgt_vocab, const SubwordModels& subwords) {
    if (!subwords.active()) return;
    const auto [f_src, f_tgt] = subword_files(cfg.data);
    check_lists_pieces(dir, "src_vocab.txt", f_src, src_vocab, *subwords.src);
    check_lists_pieces(dir, "tgt_vocab.txt", f_tgt, tgt_vocab, *subwords.tgt);
}

namespace {

/// The tensor shapes of a safetensors file from its header alone; empty when the header cannot
/// be read (load_model then reports the damage).
std::map<std::string, Shape> safetensors_shapes(const std::string& path) {
    std::map<std::string, Shape> out;
    std::ifstream f(path, std::ios::binary);
    unsigned char len_bytes[8];
    if (!f.read(reinterpret_cast<char*>(len_bytes), 8)) return out;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec || n > size - 8 || n > (uint64_t(1) << 30)) return out;
    std::string header(size_t(n), '\0');
    if (!f.read(header.data(), std::streamsize(n))) return out;
    const auto j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return out;
    for (const auto& [name, e] : j.items()) {
        if (name == "__metadata__" || !e.is_object() || !e.contains("shape") || !e["shape"].is_array()) continue;
        Shape sh;
        for (const auto& d : e["shape"])
            if (d.is_number_integer()) sh.push_back(d.get<int64_t>());
        out[name] = sh;
    }
    return out;
}

}  // namespace

namespace {

/// load_model_dir's language-model folder.
ModelDir load_language_model_dir(const std::string& dir) {
    std::error_code ec;
    QKV_CHECK(!fs::is_regular_file(dir, ec), "'", dir, "' is a file; --model takes the model folder (",
              fs::path(dir).has_parent_path() ? "'" + fs::path(dir).parent_path().string() + "'?" : "the folder it is in?",
              ")");
    QKV_CHECK(fs::is_directory(dir, ec), "model folder '", dir, "' does not exist (train one with: qkv train --model lm --out ",
              dir, ")");
    const std::string cfg_path = in_dir(dir, "config.json");
    QKV_CHECK(fs::exists(cfg_path, ec), "'", cfg_path, "' not found: not a model folder");
    ModelDir m;
    m.dir = dir;
    m.config = load_model_dir_config(dir, /*language_model_ok=*/true);
    QKV_CHECK(m.config.architecture == ModelKind::lm, "'", cfg_path, "' is not a language model's config.json (no "
              "\"model_kind\": \"lm\")");
    m.tgt_vocab = data::Vocab::load(in_dir(dir, "vocab.txt"));
    QKV_CHECK(m.tgt_vocab.size() == m.config.lm.vocab_size, "'", dir, "/vocab.txt' has ", m.tgt_vocab.size(),
              " tokens but config.json says vocab_size ", m.config.lm.vocab_size);
    m.lm = std::make_shared<models::TransformerLM>(m.config.lm);
    std::string model_file = in_dir(dir, "model.safetensors");
    if (!fs::exists(model_file, ec)) model_file = in_dir(dir, "checkpoint.safetensors");
    QKV_CHECK(fs::exists(model_file, ec), "'", dir, "' holds no model.safetensors or checkpoint.safetensors (train first)");
    // The vocabulary against the one the weights were trained with (an edited or reordered line
    // would map ids to other characters without an error).
    check_vocab_fingerprint(read_checkpoint_metadata(model_file, "model file"), kLmVocabKey, m.tgt_vocab,
                            in_dir(dir, "vocab.txt"), model_file);
    if (model_file.ends_with("checkpoint.safetensors")) load_checkpoint(model_file, *m.lm, nullptr);
    else load_model(model_file, *m.lm);
    m.lm->eval();
    return m;
}

}  // namespace

ModelDir load_model_dir(const std::string& dir, bool language_model) {
    if (language_model) return load_language_model_dir(dir);
    ModelDir m;
    m.dir    = dir;
    m.config = load_model_dir_config(dir);
    const std::string cfg_file = in_dir(dir, "config.json");
    auto v   = load_model_dir_vocabs(dir);
    m.src_vocab = std::move(v.first);
    m.tgt_vocab = std::move(v.second);
    const auto& mc = m.config.model;
    QKV_CHECK(m.src_vocab.size() == mc.src_vocab_size, in_dir(dir, "src_vocab.txt"), " has ", m.src_vocab.size(),
              " tokens, but ", cfg_file, " says model.src_vocab_size ", mc.src_vocab_size);
    QKV_CHECK(m.tgt_vocab.size() == mc.tgt_vocab_size, in_dir(dir, "tgt_vocab.txt"), " has ", m.tgt_vocab.size(),
              " tokens, but ", cfg_file, " says model.tgt_vocab_size ", mc.tgt_vocab_size);
    m.subwords = load_model_dir_subwords(dir, m.config);  // config.json against the spm files present
    check_vocabs_list_pieces(dir, m.config, m.src_vocab, m.tgt_vocab, m.subwords);
    if (!m.subwords.active()) {
        check_not_pieces(dir, "src_vocab.txt", m.src_vocab);
        check_not_pieces(dir, "tgt_vocab.txt", m.tgt_vocab);
        const bool d2l_en = m.config.data.pipeline == DataPipeline::d2l_en;
        check_reserved_tokens(dir, "src_vocab.txt", m.src_vocab, d2l_en);
        check_reserved_tokens(dir, "tgt_vocab.txt", m.tgt_vocab, d2l_en);
    }
    const std::string weights = in_dir(dir, "model.safetensors");
    QKV_CHECK(fs::exists(weights), "model folder '", dir, "' has no model.safetensors ('", weights,
              "' not found): train a model first (qkv train --out ", dir,
              ") or check the folder given with --model", replaced_run_note(dir));
    {
        nn::SkipInitGuard skip;  // load_model is strict: every parameter is overwritten
        m.model = build_model(m.config, 1);
    }
    // The weights' shapes against the sizes config.json and the vocabularies give (a file from
    // another run would otherwise fail with a bare shape, or load and translate garbage).
    const auto shapes = safetensors_shapes(weights);
    if (!shapes.empty())
        for (const auto& [name, t] : m.model->named_parameters()) {
            auto it = shapes.find(name);
            if (it == shapes.end() || it->second == t.shape()) continue;
            throw Error(detail::str(weights, " does not fit ", cfg_file, " and the vocabularies: tensor '", name,
                                    "' is ", shape_str(it->second), " in the file, but ", shape_str(t.shape()),
                                    " for this folder (src_vocab.txt ", m.src_vocab.size(), " tokens, tgt_vocab.txt ",
                                    m.tgt_vocab.size(), " tokens, model.num_hiddens ", mc.num_hiddens,
                                    "); were the files copied from different runs?"));
        }
    // config.json against the configuration stored with the weights (after the shapes, whose
    // message says more when files come from different runs): an edit that changes no tensor
    // shape (model.num_heads, pe_position_zero_at_inference, data.num_steps) would load and
    // translate differently without a word.
    const auto meta         = read_checkpoint_metadata(weights, "model file");
    const Consistency arch = check_architecture(weights, meta, m.config);
    if (arch.state == Consistency::State::inconsistent) {
        std::string diffs;
        for (const auto& d : arch.differences) diffs += (diffs.empty() ? "" : "; ") + d;
        throw Error(detail::str(cfg_file, " does not match the configuration stored in ", weights,
                                " when it was trained (config.json vs model.safetensors): ", diffs,
                                "; was config.json edited after training? Restore the trained values"));
    }
    if (arch.state == Consistency::State::no_record)
        std::fprintf(stderr, "note: %s stores no training configuration (a folder of an older qkv): config.json "
                             "is not checked against it\n", weights.c_str());
    // The vocabularies against those the weights were trained with: an edited or damaged line
    // still loads, but maps ids to other words (garbage translations, no error).
    check_vocab_fingerprints(meta, dir, m.src_vocab, m.tgt_vocab, weights);
    load_model(weights, *m.model);
    m.model->eval();
    return m;
}

std::shared_ptr<models::EncoderDecoder> build_model(const RunConfig& cfg, int copies) {
    check_model_fits_memory(cfg, copies, "this configuration");
    if (cfg.architecture == ModelKind::bahdanau) {
        models::BahdanauConfig b = cfg.bahdanau;
        b.src_vocab_size = cfg.model.src_vocab_size;
        b.tgt_vocab_size = cfg.model.tgt_vocab_size;
        return std::make_shared<models::Bahdanau>(b);
    }
    return std::make_shared<models::Transformer>(cfg.model);
}

std::string describe_model(const RunConfig& cfg, const models::EncoderDecoder& model) {
    const auto n = (long long)model.num_parameters();
    if (cfg.architecture == ModelKind::bahdanau) {
        const auto& b = cfg.bahdanau;
        return detail::str("Bahdanau (GRU encoder-decoder with additive attention), ", n, " parameters (E ",
                           b.embed_size, ", H ", b.num_hiddens, ", ", b.num_layers,
                           b.num_layers == 1 ? " GRU layer, " : " GRU layers, ",
                           b.bidirectional ? "bidirectional encoder, " : "", "dropout ", b.dropout, ")");
    }
    const auto& m = cfg.model;
    return detail::str("Transformer, ", n, " parameters (C ", m.num_hiddens, ", ", m.num_blks, "+", m.num_blks,
                       " blocks, ", m.num_heads, " heads, FFN ", m.ffn_num_hiddens, ", dropout ", m.dropout, ")");
}

}  // namespace qkv::runtime

// ---- sizes and integrity --------------------------------------------------------------------------

namespace qkv::runtime {

namespace {

/// One GRU stack: L layers of D directions, hidden H per direction, layer 0 reading I features.
double gru_parameters(double I, double H, double L, double D) {
    double n = 0;
    for (int64_t l = 0; l < int64_t(L); ++l) n += D * 3 * H * ((l == 0 ? I : D * H) + H + 2);
    return n;
}

double physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? double(pages) * double(page) : 0;
}

std::string gib(double bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f GiB", bytes / double(1 << 30));
    return b;
}

}  // namespace

std::string missing_model_folder_message(const std::string& dir) {
    // Where it looked (a relative folder is read from the current one) and how to make a model.
    std::error_code ec;
    const std::string looked = fs::path(dir).is_absolute() ? dir : (fs::current_path(ec) / dir).string();
    return detail::str("no model folder '", dir, "' (looked in ", looked, "): train one with: qkv train --out ",
                       util::shell_quote(dir), " (make demo trains one into runs/qkv, the folder qkv translate, eval, "
                       "serve, heatmap and info read when --model is not given)");
}

std::string replaced_run_note(const std::string& dir) {
    const fs::path aside = fs::path(dir) / ".qkv-replaced";
    std::error_code ec;
    if (!fs::is_directory(aside, ec)) return "";
    auto quote = [](const std::string& s) {  // POSIX shell single quotes
        std::string q = "'";
        for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return q + "'";
    };
    if (fs::exists(fs::path(dir) / "checkpoint.safetensors", ec))
        return detail::str("; '", aside.string(), "' holds the files of the run a qkv train --overwrite replaced, which "
                           "it was removing after its own first checkpoint when it was killed: qkv train --resume --out ",
                           quote(dir), " continues the new run (then remove '", aside.string(), "')");
    std::string files;
    for (const char* f : kModelDirFiles) files += std::string(" ") + f;
    return detail::str("; the earlier model waits in '", aside.string(), "': a qkv train --overwrite was killed before "
                       "its first checkpoint (or is still running). Once it is not running, put the earlier model "
                       "back with: cd ", quote(dir), " && rm -f", files, " && mv .qkv-replaced/* . && rmdir .qkv-replaced");
}

double estimate_parameters(const RunConfig& cfg) {
    const double Vs = double(cfg.model.src_vocab_size), Vt = double(cfg.model.tgt_vocab_size);
    if (cfg.architecture == ModelKind::bahdanau) {
        const auto& b = cfg.bahdanau;
        const double E = double(b.embed_size), H = double(b.num_hiddens), L = double(b.num_layers);
        const double enc = Vs * E + (b.bidirectional ? gru_parameters(E, H / 2, L, 2) : gru_parameters(E, H, L, 1));
        const double dec = Vt * E + gru_parameters(E + H, H, L, 1) + 2 * H * H + H + H * Vt + Vt;
        return enc + dec;
    }
    const auto& m = cfg.model;
    const double C = double(m.num_hiddens), F = double(m.ffn_num_hiddens), N = double(m.num_blks);
    const double ffn = 2 * C * F + F + C;
    const double enc_blk = 4 * C * C + 4 * C + ffn, dec_blk = 8 * C * C + 6 * C + ffn;
    const double tables = m.tie_weights ? Vt * C : C * (Vs + Vt) + C * Vt;
    return N * (enc_blk + dec_blk) + tables + Vt;
}

double estimate_model_bytes(const RunConfig& cfg, int copies) {
    double bytes = 4.0 * estimate_parameters(cfg) * copies;
    if (cfg.architecture == ModelKind::transformer)
        bytes += 4.0 * double(cfg.model.max_len) * double(cfg.model.num_hiddens) * 2;  // encoder + decoder PE
    return bytes;
}

void check_model_fits_memory(const RunConfig& cfg, int copies, const std::string& what) {
    const double need = estimate_model_bytes(cfg, copies), have = physical_memory_bytes();
    if (have <= 0 || need <= have) return;
    char params[32];
    std::snprintf(params, sizeof params, "%.3g", estimate_parameters(cfg));
    throw Error(detail::str(
        "the model of ", what, " would need about ", gib(need), " (", params, " parameters × 4 bytes",
        copies == 1 ? "" : detail::str(" × ", copies, " copies: weights, gradients and Adam's two moments"),
        ", activations not counted), more than this machine's ", gib(have),
        " of memory; use smaller sizes (model.num_hiddens ", cfg.model.num_hiddens, ", ffn_num_hiddens ",
        cfg.model.ffn_num_hiddens, ", num_blks ", cfg.model.num_blks, ", vocabularies ", cfg.model.src_vocab_size,
        " + ", cfg.model.tgt_vocab_size, ")"));
}

nlohmann::json architecture_json(const RunConfig& cfg) {
    const nlohmann::json full = to_json(cfg);
    nlohmann::json a;
    a["model"] = full.at("model");
    a["model"].erase("dropout");  // training only: the same weights compute the same function
    for (const char* k : {"num_steps", "subword", "shared_vocab", "pipeline"})
        if (full.at("data").contains(k)) a["data"][k] = full.at("data").at(k);
    return a;
}

std::vector<std::string> architecture_differences(const RunConfig& a, const RunConfig& b) {
    const nlohmann::json ja = architecture_json(a), jb = architecture_json(b);
    std::vector<std::string> out;
    for (const char* section : {"model", "data"}) {
        const nlohmann::json& sa = ja.contains(section) ? ja.at(section) : nlohmann::json::object();
        const nlohmann::json& sb = jb.contains(section) ? jb.at(section) : nlohmann::json::object();
        std::set<std::string> keys;
        for (auto& [k, v] : sa.items()) keys.insert(k);
        for (auto& [k, v] : sb.items()) keys.insert(k);
        for (const auto& k : keys) {
            const auto va = sa.contains(k) ? sa.at(k).dump() : "(absent)";
            const auto vb = sb.contains(k) ? sb.at(k).dump() : "(absent)";
            if (va != vb) out.push_back(detail::str(section, ".", k, ": ", va, " vs ", vb));
        }
    }
    return out;
}

std::string vocab_fingerprint(const data::Vocab& v) {
    uint64_t h = dist::fingerprint("");
    for (const auto& t : v.tokens()) h = dist::fingerprint(t + "\n", h);
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

void check_vocab_fingerprints(const std::map<std::string, std::string>& meta, const std::string& dir,
                              const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, const std::string& weights) {
    check_vocab_fingerprint(meta, kSrcVocabKey, src_vocab, in_dir(dir, "src_vocab.txt"), weights);
    check_vocab_fingerprint(meta, kTgtVocabKey, tgt_vocab, in_dir(dir, "tgt_vocab.txt"), weights);
}

void check_vocab_fingerprint(const std::map<std::string, std::string>& meta, const char* key,
                             const data::Vocab& vocab, const std::string& vocab_file, const std::string& weights) {
    const auto it = meta.find(key);
    if (it == meta.end()) return;
    const std::string now = vocab_fingerprint(vocab);
    QKV_CHECK(now == it->second, vocab_file, " is not the vocabulary ", weights,
              " was trained with (its tokens' fingerprint is ", now, ", the model records ", it->second,
              "): a line was edited, reordered or damaged, or the file comes from another run; restore the "
              "trained file");
}

Consistency check_architecture(const std::string& weights, const RunConfig& cfg) {
    return check_architecture(weights, read_checkpoint_metadata(weights, "model file"), cfg);
}

Consistency check_architecture(const std::string& weights, const std::map<std::string, std::string>& meta,
                               const RunConfig& cfg) {
    Consistency c;
    const auto it = meta.find("qkv.config");
    if (it == meta.end()) return c;
    RunConfig stored;
    try {
        stored = run_config_from_json(parse_metadata_json<nlohmann::json>(weights, "qkv.config", it->second, "model file"));
    } catch (const Error& e) {
        throw Error(detail::str("model file '", weights, "': metadata 'qkv.config': ", e.what()));
    }
    c.differences = architecture_differences(cfg, stored);
    c.state       = c.differences.empty() ? Consistency::State::consistent : Consistency::State::inconsistent;
    return c;
}

}  // namespace qkv::runtime
