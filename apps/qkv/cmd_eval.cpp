// `qkv eval`: corpus BLEU-4 of a trained model on the held-out split its config.json defines
// (rebuilt from the data file), plus D2L's sentence BLEU (k=2) on the book's four sentences, and
// the standard metrics (sacreBLEU's BLEU and chrF2, decode/sacrebleu.h) against the raw
// references. With --src-file/--ref-file: the standard metrics on any test set.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/ops/precision.h"
#include "qkv/data/text.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/bleu.h"
#include "qkv/decode/sacrebleu.h"
#include "qkv/dist/communicator.h"
#include "qkv/runtime/sharded_translate.h"
#include "qkv/runtime/translation_data.h"
#include "qkv/runtime/translator.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/timer.h"

namespace qkv::cli {
namespace {

struct EvalArgs {
    std::string model = "runs/qkv", data, hyp_out, json_out, src_file, ref_file;
    int64_t beam = 0, max_len = 0, limit = 0, batch = 500, show = 10;
    double length_penalty = -1;
    bool pe_quirk = false, no_progress = false, no_unk = false;
    DecodeFlags decode;
    bool notes = true;  // notes on stderr (false on ranks other than 0 of an mpirun job)
};

/// --hyp-out and --json must not name one file (the second write would replace the first) nor a
/// file of the model folder itself (check_not_model_file). Standard output or a character device
/// (/dev/null, a terminal) may take both: it is written through, not replaced.
void check_outputs_apart(const EvalArgs& a) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto canon = [&](const std::string& p) { return fs::weakly_canonical(fs::absolute(p, ec), ec); };
    bool streams = false;  // both to standard output, or one terminal or /dev/null: appended, not replaced
    try {
        streams = !a.hyp_out.empty() && !a.json_out.empty() && util::is_stream_output(a.hyp_out) &&
                  util::is_stream_output(a.json_out);
    } catch (const Error&) {  // reported with the flag's name by check_output_file
    }
    if (!a.hyp_out.empty() && !a.json_out.empty() && canon(a.hyp_out) == canon(a.json_out) && !streams)
        usage_error("--hyp-out and --json name the same file '" + a.json_out + "': give two names");
    check_not_model_file("--hyp-out", a.hyp_out, a.model);
    check_not_model_file("--json", a.json_out, a.model);
}

/// What eval's hypotheses are, for print_standard_scores' note.
std::string eval_note(bool raw_text) {
    return raw_text ? "on the model's natural text as --hyp-out writes it"
                    : "hypotheses are the model's words joined by spaces, as --hyp-out writes them: for a D2L-token "
                      "model lower case with punctuation split off, not detokenized text";
}

/// Sentences of a source file as the model reads them (runtime::tokenize_sentences: D2L's tokens,
/// or a real-text model's words); a line that is not valid UTF-8, holds a NUL byte or has no token
/// stays empty (its hypothesis is empty), reported on stderr: the first kMaxLineNotes lines, then
/// a count (a binary file would print one note per line). Throws when no line is valid text.
constexpr size_t kMaxLineNotes = 5;
std::vector<std::vector<std::string>> tokenize_source_lines(const runtime::ModelDir& m, const std::vector<std::string>& lines,
                                                            const std::string& file, bool notes) {
    std::vector<std::vector<std::string>> out(lines.size());
    size_t invalid = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
        const size_t bad = data::invalid_utf8_offset(lines[i]);
        if (bad != std::string::npos || lines[i].find('\0') != std::string::npos) {
            if (notes && ++invalid <= kMaxLineNotes)
                std::fprintf(stderr, "qkv eval: --src-file '%s' line %zu: %s; its hypothesis is empty\n", file.c_str(),
                             i + 1, bad != std::string::npos ? "invalid UTF-8" : "a NUL byte");
            continue;
        }
        out[i] = std::move(runtime::tokenize_sentences(m, {lines[i]}).front());
    }
    if (notes && invalid > kMaxLineNotes)
        std::fprintf(stderr, "qkv eval: --src-file '%s': %zu more lines not valid text; their hypotheses are empty "
                             "(notes for the first %zu only)\n", file.c_str(), invalid - kMaxLineNotes, kMaxLineNotes);
    QKV_CHECK(lines.empty() || invalid < lines.size(), "eval: --src-file '", file, "': none of its ", lines.size(),
              " lines is valid text (invalid UTF-8 or a NUL byte): not a file of sentences");
    return out;
}

