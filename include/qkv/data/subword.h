#pragma once
// Subword vocabularies through SentencePiece (Kudo & Richardson 2018; Debian libsentencepiece,
// 0.1.97): BPE (Sennrich et al. 2016) or unigram-LM pieces learned in-process from D2L-tokenised
// text, and the word <-> piece conversions the translation pipeline needs. Words are D2L tokens
// (data/tokenizer.h: preprocess_nmt + split on ' '); a sentence's text for SentencePiece is its
// words joined by single spaces, so decoding pieces gives back exactly those words.
//
// Piece ids equal qkv Vocab ids: the model reserves <unk> 0, <pad> 1, <bos> 2, <eos> 3 (the order
// of the anchor pipeline's word vocabularies), then its pieces; vocab() lists them in id order.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/data/vocab.h"

namespace qkv::data {

/// Which subword algorithm (`qkv train --subword`; config.json "data.subword").
enum class SubwordKind {
    none,     // whole D2L words (the protocol's tokens)
    bpe,      // byte-pair encoding merges
    unigram,  // unigram language model pieces
};
/// "none" / "bpe" / "unigram".
const char* subword_kind_name(SubwordKind k);
/// Inverse of subword_kind_name; throws qkv::Error naming the accepted names.
SubwordKind parse_subword_kind(const std::string& s);

struct SubwordOptions {
    SubwordKind kind = SubwordKind::bpe;  // bpe or unigram (none is refused by train)
    int64_t vocab_size = 8000;            // pieces including the 4 reserved tokens
    uint64_t seed = 0;                    // SentencePiece's random generator (unigram sampling)
    /// false: vocab_size is an upper bound (SentencePiece's hard_vocab_limit=false), so a corpus
    /// too small for it gets fewer pieces instead of an error.
    bool hard_vocab_limit = true;
    /// Raw text (the real-text pipeline, issue 45): SentencePiece normalizes with nmt_nfkc
    /// (data/text.h normalize_nmt_nfkc), keeps the characters that cover 99.99 % of the text as
    /// pieces and spells the rest as UTF-8 byte pieces <0x00>..<0xFF> (byte_fallback), so no
    /// input character becomes <unk>. false: D2L words, identity normalization, every character
    /// a piece (character_coverage 1), no byte pieces.
    bool raw_text = false;
};

/// A trained SentencePiece model. Copies share the (immutable) model. Not thread-safe to
/// construct; encode/decode are const.
class SubwordModel {
public:
    /// Trains on `lines` (one sentence per line, words separated by single spaces: join_tokens of
    /// tokenize_nmt output), deterministically: one thread, no input shuffling or sampling, every
    /// character kept (character_coverage 1), identity normalisation (the text is already D2L-
    /// normalised), fixed random seed. Throws qkv::Error with SentencePiece's message when the
    /// kind is none, vocab_size < 5, there are no lines, or SentencePiece refuses (e.g. a
    /// vocabulary smaller than the characters plus the 4 reserved tokens, or larger than the
    /// pieces the text allows, "Please set it to a value <= N").
    static SubwordModel train(const std::vector<std::string>& lines, const SubwordOptions& opt);
    /// From the bytes of a .model file (a serialized ModelProto). Throws qkv::Error when they are
    /// not a whole SentencePiece model (SentencePiece refuses them, or they end early: a file cut
    /// between two fields parses, with fewer pieces and without the trainer/normalizer specs that
    /// follow the pieces, and is refused too) or its reserved ids are not <unk> 0, <pad> 1,
    /// <bos> 2, <eos> 3.
    static SubwordModel from_bytes(std::string bytes);
    /// Reads a .model file (spm_train's format, loadable by sentencepiece.SentencePieceProcessor).
    /// Throws qkv::Error: "PATH does not exist"; "PATH is corrupt or truncated (SentencePiece:
    /// <its message>)" or "(the file ends after N pieces, ...)" for what from_bytes refuses as not
    /// whole; "PATH is not a SentencePiece model qkv can use (...)" for wrong reserved pieces.
    static SubwordModel load(const std::string& path);
    /// Writes the .model file atomically; throws qkv::Error on I/O errors.
    void save(const std::string& path) const;

    /// The serialized model (the .model file's bytes).
    const std::string& bytes() const;
    /// Number of pieces (= vocab().size()).
    int64_t size() const;
    /// The pieces in id order as a qkv Vocab (<unk> <pad> <bos> <eos> first), so Vocab ids are
    /// piece ids.
    Vocab vocab() const;

    /// Pieces of one sentence given as words: "je suis chez moi ." -> e.g. {"▁je", "▁suis",
    /// "▁chez", "▁moi", "▁."}. A character the model never saw becomes "<unk>".
    std::vector<std::string> encode(const std::vector<std::string>& words) const;
    /// encode() for each sentence.
    std::vector<std::vector<std::string>> encode(const std::vector<std::vector<std::string>>& sentences) const;
    /// Pieces of one raw sentence (a model trained with raw_text: SentencePiece normalizes it
    /// with the model's own rule first). "Elle est là." -> e.g. {"▁Elle", "▁est", "▁là", "."}.
    std::vector<std::string> encode_text(const std::string& text) const;
    /// Natural text of a piece sequence: SentencePiece's decoding ("▁" read as a space, the
    /// leading one dropped; byte pieces joined back into their characters, an incomplete UTF-8
    /// sequence of them giving U+FFFD); <unk> and unknown piece strings give "<unk>";
    /// <pad>/<bos>/<eos> give nothing.
    std::string decode_text(const std::vector<std::string>& pieces) const;
    /// Words of a piece sequence: pieces concatenated, "▁" read as a space, split on spaces.
    /// "<unk>" decodes to the word "<unk>"; <pad>/<bos>/<eos> decode to nothing. decode(encode(w))
    /// == w for words made of characters seen in training.
    std::vector<std::string> decode(const std::vector<std::string>& pieces) const;

    bool operator==(const SubwordModel& o) const { return bytes() == o.bytes(); }

private:
    struct Impl;
    std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::data
