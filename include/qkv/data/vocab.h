#pragma once
// Token <-> index vocabulary (D2L's Vocab class, both editions' orderings; d2l_spec.md §2,
// quality_anchor.md §2.1 step 5). Plain strings and int64 ids; no Tensor.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkv::data {

/// How the non-reserved tokens are ordered.
enum class VocabOrder {
    /// D2L ZH and the quality anchor: "<unk>", then `reserved`, then tokens with count >= min_freq
    /// by descending count, ties in first-occurrence order (sentences in order, tokens left to
    /// right). The default.
    frequency,
    /// D2L EN: the set {"<unk>"} ∪ reserved ∪ {tokens with count >= min_freq}, sorted by code
    /// point (byte-wise on UTF-8, as Python's sorted()).
    alphabetical,
};

struct VocabOptions {
    int64_t min_freq = 2;
    std::vector<std::string> reserved = {"<pad>", "<bos>", "<eos>"};
    VocabOrder order = VocabOrder::frequency;
};

class Vocab {
public:
    static constexpr const char* kUnk = "<unk>";
    static constexpr const char* kPad = "<pad>";
    static constexpr const char* kBos = "<bos>";
    static constexpr const char* kEos = "<eos>";

    /// Only "<unk>" (index 0).
    Vocab();
    /// From an explicit idx_to_token list (e.g. a saved vocabulary). Throws qkv::Error when a
    /// token repeats or "<unk>" is missing.
    explicit Vocab(std::vector<std::string> idx_to_token);
    /// Counts the tokens of `sentences` and orders them per `opt` (see VocabOrder).
    /// With the defaults and the anchor's train split this gives 9,850 source / 17,496 target
    /// tokens (quality_anchor.md §2.1).
    static Vocab build(const std::vector<std::vector<std::string>>& sentences,
                       const VocabOptions& opt = {});
    /// The same over sentences[rows[0]], sentences[rows[1]], ... (a split, without copying it).
    /// Throws qkv::Error on an out-of-range row.
    static Vocab build(const std::vector<std::vector<std::string>>& sentences,
                       const std::vector<int64_t>& rows, const VocabOptions& opt = {});

    int64_t size() const { return int64_t(idx_to_token_.size()); }
    /// Index of `token`, or unk() when absent.
    int64_t token_to_idx(std::string_view token) const;
    bool contains(std::string_view token) const;
    /// Token at `idx`; throws qkv::Error when idx is outside [0, size()).
    const std::string& idx_to_token(int64_t idx) const;
    const std::vector<std::string>& tokens() const { return idx_to_token_; }

    /// Maps tokens to ids (unknown -> unk()).
    std::vector<int64_t> encode(const std::vector<std::string>& tokens) const;
    /// Maps ids to tokens; throws qkv::Error on an out-of-range id.
    std::vector<std::string> decode(const std::vector<int64_t>& ids) const;

    /// Index of "<unk>", "<pad>", "<bos>", "<eos>"; throws qkv::Error when that token is absent.
    int64_t unk() const { return unk_; }
    int64_t pad() const { return special(kPad); }
    int64_t bos() const { return special(kBos); }
    int64_t eos() const { return special(kEos); }

    /// Writes one token per line, UTF-8, each line ending in '\n' (the anchor's --dump-data
    /// format), atomically. Throws qkv::Error when a token contains '\n'.
    void save(const std::string& path) const;
    /// Reads a file written by save() (or by fra_full_anchor.py --dump-data). A file whose every
    /// line ends with "\r\n" (Windows line endings) is read as if it ended with "\n"; otherwise a
    /// '\r' belongs to its token (save() writes no file that is CRLF throughout, so load(save(v))
    /// is v). Throws qkv::Error naming the file (and line) when it is empty, does not end with a
    /// newline (truncated), lists a token twice ("PATH:7: the token \"x\" is also on line 5 ...")
    /// or has no "<unk>" line (one that is "<unk>" with CRLF among "\n" lines: "PATH:2: line 2 ends
    /// with CR (Windows line endings on some lines only) ..."), and util::read_file's errors when it
    /// cannot be read.
    static Vocab load(const std::string& path);

    bool operator==(const Vocab& o) const { return idx_to_token_ == o.idx_to_token_; }

private:
    int64_t special(const char* tok) const;

    std::vector<std::string> idx_to_token_;
    std::unordered_map<std::string, int64_t> token_to_idx_;
    int64_t unk_ = 0;
};

}  // namespace qkv::data