/// The references must be text: checked before decoding, naming the file and the line (sacreBLEU
/// would refuse them only after the whole decode, without the file's name).
void check_reference_lines(const std::vector<std::string>& refs, const std::string& file) {
    for (size_t i = 0; i < refs.size(); ++i) {
        const size_t bad = data::invalid_utf8_offset(refs[i]);
        QKV_CHECK(bad == std::string::npos, "eval: --ref-file '", file, "' line ", i + 1,
                  ": invalid UTF-8 (byte offset ", bad, "): references must be UTF-8 text");
    }
}

/// qkv eval --src-file F --ref-file R: translates F, scores against R.
void run_on_files(const EvalArgs& a, runtime::Translator& tr, const runtime::TranslateOptions& to, bool int8) {
    const runtime::ModelDir& m = *tr.get();
    data::ParallelLines pl = data::read_parallel_lines(a.src_file, a.ref_file);
    size_t n = pl.source.size();
    if (a.limit > 0) n = std::min(n, size_t(a.limit));
    pl.source.resize(n);
    pl.reference.resize(n);
    check_reference_lines(pl.reference, a.ref_file);
    const auto src = tokenize_source_lines(m, pl.source, a.src_file, a.notes);
    std::vector<size_t> rows;  // lines with something to translate
    std::vector<std::vector<std::string>> todo;
    for (size_t i = 0; i < n; ++i)
        if (!src[i].empty()) {
            rows.push_back(i);
            todo.push_back(src[i]);
        }
    // Sources longer than the model reads (num_steps - 1 units + <eos>) are cut: one note, not a
    // warning per line as qkv translate gives. (A real-text model's are cut into parts instead.)
    int64_t cut = 0;
    const int64_t steps = m.config.data.num_steps;
    if (m.subwords.active() && !todo.empty() && !runtime::reads_raw_text(m)) {
        for (const auto& u : runtime::source_units(m, todo)) cut += int64_t(u.size()) + 1 > steps;
    } else if (!m.subwords.active()) {
        for (const auto& t : todo) cut += int64_t(t.size()) + 1 > steps;
    }
    if (cut > 0 && a.notes)
        std::fprintf(stderr, "qkv eval: note: %lld of %zu source lines have more than the %lld %s the model reads; "
                             "their ends are not translated\n",
                     (long long)cut, n, (long long)(steps - 1), m.subwords.active() ? "pieces" : "tokens");
    util::Timer timer;
    std::vector<std::string> hyps(n);
    if (runtime::reads_raw_text(m)) {
        std::vector<bool> skip(n);
        for (size_t i = 0; i < n; ++i) skip[i] = src[i].empty();
        name_model_in_int8_errors(a.model, int8, [&] {
            hyps = runtime::translate_texts_sharded(*dist::world(), tr, pl.source, skip, to);
        });
    } else {
        std::vector<std::vector<std::string>> out;
        name_model_in_int8_errors(a.model, int8,
                                  [&] { out = runtime::translate_words_sharded(*dist::world(), tr, todo, to); });
        for (size_t k = 0; k < rows.size(); ++k) hyps[rows[k]] = runtime::join_tokens(out[k]);
    }
    const double secs = timer.seconds();
    std::printf("test set --src-file '%s' / --ref-file '%s': %zu pairs, %s decoding (max %lld tokens), %.1f s\n",
                a.src_file.c_str(), a.ref_file.c_str(), n,
                to.sampling.enabled ? "sampled" : to.beam == 1 ? "greedy" : ("beam " + std::to_string(to.beam)).c_str(),
                (long long)to.max_len, secs);
    nlohmann::json j = print_standard_scores(hyps, pl.reference, eval_note(runtime::reads_raw_text(m)));
    for (size_t i = 0; i < std::min(n, size_t(a.show)); ++i)
        std::printf("  %s => %s   [ref: %s]\n", pl.source[i].c_str(), hyps[i].c_str(), pl.reference[i].c_str());
    if (!a.hyp_out.empty()) {
        std::string s;
        for (auto& h : hyps) s += h + "\n";
        util::write_file_atomic(a.hyp_out, s);
    }
    if (!a.json_out.empty()) {
        j["pairs"]          = n;
        j["src_file"]       = a.src_file;
        j["ref_file"]       = a.ref_file;
        j["untranslated"]   = n - rows.size();
        j["cut_sources"]    = cut;
        j["decode_seconds"] = secs;
        j["peak_rss_bytes"] = util::peak_rss_bytes();
        j["beam"]           = to.beam;
        j["sampling"]       = to.sampling.enabled;
        j["compute_type"]   = a.decode.compute_type;
        util::write_file_atomic(a.json_out, j.dump(2) + "\n");
    }
}

