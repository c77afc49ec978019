// `qkv translate`: English -> French with a trained model folder; sentences from the command
// line, a file, or stdin (one per line); one translation per output line.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/data/text.h"
#include "qkv/ops/precision.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translator.h"
#include "qkv/util/atomic_file.h"

namespace qkv::cli {
namespace {

struct TranslateArgs {
    std::string model = "runs/qkv";
    std::vector<std::string> sentences;
    std::string file;
    int64_t beam = 0, max_len = 0, batch = 500;
    double length_penalty = -1;
    int64_t num_hypotheses = 1;
    bool show_source = false, pe_quirk = false, no_unk = false, scores = false, alignments = false, no_split = false;
    std::string attention_json;
    DecodeFlags decode;
};

/// The sentences to translate: those on the command line, else the lines of --file or stdin (a
/// trailing CR and a leading UTF-8 byte-order mark dropped).
std::vector<std::string> read_lines(const TranslateArgs& a) {
    std::vector<std::string> lines = a.sentences;
    if (!lines.empty()) return lines;
    std::ifstream f;
    std::istream* in = &std::cin;
    if (!a.file.empty() && a.file != "-") {
        f.open(a.file);
        QKV_CHECK(f.good(), "translate: cannot open '", a.file, "'");
        in = &f;
    }
    std::string line;
    while (std::getline(*in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        // A UTF-8 byte-order mark (files saved by some Windows editors) is not text.
        if (lines.empty() && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
        lines.push_back(line);
    }
    QKV_CHECK(!in->bad(), "translate: reading '", a.file.empty() ? std::string("-") : a.file, "' failed");
    return lines;
}

/// The input lines as rows to translate. One output line per input line: a line that cannot be
/// translated (invalid UTF-8, or a NUL byte, which would silently become <unk>) or has nothing to
/// translate gives an empty output line and a note on stderr. With `split`, each line is cut into
/// sentences (runtime::split_text: over-long ones cut between words), one row each, and its output is their translations in the
/// line's layout; otherwise the line is one row.
struct Rows {
    std::vector<std::vector<std::string>> src;
    std::vector<std::vector<size_t>> rows_of;  // input line -> its rows of src (none: nothing to translate)
    std::vector<data::SentenceSplit> layout;   // input line -> its sentences and the spaces between (split)
    int64_t invalid = 0;
    /// The first row of line i, or npos.
    size_t first_row(size_t i) const { return rows_of[i].empty() ? std::string::npos : rows_of[i].front(); }
};
/// Per-line notes of one kind on stderr, the first kMaxNotes only: a binary file or a whole corpus
/// of over-long lines would otherwise bury the output under one note per line. The rest are
/// counted and summed up once at the end.
class LineNotes {
public:
    static constexpr int64_t kMaxNotes = 5;
    explicit LineNotes(const char* unit) : unit_(unit) {}
    /// Prints "qkv translate: <what>" unless kMaxNotes were printed already; counts it either way.
    template <class... A>
    void note(const A&... what) {
        if (++count_ <= kMaxNotes) std::fprintf(stderr, "qkv translate: %s\n", detail::str(what...).c_str());
    }
    /// "qkv translate: ... N more <unit>s <kind>" when notes were left out.
    void summary(const char* kind) const {
        if (count_ > kMaxNotes)
            std::fprintf(stderr, "qkv translate: %lld more %ss %s (notes for the first %lld only)\n",
                         (long long)(count_ - kMaxNotes), unit_, kind, (long long)kMaxNotes);
    }
    int64_t count() const { return count_; }

private:
    const char* unit_;
    int64_t count_ = 0;
};

Rows tokenize_lines(const std::vector<std::string>& lines, const char* unit, const runtime::ModelDir& m, bool split,
                    const char* whole_note) {
    Rows rows;
    rows.rows_of.resize(lines.size());
    rows.layout.resize(lines.size());
    LineNotes bad(unit), empty(unit), parted(unit);
    for (size_t i = 0; i < lines.size(); ++i) {
        if (const runtime::TextProblem p = runtime::text_problem(lines[i])) {
            bad.note(unit, " ", i + 1, ": ", p.what, " (byte offset ", p.offset, "); output left empty");
            ++rows.invalid;
            continue;
        }
        std::vector<std::string> sentences{lines[i]};
        if (const size_t held = !split && whole_note ? data::split_sentences(lines[i]).sentences.size() : 0; held > 1)
            std::fprintf(stderr, "qkv translate: warning: %s %zu holds %zu sentences; %s translates it as one "
                                 "(a model trained on single sentences may leave the later ones out)\n",
                         unit, i + 1, held, whole_note);
        if (split) {
            rows.layout[i] = runtime::split_text(m, lines[i]);
            const size_t whole = data::split_sentences(lines[i]).sentences.size();
            if (rows.layout[i].sentences.size() > whole)
                parted.note("note: ", unit, " ", i + 1, " is over the ", m.config.data.num_steps - 1,
                            " source pieces the model reads: translated in ", rows.layout[i].sentences.size(),
                            " parts, cut between words");
            sentences.clear();
            for (const auto& s : rows.layout[i].sentences) sentences.push_back(s.text);
        }
        auto tokens = runtime::tokenize_sentences(m, sentences);
        bool any = false;
        for (const auto& t : tokens) any |= !t.empty();
        if (!any) {
            empty.note(unit, " ", i + 1, ": empty; output left empty");
            continue;
        }
        for (size_t k = 0; k < tokens.size(); ++k) {
            const std::string what = unit + (" " + std::to_string(i + 1)) +
                                     (tokens.size() > 1 ? detail::str(", part ", k + 1, " of ", tokens.size()) : std::string());
            warn_if_truncated("qkv translate", what, m, tokens[k]);
            rows.rows_of[i].push_back(rows.src.size());
            rows.src.push_back(std::move(tokens[k]));
        }
    }
    bad.summary("not valid text (invalid UTF-8 or a NUL byte); output left empty");
    empty.summary("empty; output left empty");
    parted.summary("over the model's source length: translated in parts, cut between words");
    return rows;
}

/// A note on stderr for the lines whose translation ran to the length limit before <eos> (the
/// output may end mid-sentence or mid-word): the first few line numbers and the total
/// (runtime::length_limit_note).
void note_unfinished(const Rows& rows, const std::vector<std::vector<runtime::Translation>>& hyp, const char* unit,
                     int64_t max_len) {
    std::vector<size_t> cut;
    bool source_tied = true;  // every cut one stopped below max_len (a real-text model's limit)
    for (size_t i = 0; i < rows.rows_of.size(); ++i)
        for (size_t r : rows.rows_of[i])
            if (!hyp[r].empty() && !hyp[r].front().finished) {
                cut.push_back(i + 1);
                source_tied = source_tied && int64_t(hyp[r].front().ids.size()) < max_len;
                break;
            }
    if (cut.empty()) return;
    std::string where;
    for (size_t k = 0; k < cut.size() && k < 5; ++k) where += (k ? ", " : "") + std::to_string(cut[k]);
    if (cut.size() > 5) where += ", ...";
    const std::string subject = detail::str(cut.size(), " ", unit, cut.size() == 1 ? "" : "s", " (", where, ")");
    std::fprintf(stderr, "qkv translate: warning: %s\n",
                 runtime::length_limit_note(subject, "--max-len", max_len, source_tied).c_str());
}

/// --attention-json: one object per input line: source units, output units, weights (rows: output
/// units + <eos> when finished; columns: the source units the model read, then <eos>).
void write_attention_json(const std::string& path, const runtime::ModelDir& m, const Rows& rows,
                          const std::vector<std::vector<runtime::Translation>>& hyp) {
    nlohmann::json j = nlohmann::json::array();
    const auto units = runtime::source_units(m, rows.src);
    for (size_t i = 0; i < rows.rows_of.size(); ++i) {
        const size_t r = rows.first_row(i);
        nlohmann::json e = {{"line", i + 1}};
        if (r != std::string::npos && !hyp[r].empty()) {
            e["source"]      = units[r];
            e["translation"] = hyp[r][0].units;
            e["alignment"]   = hyp[r][0].alignment;
            e["attention"]   = hyp[r][0].attention;
        }
        j.push_back(std::move(e));
    }
    util::write_file_atomic(path, j.dump() + "\n");
}

/// The decoding settings: the flags given, else config.json's decode section.
runtime::TranslateOptions translate_options(const TranslateArgs& a, const runtime::ModelDir& m) {
    runtime::TranslateOptions to =
        base_translate_options(a.max_len, a.beam, a.length_penalty, a.batch, a.no_unk, a.decode, m);
    to.num_hypotheses = a.num_hypotheses;
    if (to.num_hypotheses > to.beam)
        throw CLI::ValidationError(detail::str("--num-hypotheses ", to.num_hypotheses, " needs --beam >= ",
                                               to.num_hypotheses, " (the n-best come from the beam), got ", to.beam));
    apply_decode_flags(a.decode, to, m);
    to.attention = a.alignments || !a.attention_json.empty();
    to.scores    = a.scores;
    return to;
}

void run(const TranslateArgs& a) {
    const runtime::ComputeType compute_type = runtime::parse_compute_type(a.decode.compute_type);
    const bool int8 = compute_type == runtime::ComputeType::int8;
    const MatmulPrecisionGuard precision(runtime::matmul_precision(compute_type));
    // --file and sentences on the command line are alternatives; a usage error (exit 2) before
    // the model is loaded, instead of translating the sentences and ignoring the file.
    if (!a.file.empty() && !a.sentences.empty())
        throw CLI::ValidationError(detail::str("--file '", a.file, "' and ", a.sentences.size(), " sentence",
                                               a.sentences.size() == 1 ? "" : "s",
                                               " on the command line: give one or the other, not both"));
    // A --file that is a folder reads as an empty stream on Linux: refuse it before loading.
    if (!a.file.empty() && a.file != "-") {
        std::error_code ec;
        // exit 1 as for a missing file: the argument is well-formed, the file system disagrees
        QKV_CHECK(!std::filesystem::is_directory(a.file, ec), "translate: --file '", a.file,
                  "' is a folder, not a file of sentences");
        QKV_CHECK(std::filesystem::exists(a.file, ec), "translate: --file '", a.file, "' does not exist");
    }
    check_output_file("--attention-json", a.attention_json);  // before decoding, not after
    check_not_model_file("--attention-json", a.attention_json, a.model);
    const auto translator = load_translator(a.model, compute_type, a.pe_quirk);
    runtime::Translator& tr = *translator;
    const runtime::ModelDir& m = *tr.get();
    const std::vector<std::string> lines = read_lines(a);
    const char* unit = a.sentences.empty() ? "line" : "sentence";  // the input's numbering in messages
    // Each line is cut into sentences and translated sentence by sentence, unless the output is
    // per hypothesis or per unit (n-best, scores, alignments, attention), which is per line.
    // Alignments and attention weights index one source and one output: such a line is translated
    // whole (with a warning when it holds several sentences); so is a line with a forced --prefix,
    // which starts its translation.
    const bool split = !a.no_split && !a.alignments && a.attention_json.empty() && a.decode.prefix.empty();
    const char* whole_note = a.no_split ? nullptr : a.alignments ? "--alignments" : !a.attention_json.empty() ? "--attention-json"
                                                 : "--prefix";
    const Rows rows = tokenize_lines(lines, unit, m, split, whole_note);
    const auto& src    = rows.src;
    runtime::TranslateOptions to = translate_options(a, m);
    // Output streams in input order as decoder batches finish: line i is printed once every line
    // before it is (batches are length sorted, so a short late line waits for the long ones).
    // With --num-hypotheses > 1 or --scores: Moses n-best lines "i ||| translation ||| log P |||
    // log P / lp", i the 0-based input line; otherwise one translation per input line.
    const bool nbest = to.num_hypotheses > 1 || a.scores;
    std::vector<const std::vector<runtime::Translation>*> done_rows(src.size(), nullptr);
    size_t next_line = 0;
    auto line_done = [&](size_t i) {
        for (size_t r : rows.rows_of[i])
            if (done_rows[r] == nullptr) return false;
        return true;
    };
    auto print_line = [&](size_t i) {
        const size_t r = rows.first_row(i);
        if (split && r != std::string::npos && nbest) {
            std::vector<std::vector<runtime::Translation>> per_sentence;
            for (size_t k : rows.rows_of[i]) per_sentence.push_back(*done_rows[k]);
            for (const auto& h : runtime::join_sentence_nbest(per_sentence, rows.layout[i]))
                std::printf("%zu ||| %s ||| %.6f ||| %.6f\n", i, h.text.c_str(), h.log_prob, h.score);
            return;
        }
        if (split && r != std::string::npos) {
            std::vector<std::string> out;
            for (size_t k : rows.rows_of[i])
                out.push_back(done_rows[k]->empty() ? "" : runtime::join_tokens(done_rows[k]->front().words));
            const std::string t = runtime::join_translations(rows.layout[i], out);
            if (a.show_source)
                std::printf("%s => %s\n", lines[i].c_str(), t.c_str());
            else
                std::printf("%s\n", t.c_str());
            return;
        }
        if (nbest) {
            if (r == std::string::npos) return;
            for (const auto& t : *done_rows[r])
                std::printf("%zu ||| %s ||| %.6f ||| %.6f%s%s\n", i, runtime::join_tokens(t.words).c_str(), t.log_prob,
                            t.score, a.alignments ? " ||| " : "", a.alignments ? t.alignment.c_str() : "");
            return;
        }
        const auto* h = r == std::string::npos ? nullptr : done_rows[r];
        std::string out = h == nullptr || h->empty() ? "" : runtime::join_tokens(h->front().words);
        if (a.alignments && h != nullptr && !h->empty()) out += " ||| " + h->front().alignment;
        if (r == std::string::npos)
            std::printf("\n");
        else if (a.show_source)
            std::printf("%s => %s\n", runtime::join_tokens(src[r]).c_str(), out.c_str());
        else
            std::printf("%s\n", out.c_str());
    };
    auto flush_ready = [&] {
        const size_t before = next_line;
        while (next_line < lines.size() && line_done(next_line))
            print_line(next_line++);
        if (next_line != before) std::fflush(stdout);
    };
    flush_ready();  // leading lines that need no decoding
    // translate_nbest fills hyp's row before the callback, and hyp outlives the loop.
    std::vector<std::vector<runtime::Translation>> hyp;
    to.on_translated = [&](int64_t row, const std::vector<runtime::Translation>& nb) {
        done_rows[size_t(row)] = &nb;
        flush_ready();
    };
    name_model_in_int8_errors(a.model, int8, [&] { hyp = tr.translate(src, to); });
    for (size_t r = 0; r < hyp.size(); ++r) done_rows[r] = &hyp[r];  // the returned copies
    flush_ready();
    if (!a.attention_json.empty()) write_attention_json(a.attention_json, m, rows, hyp);
    std::fflush(stdout);
    note_unfinished(rows, hyp, unit, to.max_len);
    QKV_CHECK(rows.invalid == 0, "translate: ", rows.invalid, " of ", lines.size(), " ", unit,
              lines.size() == 1 ? "" : "s",
              " not translated (invalid UTF-8 or a NUL byte; their output lines are empty)");
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<TranslateArgs>();
    CLI::App* c = app.add_subcommand("translate", "translate sentences with a trained model (from the language it was trained on: English for fra-eng)");
    c->add_option("--model", a->model, "model folder written by qkv train (default runs/qkv)")
        ->check(non_empty_path());
    c->add_option("sentences", a->sentences, "sentences to translate (default: lines of --file or stdin; not with --file)");
    c->add_option("--file,-f", a->file, "file with one text per line, each cut into sentences unless --no-split ('-' = stdin; not with sentences "
                                        "on the command line; default: the sentences given, else stdin)")
        ->check(non_empty_path());
    c->add_option("--beam", a->beam, "beam size (1 = greedy; default: config.json's decode.beam: 1 for the D2L presets, 4 for real)")->transform(int_range(1, 100));
    c->add_option("--length-penalty", a->length_penalty, "GNMT length-penalty alpha for beam search (default: config.json's decode.length_penalty, 0.6)")
        ->check(real_range(0, 10));
    c->add_option("--max-len", a->max_len, "most output tokens, <eos> included (default: config.json's decode.max_len)")->transform(int_range(1, runtime::kMaxLenMost));
    c->add_option("--batch-size", a->batch, "sentences (or with --batch-type tokens: source tokens) per decoder batch (default 500)")->transform(int_range(1, 100000));
    c->add_flag("--show-source", a->show_source, "print 'source => translation'");
    c->add_flag("--no-split", a->no_split, "translate each line as one sentence (default: lines are cut into sentences "
                                           "at . ? ! followed by a space and a capital, docs/decoding.md, and each is "
                                           "translated on its own; n-best, scores and alignments are per line)");
    c->add_option("--num-hypotheses", a->num_hypotheses, "n-best: print the K best of the beam as "
                                                          "'line ||| translation ||| log P ||| normalised' (default 1)")
        ->transform(int_range(1, 100));
    c->add_flag("--scores", a->scores, "print scores ('line ||| translation ||| log P ||| normalised')");
    c->add_flag("--alignments", a->alignments, "append ' ||| i-j ...' (source unit i aligned to output unit j: "
                                               "the last decoder block's cross-attention, mean over heads, argmax)");
    c->add_option("--attention-json", a->attention_json, "write each line's cross-attention weights as JSON to this file (default: none)")
        ->check(non_empty_path());
    add_decode_flags(c, a->decode);
    c->add_flag("--no-unk", a->no_unk, "never output <unk> (take the best known word instead)");
    c->add_flag("--pe-quirk", a->pe_quirk, "D2L's inference quirk: positional encoding 0 at every step");
    group_options(c, "Model", {"--model", "--pe-quirk"});
    group_options(c, "Input", {"sentences", "--file", "--no-split"});
    group_options(c, "Decoding", {"--beam", "--length-penalty", "--max-len", "--batch-size", "--no-unk"});
    group_options(c, "Output", {"--show-source", "--num-hypotheses", "--scores", "--alignments", "--attention-json"});
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
