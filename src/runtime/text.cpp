// The text pipeline of translation (runtime/text.h).
#include "qkv/runtime/text.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "qkv/data/subword.h"
#include "qkv/data/text.h"
#include "qkv/data/tokenizer.h"
#include "qkv/runtime/translation_data.h"

namespace qkv::runtime {

bool is_blank(const std::vector<std::string>& tokens) {
    for (const auto& t : tokens)
        for (unsigned char ch : t)
            if (!std::isspace(ch)) return false;
    return true;
}

TextProblem text_problem(const std::string& sentence) {
    const size_t bad = data::invalid_utf8_offset(sentence);
    const size_t nul = sentence.find('\0');
    if (bad == std::string::npos && nul == std::string::npos) return {};
    return {bad <= nul ? "invalid UTF-8" : "NUL byte", std::min(bad, nul)};
}

std::vector<std::vector<std::string>> tokenize_sentences(const std::vector<std::string>& sentences) {
    std::vector<std::vector<std::string>> out;
    out.reserve(sentences.size());
    for (const auto& s : sentences) {
        auto t = data::tokenize_nmt(s);
        if (is_blank(t)) t.clear();
        out.push_back(std::move(t));
    }
    return out;
}

bool reads_raw_text(const ModelDir& m) { return m.config.data.pipeline == DataPipeline::text; }

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/// Whether the word [b, e) of `text` ends a clause: its last character is , ; : or it is a dash.
bool ends_clause(std::string_view w) {
    if (w.empty()) return false;
    const char last = w.back();
    if (last == ',' || last == ';' || last == ':') return true;
    return w == "-" || w == "--" || w == "\xE2\x80\x93" || w == "\xE2\x80\x94";  // - -- – —
}

/// The parts of one over-long sentence (see split_text); `space_after` goes to the last.
void cut_sentence(const data::SubwordModel& sp, int64_t limit, const data::Sentence& sentence,
                  std::vector<data::Sentence>& out) {
    const std::string& t = sentence.text;
    // A piece holds at least one byte (byte fallback: exactly one) and each word may add a lone
    // '▁': bytes + words bound the pieces, so most sentences need no encoding here.
    struct Word {
        size_t begin, end;
        int64_t pieces;
    };
    std::vector<Word> words;
    for (size_t i = 0; i < t.size();) {
        while (i < t.size() && ascii_space(t[i])) ++i;
        if (i == t.size()) break;
        const size_t b = i;
        while (i < t.size() && !ascii_space(t[i])) ++i;
        words.push_back({b, i, 0});
    }
    if (int64_t(t.size() + words.size()) <= limit) {
        out.push_back(sentence);
        return;
    }
    for (Word& w : words)  // (pieces never span words: see source_word_limit)
        w.pieces = int64_t(sp.encode_text(t.substr(w.begin, w.end - w.begin)).size());
    int64_t rest = 0;  // the pieces of words[first..]
    for (const Word& w : words) rest += w.pieces;
    size_t first = 0;
    while (first < words.size()) {
        size_t last = words.size() - 1;  // the part's last word
        if (rest > limit) {
            const int64_t parts = (rest + limit - 1) / limit, goal = (rest + parts - 1) / parts;
            int64_t acc = 0, best_gap = -1, best_clause_gap = -1;
            size_t best = first, best_clause = first;
            for (size_t j = first; j < words.size(); ++j) {
                acc += words[j].pieces;
                if (acc > limit && j > first) break;
                const int64_t gap = std::abs(acc - goal);
                if (best_gap < 0 || gap < best_gap) best_gap = gap, best = j;
                if (ends_clause(std::string_view(t).substr(words[j].begin, words[j].end - words[j].begin)) &&
                    2 * gap <= limit && (best_clause_gap < 0 || gap < best_clause_gap))
                    best_clause_gap = gap, best_clause = j;
                if (acc > limit) break;  // a single word over the limit: a part of its own
            }
            last = best_clause_gap >= 0 ? best_clause : best;
        }
        const bool end = last + 1 == words.size();
        out.push_back({t.substr(words[first].begin, words[last].end - words[first].begin),
                       end ? sentence.space_after : t.substr(words[last].end, words[last + 1].begin - words[last].end)});
        for (size_t j = first; j <= last; ++j) rest -= words[j].pieces;
        first = last + 1;
    }
}

}  // namespace

data::SentenceSplit split_text(const ModelDir& m, std::string_view text) {
    data::SentenceSplit s = data::split_sentences(text);
    if (!reads_raw_text(m) || !m.subwords.active()) return s;
    const int64_t limit = std::max<int64_t>(1, m.config.data.num_steps - 1);
    data::SentenceSplit out;
    out.leading = std::move(s.leading);
    for (const data::Sentence& x : s.sentences) cut_sentence(*m.subwords.src, limit, x, out.sentences);
    return out;
}

std::vector<std::vector<std::string>> tokenize_sentences(const ModelDir& m, const std::vector<std::string>& sentences) {
    if (!reads_raw_text(m)) return tokenize_sentences(sentences);
    std::vector<std::vector<std::string>> out;
    out.reserve(sentences.size());
    for (const auto& s : sentences) out.push_back(data::raw_words(s));
    return out;
}

std::vector<std::pair<std::string, std::string>> book_pairs(const ModelDir& m) {
    if (reads_raw_text(m))
        return {{"Go.", "Va !"}, {"I lost.", "J'ai perdu."}, {"He's calm.", "Il est calme."}, {"I'm home.", "Je suis chez moi."}};
    return {{"go .", "va !"}, {"i lost .", "j'ai perdu ."}, {"he's calm .", "il est calme ."},
            {"i'm home .", "je suis chez moi ."}};
}