/// The arguments as this process runs them: under `mpirun -np N` the ranks share the decoding
/// (runtime::translate_words_sharded) and rank 0 alone prints (the others' stdout goes to /dev/null),
/// notes on stderr, shows progress and writes files.
EvalArgs args_for_this_rank(const EvalArgs& given) {
    EvalArgs a = given;
    if (const int rank = dist::world()->rank(); rank != 0) {
        QKV_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "eval: rank ", rank, ": cannot silence stdout");
        a.hyp_out.clear(), a.json_out.clear(), a.notes = false, a.no_progress = true;
    }
    return a;
}

/// The decoding settings: the flags, else the model folder's config.json.
runtime::TranslateOptions translate_options(const EvalArgs& a, runtime::Translator& tr) {
    const runtime::ModelDir& m = *tr.get();
    runtime::TranslateOptions to =
        base_translate_options(a.max_len, a.beam, a.length_penalty, a.batch, a.no_unk, a.decode, m);
    to.progress       = !a.no_progress;
    apply_decode_flags(a.decode, to, *tr.get());
    return to;
}

/// The data file the model was trained on, checked against the model (fingerprint, vocabularies).
runtime::TranslationData held_out_data(const EvalArgs& a, const runtime::ModelDir& m) {
    const runtime::DataConfig dc = runtime::model_data_config(a.model, m.config, a.data);
    runtime::TranslationData d = runtime::load_translation_data(dc, m.subwords);
    // The pair count and hash recorded at training time (the vocabularies alone cannot tell a
    // reordered file, and a subword model's always agree); older folders: the vocabularies only.
    if (!runtime::check_data_fingerprint(a.model, m.config, d) && a.notes)
        std::fprintf(stderr, "note: %s/config.json records no data fingerprint (an older qkv); the data "
                             "file is checked against the vocabularies only\n", a.model.c_str());
    QKV_CHECK(d.src_vocab == m.src_vocab && d.tgt_vocab == m.tgt_vocab,
              "eval: the data file gives other vocabularies than the model's ('", d.origin,
              "' is not the data the model was trained on, or its filters changed)");
    if (a.notes) std::fprintf(stderr, "data: %s\n", d.summary.c_str());
    return d;
}

/// D2L's four en→fr sentences, translated and scored (D2L BLEU, k=2) and printed; only for a model
/// of those languages (else an empty list and no lines).
struct BookScores {
    bool en_fr = false;
    double mean = 0;
    nlohmann::json sentences = nlohmann::json::array();
};

