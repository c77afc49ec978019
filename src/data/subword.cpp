// SentencePiece training, loading and word <-> piece conversion (data/subword.h).
#include "qkv/data/subword.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <unordered_map>

#include "qkv/core/error.h"
#include "qkv/data/tokenizer.h"
#include "qkv/util/atomic_file.h"

namespace qkv::data {

const char* subword_kind_name(SubwordKind k) {
    switch (k) {
        case SubwordKind::none: return "none";
        case SubwordKind::bpe: return "bpe";
        case SubwordKind::unigram: return "unigram";
    }
    return "none";
}

SubwordKind parse_subword_kind(const std::string& s) {
    if (s == "none") return SubwordKind::none;
    if (s == "bpe") return SubwordKind::bpe;
    if (s == "unigram") return SubwordKind::unigram;
    throw Error(detail::str("subword '", s, "' is not none, bpe or unigram"));
}

struct SubwordModel::Impl {
    std::string bytes;
    sentencepiece::SentencePieceProcessor sp;
};

namespace {

/// Feeds the training lines to SentencePiece without a temporary file.
class LineIterator : public sentencepiece::SentenceIterator {
public:
    explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
    bool done() const override { return i_ >= lines_.size(); }
    void Next() override { ++i_; }
    const std::string& value() const override { return lines_[i_]; }
    sentencepiece::util::Status status() const override { return {}; }

private:
    const std::vector<std::string>& lines_;
    size_t i_ = 0;
};

}  // namespace

SubwordModel SubwordModel::train(const std::vector<std::string>& lines, const SubwordOptions& opt) {
    QKV_CHECK(opt.kind != SubwordKind::none, "subword: train needs kind bpe or unigram, got none");
    QKV_CHECK(opt.vocab_size >= 5 && opt.vocab_size <= (int64_t(1) << 24),
              "subword: vocab_size must be in [5, 16777216] (4 reserved tokens + pieces), got ",
              opt.vocab_size);
    QKV_CHECK(!lines.empty(), "subword: no training sentences");
    const std::unordered_map<std::string, std::string> kw = {
        {"model_type", subword_kind_name(opt.kind)},
        {"vocab_size", std::to_string(opt.vocab_size)},
        {"character_coverage", "1.0"},
        {"normalization_rule_name", "identity"},
        {"unk_id", "0"}, {"pad_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
        {"unk_piece", Vocab::kUnk}, {"pad_piece", Vocab::kPad},
        {"bos_piece", Vocab::kBos}, {"eos_piece", Vocab::kEos},
        {"unk_surface", Vocab::kUnk},
        {"num_threads", "1"},
        {"shuffle_input_sentence", "false"},
        {"input_sentence_size", "0"},
        {"hard_vocab_limit", "true"},
        {"minloglevel", "2"},
    };
    sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(opt.seed));
    LineIterator it(lines);
    std::string proto;
    const auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &proto);
    QKV_CHECK(st.ok(), "subword: SentencePiece could not train a ", subword_kind_name(opt.kind),
              " model of vocab_size ", opt.vocab_size, " on ", lines.size(), " sentences: ",
              st.message());
    return from_bytes(std::move(proto));
}

SubwordModel SubwordModel::from_bytes(std::string bytes) {
    auto impl = std::make_shared<Impl>();
    impl->bytes = std::move(bytes);
    const auto st = impl->sp.LoadFromSerializedProto(impl->bytes);
    QKV_CHECK(st.ok(), "subword: not a SentencePiece model (", st.message(), ")");
    const char* want[] = {Vocab::kUnk, Vocab::kPad, Vocab::kBos, Vocab::kEos};
    QKV_CHECK(impl->sp.GetPieceSize() >= 4, "subword: the model has only ", impl->sp.GetPieceSize(),
              " pieces");
    for (int i = 0; i < 4; ++i)
        QKV_CHECK(impl->sp.IdToPiece(i) == want[i], "subword: the model's piece ", i, " is '",
                  impl->sp.IdToPiece(i), "', expected '", want[i],
                  "' (qkv needs <unk> <pad> <bos> <eos> as ids 0-3)");
    SubwordModel m;
    m.impl_ = std::move(impl);
    return m;
}

SubwordModel SubwordModel::load(const std::string& path) {
    QKV_CHECK(std::filesystem::exists(path), "subword model '", path, "' does not exist");
    try {
        return from_bytes(util::read_file(path));
    } catch (const Error& e) {
        throw Error(detail::str("subword model '", path, "': ", e.what()));
    }
}

void SubwordModel::save(const std::string& path) const {
    QKV_CHECK(impl_ != nullptr, "subword: save of an empty model");
    util::write_file_atomic(path, std::string_view(impl_->bytes));
}

const std::string& SubwordModel::bytes() const {
    static const std::string empty;
    return impl_ ? impl_->bytes : empty;
}

int64_t SubwordModel::size() const { return impl_ ? impl_->sp.GetPieceSize() : 0; }

Vocab SubwordModel::vocab() const {
    QKV_CHECK(impl_ != nullptr, "subword: vocab of an empty model");
    std::vector<std::string> pieces;
    pieces.reserve(size_t(size()));
    for (int i = 0; i < impl_->sp.GetPieceSize(); ++i) pieces.push_back(impl_->sp.IdToPiece(i));
    return Vocab(std::move(pieces));
}

std::vector<std::string> SubwordModel::encode(const std::vector<std::string>& words) const {
    QKV_CHECK(impl_ != nullptr, "subword: encode with an empty model");
    std::string text;
    for (size_t i = 0; i < words.size(); ++i) {
        if (i) text += ' ';
        text += words[i];
    }
    std::vector<int> ids;
    const auto st = impl_->sp.Encode(text, &ids);
    QKV_CHECK(st.ok(), "subword: cannot encode '", text, "': ", st.message());
    std::vector<std::string> pieces;
    pieces.reserve(ids.size());
    for (int id : ids) pieces.push_back(impl_->sp.IdToPiece(id));  // unknown text -> "<unk>"
    return pieces;
}

std::vector<std::vector<std::string>> SubwordModel::encode(
    const std::vector<std::vector<std::string>>& sentences) const {
    std::vector<std::vector<std::string>> out;
    out.reserve(sentences.size());
    for (const auto& s : sentences) out.push_back(encode(s));
    return out;
}

std::vector<std::string> SubwordModel::decode(const std::vector<std::string>& pieces) const {
    QKV_CHECK(impl_ != nullptr, "subword: decode with an empty model");
    std::vector<int> ids;
    ids.reserve(pieces.size());
    for (const auto& p : pieces) ids.push_back(impl_->sp.PieceToId(p));  // unknown piece -> <unk>
    std::string text;
    const auto st = impl_->sp.Decode(ids, &text);
    QKV_CHECK(st.ok(), "subword: cannot decode ", pieces.size(), " pieces: ", st.message());
    return split_tokens(text, /*drop_empty=*/true);
}

}  // namespace qkv::data