std::string join_tokens(const std::vector<std::string>& tokens) {
    std::string s;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (i) s += ' ';
        s += tokens[i];
    }
    return s;
}

// Why a prefix of words gives the same first num_steps pieces as the whole sentence, for the
// models SubwordModel::train makes (SentencePiece's defaults add_dummy_prefix and
// split_by_whitespace, character_coverage 1): the text SentencePiece sees is the words joined by
// single spaces, and each word starts with the whitespace mark '▁' (the dummy prefix for the
// first, its space for the others). '▁' is a character of every training sentence, so it is a
// known piece and never part of a run of unknown characters merged into one <unk>; no piece holds
// '▁' after its start, so no piece spans two words, and BPE merges and unigram's Viterbi path
// segment each word on its own. So the encoding of the first k words is a prefix of the whole
// sentence's and holds at least k pieces: num_steps words would do. 4 × num_steps costs nothing
// and leaves a margin for a model trained elsewhere whose pieces may span a few words.
int64_t source_word_limit(const ModelDir& m) { return 4 * m.config.data.num_steps; }

// Each piece spans at most the longest piece's characters, so the first num_steps pieces of a word
// lie within its first num_steps × longest characters; 4× that leaves the same margin as the word
// limit for segmentations that look a few characters ahead. SentencePiece's time and memory grow
// with the text encoded (a 5,000,000-character word took 9.9 s and 1.35 GB encoded whole).
int64_t source_char_limit(const ModelDir& m) {
    int64_t longest = 1;
    for (const auto& piece : m.src_vocab.tokens()) longest = std::max(longest, data::utf8_length(piece));
    return 4 * m.config.data.num_steps * longest;
}

std::string cut_to_chars(const std::string& word, int64_t n) {
    int64_t seen = 0;
    for (size_t i = 0; i < word.size(); ++i)
        if ((uint8_t(word[i]) & 0xC0) != 0x80 && seen++ == n) return word.substr(0, i);
    return word;
}

namespace {

/// source_units with source_char_limit(m) already known (it scans the source vocabulary).
std::vector<std::vector<std::string>> source_units_cut(const ModelDir& m,
                                                       const std::vector<std::vector<std::string>>& words,
                                                       int64_t chars) {
    if (!m.subwords.active()) return words;
    const auto limit = size_t(source_word_limit(m));
    std::vector<std::vector<std::string>> units;
    units.reserve(words.size());
    for (const auto& w : words) {
        std::vector<std::string> kept(w.begin(), w.begin() + std::ptrdiff_t(std::min(limit, w.size())));
        for (auto& word : kept)
            if (int64_t(word.size()) > chars) word = cut_to_chars(word, chars);
        units.push_back(m.subwords.src->encode(kept));
    }
    return units;
}

}  // namespace

std::vector<std::vector<std::string>> source_units(const ModelDir& m,
                                                   const std::vector<std::vector<std::string>>& words) {
    return m.subwords.active() ? source_units_cut(m, words, source_char_limit(m)) : words;
}

std::vector<std::string> target_words(const ModelDir& m, const std::vector<std::string>& units) {
    return m.subwords.active() ? m.subwords.tgt->decode(units) : units;
}

std::string length_limit_note(const std::string& subject, const std::string& limit, int64_t max_len, bool source_tied) {
    if (source_tied)
        return detail::str(subject, " reached the length limit for its source (twice the source's tokens + 10, a "
                           "real-text model's limit, here below ", limit, " ", max_len,
                           ") before the end of the sentence: the translation is cut there (", limit,
                           " does not raise this limit)");
    const std::string advice = max_len >= kMaxLenMost
                                   ? detail::str("; ", max_len, " is the most ", limit,
                                                 " allows: the model does not end this sentence")
                                   : detail::str("; raise ", limit);
    return detail::str(subject, " reached the length limit of ", max_len, max_len == 1 ? " token (" : " tokens (", limit,
                       ") before the end of the sentence: the translation is cut there", advice);
}

SourceNotes source_notes(const ModelDir& m, const std::vector<std::string>& tokens) {
    // encode_sources keeps the first num_steps units of (units + <eos>): a sentence fits whole
    // with num_steps - 1 units; a longer one keeps its first num_steps units and loses <eos>.
    const int64_t steps = m.config.data.num_steps;
    const bool pieces   = m.subwords.active();
    const auto words    = int64_t(tokens.size());
    const int64_t limit = pieces ? source_word_limit(m) : words;
    bool bound          = words > limit;
    SourceNotes notes;
    const int64_t chars = pieces ? source_char_limit(m) : 0;
    if (pieces) {
        // A word longer than source_char_limit characters is encoded from its start only (its
        // later pieces could not reach the model's positions); the piece count is then a bound.
        for (int64_t i = 0; i < std::min(words, limit); ++i)
            if (const int64_t len = data::utf8_length(tokens[size_t(i)]); len > chars) {
                bound = true;
                notes.long_words.push_back(detail::str("word ", i + 1, " has ", len,
                                                       " characters; the subword model encodes its first ", chars,
                                                       " (4 x num_steps x the longest piece)"));
            }
    }
    int64_t n = pieces ? int64_t(source_units_cut(m, {tokens}, chars)[0].size()) : words;
    if (words > limit) n += words - limit;
    notes.cut = truncation_note(n, steps, pieces, words, bound);
    return notes;
}

}  // namespace qkv::runtime