BookScores score_book_sentences(const EvalArgs& a, runtime::Translator& tr, runtime::TranslateOptions to, bool int8) {
    const runtime::ModelDir& m = *tr.get();
    const auto book = runtime::book_pairs(m);
    BookScores r;
    r.en_fr = runtime::source_language(m.config.data) == "en" && runtime::target_language(m.config.data) == "fr";
    std::vector<std::vector<std::string>> bsrc;
    if (r.en_fr)
        for (auto& [e, f] : book) bsrc.push_back(runtime::tokenize_sentences(m, {e}).front());
    to.progress = false;
    std::vector<std::vector<std::string>> bhyp;
    if (r.en_fr) name_model_in_int8_errors(a.model, int8, [&] { bhyp = runtime::translate_words(tr, bsrc, to); });
    if (r.en_fr) std::printf("book sentences (D2L BLEU, k=2):\n");
    for (size_t i = 0; i < bsrc.size(); ++i) {
        const std::string h = runtime::join_tokens(bhyp[i]);
        const double b = decode::d2l_bleu(h, book[i].second, 2);
        r.mean += b / double(book.size());
        std::printf("  %s => %s, bleu %.3f\n", book[i].first.c_str(), h.c_str(), b);
        r.sentences.push_back({{"source", book[i].first}, {"translation", h}, {"bleu", b}});
    }
    if (r.en_fr) std::printf("  mean %.3f\n", r.mean);
    return r;
}

/// Translations of the first n held-out sources: a real-text model's as qkv translate reads each
/// test source (sentence by sentence), a D2L-token model's from its tokens.
std::vector<std::vector<std::string>> translate_held_out(const EvalArgs& a, runtime::Translator& tr,
                                                         const runtime::TranslationData& d,
                                                         const std::vector<std::vector<std::string>>& src,
                                                         const runtime::TranslateOptions& to, bool int8) {
    const size_t n = src.size();
    std::vector<std::vector<std::string>> hyp;
    if (runtime::reads_raw_text(*tr.get())) {
        const std::vector<std::string> texts(d.test_src_text.begin(), d.test_src_text.begin() + std::ptrdiff_t(n));
        std::vector<std::string> out;
        name_model_in_int8_errors(a.model, int8, [&] {
            out = runtime::translate_texts_sharded(*dist::world(), tr, texts, std::vector<bool>(n), to);
        });
        for (const auto& t : out) hyp.push_back(runtime::split_words(t));
    } else {
        name_model_in_int8_errors(a.model, int8,
                                  [&] { hyp = runtime::translate_words_sharded(*dist::world(), tr, src, to); });
    }
    return hyp;
}

/// The held-out split's scores: corpus BLEU-4, D2L's mean sentence BLEU (k=2), exact matches.
struct HeldOutScores {
    decode::CorpusBleu corpus;
    double mean_sentence_bleu = 0;
    int64_t exact = 0;
};

HeldOutScores score_held_out(const std::vector<std::vector<std::string>>& hyp,
                             const std::vector<std::vector<std::string>>& ref) {
    HeldOutScores r;
    r.corpus = decode::corpus_bleu(hyp, ref);
    for (size_t i = 0; i < hyp.size(); ++i) {
        r.mean_sentence_bleu += decode::d2l_bleu(hyp[i], ref[i], 2);
        r.exact += hyp[i] == ref[i];
    }
    r.mean_sentence_bleu /= std::max<double>(1.0, double(hyp.size()));
    return r;
}

