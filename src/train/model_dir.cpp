// Model folders: writing the run files, loading a trained model, translating token lists.
#include "qkv/train/model_dir.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "qkv/decode/greedy.h"
#include "qkv/nn/module.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/translation_data.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/progress.h"

namespace qkv::train {

namespace fs = std::filesystem;

std::pair<std::string, std::string> subword_files(const DataConfig& d) {
    if (d.subword == data::SubwordKind::none) return {"", ""};
    if (d.shared_vocab) return {"spm.model", "spm.model"};
    return {"spm_src.model", "spm_tgt.model"};
}

SubwordModels load_model_dir_subwords(const std::string& dir, const RunConfig& cfg) {
    SubwordModels s;
    const auto [fs_src, fs_tgt] = subword_files(cfg.data);
    if (fs_src.empty()) return s;
    s.src = std::make_shared<const data::SubwordModel>(data::SubwordModel::load((fs::path(dir) / fs_src).string()));
    s.tgt = fs_tgt == fs_src ? s.src
                             : std::make_shared<const data::SubwordModel>(
                                   data::SubwordModel::load((fs::path(dir) / fs_tgt).string()));
    return s;
}

void write_run_files(const std::string& dir, const RunConfig& cfg, const data::Vocab& src_vocab,
                     const data::Vocab& tgt_vocab, const SubwordModels& subwords) {
    const auto [fs_src, fs_tgt] = subword_files(cfg.data);
    QKV_CHECK(fs_src.empty() || subwords.active(), "write_run_files: config.json says subword ",
              data::subword_kind_name(cfg.data.subword), " but no SentencePiece model was given");
    fs::create_directories(dir);
    if (!fs_src.empty()) {
        subwords.src->save((fs::path(dir) / fs_src).string());
        if (fs_tgt != fs_src) subwords.tgt->save((fs::path(dir) / fs_tgt).string());
    }
    util::write_file_atomic((fs::path(dir) / "config.json").string(), to_json(cfg).dump(2) + "\n");
    src_vocab.save((fs::path(dir) / "src_vocab.txt").string());
    tgt_vocab.save((fs::path(dir) / "tgt_vocab.txt").string());
}

RunConfig load_model_dir_config(const std::string& dir) {
    QKV_CHECK(fs::is_directory(dir), "model folder '", dir,
              "' does not exist (train one with: qkv train --out ", dir, ")");
    const std::string cfg_path = (fs::path(dir) / "config.json").string();
    QKV_CHECK(fs::exists(cfg_path), "model folder '", dir, "' has no config.json");
    try {
        return run_config_from_json(nlohmann::json::parse(util::read_file(cfg_path)));
    } catch (const nlohmann::json::exception& e) {
        // "[json.exception.parse_error.101] parse error at line 3, ..." without the bracket tag
        const std::string w = e.what();
        const size_t tag = w.rfind("] ", w.find(' '));
        throw Error(detail::str("'", cfg_path, "': not valid JSON: ",
                                tag == std::string::npos ? w : w.substr(tag + 2)));
    } catch (const Error& e) {
        throw Error(detail::str("'", cfg_path, "': ", e.what()));
    }
}

DataConfig model_data_config(const std::string& dir, const RunConfig& cfg, const std::string& data_flag) {
    DataConfig d = cfg.data;
    if (!data_flag.empty()) {
        d.path = data_flag;
        return d;
    }
    std::error_code ec;
    if (d.path.empty() || fs::exists(d.path, ec)) return d;  // "": QKV_DATA, then the default
    const std::string cfg_file = (fs::path(dir) / "config.json").string();
    if (fs::path(d.path).is_relative())
        throw Error(detail::str("the data path '", d.path, "' in ", cfg_file,
                                " is relative to the folder qkv train ran in; not found from here (tried '",
                                fs::absolute(d.path, ec).string(),
                                "'). Run from that folder, or pass the data file with --data PATH "
                                "(it overrides config.json)"));
    throw Error(detail::str("the data path '", d.path, "' in ", cfg_file,
                            " does not exist; pass the data file with --data PATH (it overrides config.json)"));
}

std::pair<data::Vocab, data::Vocab> load_model_dir_vocabs(const std::string& dir) {
    return {data::Vocab::load((fs::path(dir) / "src_vocab.txt").string()),
            data::Vocab::load((fs::path(dir) / "tgt_vocab.txt").string())};
}

ModelDir load_model_dir(const std::string& dir) {
    ModelDir m;
    m.dir    = dir;
    m.config = load_model_dir_config(dir);
    auto v   = load_model_dir_vocabs(dir);
    m.src_vocab = std::move(v.first);
    m.tgt_vocab = std::move(v.second);
    QKV_CHECK(m.src_vocab.size() == m.config.model.src_vocab_size &&
                  m.tgt_vocab.size() == m.config.model.tgt_vocab_size,
              "model folder '", dir, "': vocabulary files have ", m.src_vocab.size(), " / ",
              m.tgt_vocab.size(), " tokens but config.json says ", m.config.model.src_vocab_size,
              " / ", m.config.model.tgt_vocab_size);
    m.subwords = load_model_dir_subwords(dir, m.config);
    if (m.subwords.active())
        QKV_CHECK(m.subwords.src->vocab() == m.src_vocab && m.subwords.tgt->vocab() == m.tgt_vocab,
                  "model folder '", dir, "': the vocabulary files do not list the SentencePiece model's pieces");
    const std::string weights = (fs::path(dir) / "model.safetensors").string();
    QKV_CHECK(fs::exists(weights), "model folder '", dir, "' has no model.safetensors ('", weights,
              "' not found): train a model first (qkv train --out ", dir,
              ") or check the folder given with --model");
    {
        nn::SkipInitGuard skip;  // load_model is strict: every parameter is overwritten
        m.model = build_model(m.config);
    }
    load_model(weights, *m.model);
    m.model->eval();
    return m;
}

std::shared_ptr<models::EncoderDecoder> build_model(const RunConfig& cfg) {
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
                           b.embed_size, ", H ", b.num_hiddens, ", ", b.num_layers, " GRU layers, dropout ",
                           b.dropout, ")");
    }
    const auto& m = cfg.model;
    return detail::str("Transformer, ", n, " parameters (C ", m.num_hiddens, ", ", m.num_blks, "+", m.num_blks,
                       " blocks, ", m.num_heads, " heads, FFN ", m.ffn_num_hiddens, ", dropout ", m.dropout, ")");
}

