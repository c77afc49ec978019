// `qkv eval`: corpus BLEU-4 of a trained model on the held-out split its config.json defines
// (rebuilt from the data file), plus D2L's sentence BLEU (k=2) on the book's four sentences.
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
#include "qkv/data/tokenizer.h"
#include "qkv/decode/bleu.h"
#include "qkv/runtime/translation_data.h"
#include "qkv/runtime/translator.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/timer.h"

namespace qkv::cli {
namespace {

struct EvalArgs {
    std::string model = "runs/qkv", data, hyp_out, json_out;
    int64_t beam = 0, max_len = 0, limit = 0, batch = 500, show = 10;
    double length_penalty = -1;
    bool pe_quirk = false, no_progress = false, no_unk = false;
    DecodeFlags decode;
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

/// The best translation's words of each source (runtime::translate_tokens with the translator).
std::vector<std::vector<std::string>> translate_words(runtime::Translator& tr,
                                                      const std::vector<std::vector<std::string>>& src,
                                                      const runtime::TranslateOptions& to) {
    std::vector<std::vector<std::string>> out;
    for (auto& nbest : tr.translate(src, to)) out.push_back(nbest.empty() ? std::vector<std::string>{} : nbest.front().words);
    return out;
}

void run(const EvalArgs& a) {
    const runtime::ComputeType compute_type = runtime::parse_compute_type(a.decode.compute_type);
    const bool int8 = compute_type == runtime::ComputeType::int8;
    const MatmulPrecisionGuard precision(runtime::matmul_precision(compute_type));
    check_outputs_apart(a);
    check_output_file("--hyp-out", a.hyp_out);  // before minutes of decoding, not after
    check_output_file("--json", a.json_out);
    const auto translator = load_translator(a.model, compute_type, a.pe_quirk);
    runtime::Translator& tr = *translator;
    const runtime::ModelDir& m = *tr.get();
    const runtime::DataConfig dc = runtime::model_data_config(a.model, m.config, a.data);
    runtime::TranslationData d = runtime::load_translation_data(dc, m.subwords);
    // The pair count and hash recorded at training time (the vocabularies alone cannot tell a
    // reordered file, and a subword model's always agree); older folders: the vocabularies only.
    if (!runtime::check_data_fingerprint(a.model, m.config, d))
        std::fprintf(stderr, "note: %s/config.json records no data fingerprint (an older qkv); the data "
                             "file is checked against the vocabularies only\n", a.model.c_str());
    QKV_CHECK(d.src_vocab == m.src_vocab && d.tgt_vocab == m.tgt_vocab,
              "eval: the data file gives other vocabularies than the model's ('", d.origin,
              "' is not the data the model was trained on, or its filters changed)");
    std::fprintf(stderr, "data: %s\n", d.summary.c_str());

    size_t n = d.test_src.size();
    if (a.limit > 0) n = std::min(n, size_t(a.limit));
    std::vector<std::vector<std::string>> src(d.test_src.begin(), d.test_src.begin() + std::ptrdiff_t(n));
    std::vector<std::vector<std::string>> ref(d.test_ref.begin(), d.test_ref.begin() + std::ptrdiff_t(n));
    runtime::TranslateOptions to;
    to.max_len        = a.max_len > 0 ? a.max_len : m.config.decode.max_len;
    to.beam           = a.beam > 0 ? a.beam : m.config.decode.beam;
    to.length_penalty = a.length_penalty >= 0 ? a.length_penalty : m.config.decode.length_penalty;
    to.batch_size     = a.batch;
    to.no_unk         = a.no_unk;
    to.progress       = !a.no_progress;
    apply_decode_flags(a.decode, to);
    util::Timer timer;
    std::vector<std::vector<std::string>> hyp;
    name_model_in_int8_errors(a.model, int8, [&] { hyp = translate_words(tr, src, to); });
    const double secs = timer.seconds();
    decode::CorpusBleu cb = decode::corpus_bleu(hyp, ref);
    double sent = 0;
    int64_t exact = 0;
    for (size_t i = 0; i < n; ++i) {
        sent += decode::d2l_bleu(hyp[i], ref[i], 2);
        exact += hyp[i] == ref[i];
    }
    sent /= std::max<double>(1.0, double(n));

    std::printf("held-out set (%s): %zu pairs, %s decoding (max %lld tokens%s%s), %.1f s\n",
                runtime::language_pair(m.config.data).c_str(), n,
                to.sampling.enabled ? "sampled" : to.beam == 1 ? "greedy" : ("beam " + std::to_string(to.beam)).c_str(),
                (long long)to.max_len, a.pe_quirk ? ", D2L PE quirk" : "",
                int8 ? ", int8 compute" : matmul_precision() == MatmulPrecision::bf16 ? ", bf16 compute" : "", secs);
    std::printf("corpus BLEU-4 %.2f  (p1-p4 %.2f / %.2f / %.2f / %.2f %%, BP %.4f, hyp/ref length %lld / %lld)\n",
                100 * cb.bleu, 100 * cb.precisions[0], 100 * cb.precisions[1], 100 * cb.precisions[2],
                100 * cb.precisions[3], cb.bp, (long long)cb.hyp_len, (long long)cb.ref_len);
    std::printf("mean D2L sentence BLEU (k=2) %.3f; exact match %.1f %%; peak RSS %.0f MiB\n", sent,
                100.0 * double(exact) / std::max<double>(1.0, double(n)),
                double(util::peak_rss_bytes()) / (1024.0 * 1024.0));
    for (size_t i = 0; i < std::min(n, size_t(a.show)); ++i)
        std::printf("  %s => %s   [ref: %s]\n", runtime::join_tokens(src[i]).c_str(),
                    runtime::join_tokens(hyp[i]).c_str(), runtime::join_tokens(ref[i]).c_str());

    const std::vector<std::pair<std::string, std::string>> book = {
        {"go .", "va !"}, {"i lost .", "j'ai perdu ."}, {"he's calm .", "il est calme ."},
        {"i'm home .", "je suis chez moi ."}};
    // D2L's four en→fr sentences: only for a model of those languages.
    const bool en_fr = runtime::source_language(m.config.data) == "en" && runtime::target_language(m.config.data) == "fr";
    std::vector<std::vector<std::string>> bsrc;
    if (en_fr)
        for (auto& [e, f] : book) bsrc.push_back(data::split_tokens(e));
    to.progress = false;
    std::vector<std::vector<std::string>> bhyp;
    if (en_fr) name_model_in_int8_errors(a.model, int8, [&] { bhyp = translate_words(tr, bsrc, to); });
    double mean = 0;
    nlohmann::json jbook = nlohmann::json::array();
    if (en_fr) std::printf("book sentences (D2L BLEU, k=2):\n");
    for (size_t i = 0; i < bsrc.size(); ++i) {
        const std::string h = runtime::join_tokens(bhyp[i]);
        const double b = decode::d2l_bleu(h, book[i].second, 2);
        mean += b / double(book.size());
        std::printf("  %s => %s, bleu %.3f\n", book[i].first.c_str(), h.c_str(), b);
        jbook.push_back({{"source", book[i].first}, {"translation", h}, {"bleu", b}});
    }
    if (en_fr) std::printf("  mean %.3f\n", mean);

    if (!a.hyp_out.empty()) {
        std::string s;
        for (auto& h : hyp) s += runtime::join_tokens(h) + "\n";
        util::write_file_atomic(a.hyp_out, s);
    }
    if (!a.json_out.empty()) {
        nlohmann::json j = {{"pairs", n},
                            {"bleu4", cb.bleu},
                            {"precisions", cb.precisions},
                            {"bp", cb.bp},
                            {"hyp_len", cb.hyp_len},
                            {"ref_len", cb.ref_len},
                            {"mean_d2l_bleu_k2", sent},
                            {"exact_match", double(exact) / std::max<double>(1.0, double(n))},
                            {"decode_seconds", secs},
                            {"peak_rss_bytes", util::peak_rss_bytes()},
                            {"beam", to.beam},
                            {"sampling", to.sampling.enabled},
                            {"compute_type", a.decode.compute_type},
                            {"batch_type", a.decode.batch_type},
                            {"batch_size", to.batch_size},
                            {"pe_quirk", a.pe_quirk},
                            {"book", jbook},
                            {"book_mean_bleu", en_fr ? nlohmann::json(mean) : nlohmann::json()}};
        util::write_file_atomic(a.json_out, j.dump(2) + "\n");
    }
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* c = app.add_subcommand("eval", "corpus BLEU-4 on the held-out split, and the book's sentences");
    c->add_option("--model", a->model, "model folder written by qkv train (default runs/qkv)")
        ->check(non_empty_path());
    c->add_option("--data", a->data, "data file (default: the one recorded in config.json)")
        ->check(non_empty_path());
    c->add_option("--beam", a->beam, "beam size (1 = greedy)")->transform(int_range(1, 100));
    c->add_option("--length-penalty", a->length_penalty, "GNMT length-penalty alpha")->check(real_range(0, 10));
    c->add_option("--max-len", a->max_len, "most output tokens")->transform(int_range(1, 1000));
    c->add_option("--limit", a->limit, "score only the first N held-out pairs")
        ->transform(int_range(1, 1000000000));
    c->add_option("--batch-size", a->batch, "sentences (or with --batch-type tokens: source tokens) per decoder batch (default 500)")->transform(int_range(1, 100000));
    c->add_option("--show", a->show, "print the first N translations (default 10)")
        ->transform(int_range(0, 1000000000));
    c->add_option("--hyp-out", a->hyp_out, "write the hypotheses, one per line")->check(non_empty_path());
    c->add_option("--json", a->json_out, "write the scores as JSON")->check(non_empty_path());
    c->add_flag("--no-unk", a->no_unk, "never output <unk> (take the best known word instead)");
    c->add_flag("--pe-quirk", a->pe_quirk, "D2L's inference quirk: positional encoding 0 at every step");
    c->add_flag("--no-progress", a->no_progress, "no progress bar");
    add_decode_flags(c, a->decode);
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