void print_held_out_scores(const EvalArgs& a, const runtime::ModelDir& m, const runtime::TranslateOptions& to,
                           bool int8, size_t n, double secs, const HeldOutScores& s) {
    const decode::CorpusBleu& cb = s.corpus;
    std::printf("held-out set (%s): %zu pairs, %s decoding (max %lld tokens%s%s), %.1f s\n",
                runtime::language_pair(m.config.data).c_str(), n,
                to.sampling.enabled ? "sampled" : to.beam == 1 ? "greedy" : ("beam " + std::to_string(to.beam)).c_str(),
                (long long)to.max_len, a.pe_quirk ? ", D2L PE quirk" : "",
                int8 ? ", int8 compute" : matmul_precision() == MatmulPrecision::bf16 ? ", bf16 compute" : "", secs);
    std::printf("corpus BLEU-4 %.2f  (p1-p4 %.2f / %.2f / %.2f / %.2f %%, BP %.4f, hyp/ref length %lld / %lld)\n",
                100 * cb.bleu, 100 * cb.precisions[0], 100 * cb.precisions[1], 100 * cb.precisions[2],
                100 * cb.precisions[3], cb.bp, (long long)cb.hyp_len, (long long)cb.ref_len);
    std::printf("mean D2L sentence BLEU (k=2) %.3f; exact match %.1f %%; peak RSS %.0f MiB\n", s.mean_sentence_bleu,
                100.0 * double(s.exact) / std::max<double>(1.0, double(n)),
                double(util::peak_rss_bytes()) / (1024.0 * 1024.0));
}

/// qkv eval on the held-out split of the model's data file.
void run_held_out(const EvalArgs& a, runtime::Translator& tr, const runtime::TranslateOptions& to, bool int8) {
    const runtime::ModelDir& m = *tr.get();
    const runtime::TranslationData d = held_out_data(a, m);
    size_t n = d.test_src.size();
    if (a.limit > 0) n = std::min(n, size_t(a.limit));
    std::vector<std::vector<std::string>> src(d.test_src.begin(), d.test_src.begin() + std::ptrdiff_t(n));
    std::vector<std::vector<std::string>> ref(d.test_ref.begin(), d.test_ref.begin() + std::ptrdiff_t(n));
    util::Timer timer;
    const std::vector<std::vector<std::string>> hyp = translate_held_out(a, tr, d, src, to, int8);
    const double secs = timer.seconds();
    const HeldOutScores scores = score_held_out(hyp, ref);
    print_held_out_scores(a, m, to, int8, n, secs, scores);
    std::vector<std::string> hyp_text;  // the --hyp-out lines
    for (auto& h : hyp) hyp_text.push_back(runtime::join_tokens(h));
    // The standard metrics against the file's own reference text (D2L's BLEU above is on D2L tokens).
    const nlohmann::json standard = print_standard_scores(
        hyp_text, std::vector<std::string>(d.test_ref_text.begin(), d.test_ref_text.begin() + std::ptrdiff_t(n)),
        eval_note(runtime::reads_raw_text(m)));
    for (size_t i = 0; i < std::min(n, size_t(a.show)); ++i)
        std::printf("  %s => %s   [ref: %s]\n", runtime::join_tokens(src[i]).c_str(),
                    hyp_text[i].c_str(), runtime::join_tokens(ref[i]).c_str());
    const BookScores book = score_book_sentences(a, tr, to, int8);

    if (!a.hyp_out.empty()) {
        std::string s;
        for (auto& h : hyp_text) s += h + "\n";
        util::write_file_atomic(a.hyp_out, s);
    }
    if (!a.json_out.empty()) {
        const decode::CorpusBleu& cb = scores.corpus;
        nlohmann::json j = {{"pairs", n},
                            {"bleu4", cb.bleu},
                            {"precisions", cb.precisions},
                            {"bp", cb.bp},
                            {"hyp_len", cb.hyp_len},
                            {"ref_len", cb.ref_len},
                            {"mean_d2l_bleu_k2", scores.mean_sentence_bleu},
                            {"exact_match", double(scores.exact) / std::max<double>(1.0, double(n))},
                            {"decode_seconds", secs},
                            {"peak_rss_bytes", util::peak_rss_bytes()},
                            {"beam", to.beam},
                            {"sampling", to.sampling.enabled},
                            {"compute_type", a.decode.compute_type},
                            {"batch_type", a.decode.batch_type},
                            {"batch_size", to.batch_size},
                            {"pe_quirk", a.pe_quirk},
                            {"book", book.sentences},
                            {"book_mean_bleu", book.en_fr ? nlohmann::json(book.mean) : nlohmann::json()}};
        j.update(standard);
        util::write_file_atomic(a.json_out, j.dump(2) + "\n");
    }
}