std::string join_tokens(const std::vector<std::string>& tokens) {
    std::string s;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (i) s += ' ';
        s += tokens[i];
    }
    return s;
}

std::vector<std::vector<std::string>> source_units(const ModelDir& m,
                                                   const std::vector<std::vector<std::string>>& words) {
    return m.subwords.active() ? m.subwords.src->encode(words) : words;
}

std::vector<std::string> target_words(const ModelDir& m, const std::vector<std::string>& units) {
    return m.subwords.active() ? m.subwords.tgt->decode(units) : units;
}

std::vector<std::vector<std::string>> translate_tokens(ModelDir& m,
                                                       const std::vector<std::vector<std::string>>& src,
                                                       const TranslateOptions& opt) {
    QKV_CHECK(opt.batch_size >= 1, "translate: batch size must be >= 1");
    QKV_CHECK(opt.beam >= 1, "translate: beam must be >= 1, got ", opt.beam);
    const int64_t n = int64_t(src.size());
    std::vector<std::vector<std::string>> out;
    m.model->eval();
    std::unique_ptr<util::ProgressBar> bar;
    if (opt.progress) bar = std::make_unique<util::ProgressBar>(n, "decode");
    // Batches of sources of similar length (a stable sort by unit count): the rows of a batch
    // then tend to finish together, so decoding keeps full GEMMs for longer and the cached
    // greedy path drops fewer stragglers one by one. Each row's result does not depend on its
    // batch-mates (padding is masked); outputs go back to the input order.
    const data::Sentences units = source_units(m, src);
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return units[size_t(a)].size() < units[size_t(b)].size();
    });
    out.resize(size_t(n));
    for (int64_t start = 0; start < n; start += opt.batch_size) {
        const int64_t end = std::min(n, start + opt.batch_size);
        data::Sentences chunk;
        chunk.reserve(size_t(end - start));
        for (int64_t i = start; i < end; ++i) chunk.push_back(units[size_t(order[size_t(i)])]);
        data::SeqArray a = encode_sources(chunk, m.src_vocab, m.config.data.num_steps);
        const Tensor s  = from_vector(a.ids, {a.rows, a.num_steps});
        const Tensor vl = from_vector(a.valid_len, {a.rows});
        std::vector<std::vector<int64_t>> ids;
        if (opt.beam == 1) {
            decode::GreedyOptions g;
            g.bos     = m.tgt_vocab.bos();
            g.eos     = m.tgt_vocab.eos();
            g.max_len = opt.max_len;
            if (opt.no_unk) g.banned = {m.tgt_vocab.unk()};
            ids = decode::greedy_decode(*m.model, s, vl, g);
        } else {
            decode::BeamOptions b;
            b.beam_size      = opt.beam;
            b.bos            = m.tgt_vocab.bos();
            b.eos            = m.tgt_vocab.eos();
            b.max_len        = opt.max_len;
            b.length_penalty = opt.length_penalty;
            if (opt.no_unk) b.banned = {m.tgt_vocab.unk()};
            ids = decode::beam_decode(*m.model, s, vl, b);
        }
        for (size_t r = 0; r < ids.size(); ++r)
            out[size_t(order[size_t(start) + r])] = target_words(m, m.tgt_vocab.decode(ids[r]));
        if (bar) bar->update(end - start);
    }
    return out;
}

}  // namespace qkv::train
