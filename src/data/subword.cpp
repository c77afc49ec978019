// SentencePiece training, loading and word <-> piece conversion (data/subword.h).
#include "qkv/data/subword.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <utility>
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
    std::unordered_map<std::string, std::string> kw = {
        {"model_type", subword_kind_name(opt.kind)},
        {"vocab_size", std::to_string(opt.vocab_size)},
        {"character_coverage", opt.raw_text ? "0.9999" : "1.0"},
        {"normalization_rule_name", opt.raw_text ? "nmt_nfkc" : "identity"},
        {"byte_fallback", opt.raw_text ? "true" : "false"},
        {"unk_id", "0"}, {"pad_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
        {"unk_piece", Vocab::kUnk}, {"pad_piece", Vocab::kPad},
        {"bos_piece", Vocab::kBos}, {"eos_piece", Vocab::kEos},
        {"unk_surface", Vocab::kUnk},
        {"num_threads", "1"},
        {"shuffle_input_sentence", "false"},
        {"input_sentence_size", "0"},
        {"hard_vocab_limit", opt.hard_vocab_limit ? "true" : "false"},
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

namespace {

/// Top-level fields of a serialized ModelProto (sentencepiece_model.proto): 1 pieces, 2
/// trainer_spec, 3 normalizer_spec, ... Returns "" when the wire format is whole and the trainer
/// and normalizer specs are there (SentencePiece writes them after the pieces, so a file cut
/// between two fields still parses, with fewer pieces), else what is wrong. No protobuf headers
/// needed (Debian's libsentencepiece-dev does not ship sentencepiece_model.pb.h).
std::string model_proto_problem(const std::string& b, int64_t pieces) {
    size_t i = 0;
    auto varint = [&](uint64_t& v) {
        v = 0;
        for (int shift = 0; shift < 64 && i < b.size(); shift += 7) {
            const auto c = uint8_t(b[i++]);
            v |= uint64_t(c & 0x7f) << shift;
            if (!(c & 0x80)) return true;
        }
        return false;
    };
    bool trainer = false, normalizer = false;
    while (i < b.size()) {
        const size_t at = i;
        uint64_t tag = 0, v = 0;
        if (!varint(tag)) return detail::str("the file ends inside a field at byte ", at, " of ", b.size());
        const uint64_t field = tag >> 3;
        bool ok = true;
        switch (tag & 7) {
            case 0: ok = varint(v); break;
            case 1: ok = b.size() - i >= 8, i += 8; break;
            case 2: ok = varint(v) && v <= b.size() - i, i += size_t(v); break;
            case 5: ok = b.size() - i >= 4, i += 4; break;
            default: return detail::str("byte ", at, " is not a protobuf field");
        }
        if (!ok) return detail::str("the file ends inside a field at byte ", at, " of ", b.size());
        trainer |= field == 2;
        normalizer |= field == 3;
    }
    if (!trainer || !normalizer)
        return detail::str("the file ends after ", pieces, " pieces, without the ", !trainer ? "trainer" : "normalizer",
                           " spec that SentencePiece writes after them");
    return "";
}

/// Pieces SentencePiece cannot put in its trie: Darts reads keys as C strings and throws on an
/// empty one ("failed to insert key: zero-length key", also for a piece starting with a NUL byte)
/// from a function that cannot pass it on, so the process ends in std::terminate (found by
/// tests/fuzz/fuzz_subword). Scans the pieces (field 1,
/// each a message whose field 1 is the piece string) before SentencePiece sees them; returns what
/// is wrong, or "" (other damage is left to SentencePiece and model_proto_problem).
std::string piece_problem(const std::string& b) {
    auto varint = [&](size_t& i, size_t end, uint64_t& v) {
        v = 0;
        for (int shift = 0; shift < 64 && i < end; shift += 7) {
            const auto c = uint8_t(b[i++]);
            v |= uint64_t(c & 0x7f) << shift;
            if (!(c & 0x80)) return true;
        }
        return false;
    };
    // Skips one field's value of wire type `wt` at i (< end); false when it runs past end.
    auto skip = [&](size_t& i, size_t end, uint64_t wt) {
        uint64_t v = 0;
        switch (wt) {
            case 0: return varint(i, end, v);
            case 1: return end - i >= 8 ? (i += 8, true) : false;
            case 2: return varint(i, end, v) && v <= end - i ? (i += size_t(v), true) : false;
            case 5: return end - i >= 4 ? (i += 4, true) : false;
            default: return false;
        }
    };
    size_t i = 0;
    int64_t n = 0;
    while (i < b.size()) {
        uint64_t tag = 0, len = 0;
        if (!varint(i, b.size(), tag)) return "";
        if ((tag & 7) > 2 && (tag & 7) != 5)  // groups (3, 4) and 6, 7: protobuf may skip what we cannot
            return detail::str("a field of wire type ", tag & 7, " at byte ", i, " (SentencePiece writes none)");
        if (tag != ((1 << 3) | 2)) {
            if (!skip(i, b.size(), tag & 7)) return "";
            continue;
        }
        if (!varint(i, b.size(), len) || len > b.size() - i) return "";
        const size_t end = i + size_t(len);
        std::string piece;  // the last field 1 wins, as in protobuf
        size_t j = i;
        while (j < end) {
            uint64_t t = 0, l = 0;
            if (!varint(j, end, t)) return "";
            if ((t & 7) > 2 && (t & 7) != 5)
                return detail::str("piece ", n, " has a field of wire type ", t & 7, " (SentencePiece writes none)");
            if (t == ((1 << 3) | 2)) {
                if (!varint(j, end, l) || l > end - j) return "";
                piece.assign(b, j, size_t(l));
                j += size_t(l);
            } else if (!skip(j, end, t & 7)) {
                return "";
            }
        }
        if (piece.empty()) return detail::str("piece ", n, " is empty");
        if (piece.find('\0') != std::string::npos) return detail::str("piece ", n, " contains a NUL byte");
        ++n;
        i = end;
    }
    return "";
}

/// Loads `bytes` into `sp`, or says why not: {"", ""} when fine, else {"corrupt", reason} or
/// {"foreign", reason} (a whole model, but not a qkv one: wrong reserved pieces).
std::pair<std::string, std::string> load_problem(sentencepiece::SentencePieceProcessor& sp,
                                                 const std::string& bytes) {
    if (const std::string bad = piece_problem(bytes); !bad.empty()) return {"corrupt", bad};
    const auto st = sp.LoadFromSerializedProto(bytes);
    if (!st.ok()) {
        std::string msg = st.message();  // e.g. "./src/sentencepiece_processor.cc(232) [...] "
        while (!msg.empty() && std::isspace(static_cast<unsigned char>(msg.back()))) msg.pop_back();
        return {"corrupt", "SentencePiece: " + msg};
    }
    const std::string cut = model_proto_problem(bytes, sp.GetPieceSize());
    if (!cut.empty()) return {"corrupt", cut};
    const char* want[] = {Vocab::kUnk, Vocab::kPad, Vocab::kBos, Vocab::kEos};
    if (sp.GetPieceSize() < 4) return {"foreign", detail::str("it has only ", sp.GetPieceSize(), " pieces")};
    for (int i = 0; i < 4; ++i)
        if (sp.IdToPiece(i) != want[i])
            return {"foreign", detail::str("its piece ", i, " is '", sp.IdToPiece(i), "', expected '", want[i],
                                           "' (qkv needs <unk> <pad> <bos> <eos> as ids 0-3)")};
    return {"", ""};
}

}  // namespace

SubwordModel SubwordModel::from_bytes(std::string bytes) {
    auto impl = std::make_shared<Impl>();
    impl->bytes = std::move(bytes);
    const auto [kind, why] = load_problem(impl->sp, impl->bytes);
    QKV_CHECK(kind.empty(), "subword: ", kind == "corrupt" ? "not a (complete) SentencePiece model" : "not a qkv SentencePiece model",
              " (", why, ")");
    SubwordModel m;
    m.impl_ = std::move(impl);
    return m;
}

SubwordModel SubwordModel::load(const std::string& path) {
    QKV_CHECK(std::filesystem::exists(path), "subword model '", path, "' does not exist");
    auto impl = std::make_shared<Impl>();
    impl->bytes = util::read_file(path);
    const auto [kind, why] = load_problem(impl->sp, impl->bytes);
    QKV_CHECK(kind != "corrupt", path, " is corrupt or truncated (", why, ")");
    QKV_CHECK(kind.empty(), path, " is not a SentencePiece model qkv can use (", why, ")");
    SubwordModel m;
    m.impl_ = std::move(impl);
    return m;
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

std::vector<std::string> SubwordModel::encode_text(const std::string& text) const {
    QKV_CHECK(impl_ != nullptr, "subword: encode with an empty model");
    std::vector<int> ids;
    const auto st = impl_->sp.Encode(text, &ids);
    QKV_CHECK(st.ok(), "subword: cannot encode a sentence of ", text.size(), " bytes: ", st.message());
    std::vector<std::string> pieces;
    pieces.reserve(ids.size());
    for (int id : ids) pieces.push_back(impl_->sp.IdToPiece(id));
    return pieces;
}

std::string SubwordModel::decode_text(const std::vector<std::string>& pieces) const {
    QKV_CHECK(impl_ != nullptr, "subword: decode with an empty model");
    std::vector<int> ids;
    ids.reserve(pieces.size());
    for (const auto& p : pieces) ids.push_back(impl_->sp.PieceToId(p));
    std::string text;
    const auto st = impl_->sp.Decode(ids, &text);
    QKV_CHECK(st.ok(), "subword: cannot decode ", pieces.size(), " pieces: ", st.message());
    return text;
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