void run(const EvalArgs& given) {
    const EvalArgs a = args_for_this_rank(given);
    const runtime::ComputeType compute_type = runtime::parse_compute_type(a.decode.compute_type);
    const bool int8 = compute_type == runtime::ComputeType::int8;
    const MatmulPrecisionGuard precision(runtime::matmul_precision(compute_type));
    check_outputs_apart(a);
    check_output_file("--hyp-out", a.hyp_out);  // before minutes of decoding, not after
    check_output_file("--json", a.json_out);
    const auto translator = load_translator(a.model, compute_type, a.pe_quirk);
    runtime::Translator& tr = *translator;
    const runtime::TranslateOptions to = translate_options(a, tr);
    if (!a.src_file.empty()) return run_on_files(a, tr, to, int8);
    run_held_out(a, tr, to, int8);
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* c = app.add_subcommand("eval", "corpus BLEU-4, sacreBLEU and chrF on the held-out split (or a --src-file/--ref-file test set), and the book's sentences");
    c->add_option("--model", a->model, "model folder written by qkv train (default runs/qkv)")
        ->check(non_empty_path());
    c->add_option("--data", a->data, "data file (default: the one recorded in config.json)")
        ->check(non_empty_path());
    auto* sf = c->add_option("--src-file", a->src_file,
                             "score this test set instead of the held-out split: source sentences, one per line (default: none)")
                   ->check(non_empty_path());
    auto* rf = c->add_option("--ref-file", a->ref_file, "the references of --src-file, one per line (raw text; default: none)")
                   ->check(non_empty_path());
    sf->needs(rf);
    rf->needs(sf);
    sf->excludes("--data");
    c->add_option("--beam", a->beam, "beam size (1 = greedy; default: config.json's decode.beam: 1 for the D2L presets, 4 for real)")->transform(int_range(1, 100));
    c->add_option("--length-penalty", a->length_penalty, "GNMT length-penalty alpha for beam search (default: config.json's decode.length_penalty, 0.6)")->check(real_range(0, 10));
    c->add_option("--max-len", a->max_len, "most output tokens, <eos> included (default: config.json's decode.max_len)")->transform(int_range(1, 1000));
    c->add_option("--limit", a->limit, "score only the first N held-out pairs, or lines of --src-file/--ref-file (default: all)")
        ->transform(int_range(1, 1000000000));
    c->add_option("--batch-size", a->batch, "sentences (or with --batch-type tokens: source tokens) per decoder batch (default 500)")->transform(int_range(1, 100000));
    c->add_option("--show", a->show, "print the first N translations (default 10)")
        ->transform(int_range(0, 1000000000));
    c->add_option("--hyp-out", a->hyp_out, "write the hypotheses to this file, one per line (the model's words joined by spaces; default: none)")->check(non_empty_path());
    c->add_option("--json", a->json_out, "write the scores as JSON to this file (default: none)")->check(non_empty_path());
    c->add_flag("--no-unk", a->no_unk, "never output <unk> (take the best known word instead)");
    c->add_flag("--pe-quirk", a->pe_quirk, "D2L's inference quirk: positional encoding 0 at every step");
    c->add_flag("--no-progress", a->no_progress, "no progress bar (default: a bar on a terminal, a line every 10 s otherwise)");
    add_decode_flags(c, a->decode);
    group_options(c, "Model", {"--model", "--pe-quirk"});
    group_options(c, "Data", {"--data", "--src-file", "--ref-file", "--limit"});
    group_options(c, "Decoding", {"--beam", "--length-penalty", "--max-len", "--batch-size", "--no-unk"});
    group_options(c, "Output", {"--show", "--hyp-out", "--json", "--no-progress"});
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
