// What `qkv train` prints after training (train_output.h).
#include "train_output.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/core/allocator.h"
#include "qkv/decode/bleu.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translate.h"
#include "qkv/util/progress.h"
#include "qkv/util/timer.h"

namespace qkv::cli {

namespace fs = std::filesystem;

void print_samples(runtime::ModelDir& m, const runtime::TranslationData& d, int n) {
    std::vector<std::vector<std::string>> src(d.test_src.begin(),
                                              d.test_src.begin() + std::min<size_t>(size_t(n), d.test_src.size()));
    runtime::TranslateOptions to;
    to.max_len = m.config.decode.max_len;
    auto hyp = runtime::translate_tokens(m, src, to);
    std::printf("held-out translations (greedy):\n");
    for (size_t i = 0; i < hyp.size(); ++i)
        std::printf("  %s => %s   [ref: %s]\n", runtime::join_tokens(src[i]).c_str(),
                    runtime::join_tokens(hyp[i]).c_str(), runtime::join_tokens(d.test_ref[i]).c_str());
    // The book's pairs are en→fr.
    if (runtime::source_language(m.config.data) != "en" || runtime::target_language(m.config.data) != "fr") return;
    const auto book = runtime::book_pairs(m);
    std::vector<std::vector<std::string>> bsrc;
    for (auto& [e, f] : book) bsrc.push_back(runtime::tokenize_sentences(m, {e}).front());
    auto bhyp = runtime::translate_tokens(m, bsrc, to);
    double mean = 0;
    std::printf("book sentences (D2L BLEU, k=2):\n");
    for (size_t i = 0; i < book.size(); ++i) {
        const std::string h = runtime::join_tokens(bhyp[i]);
        const double b = decode::d2l_bleu(h, book[i].second, 2);
        mean += b / double(book.size());
        std::printf("  %s => %s, bleu %.3f\n", book[i].first.c_str(), h.c_str(), b);
    }
    std::printf("  mean bleu %.3f\n", mean);
}

void print_summary(const train::TrainResult& r, const std::string& out, const char* files) {
    char last[96] = "no epoch ended in this call";  // a resume that only completed metrics.jsonl
    if (!r.epochs.empty())
        std::snprintf(last, sizeof last, "last epoch train loss %.4f, val loss %.4f", r.epochs.back().train_loss,
                      r.epochs.back().val_loss);
    std::printf("trained %lld steps in %s (stopped: %s); %s; %.0f target tokens/s; peak RSS %.0f MiB\n",
                (long long)r.steps, util::format_duration(r.train_seconds).c_str(), r.stop_reason.c_str(), last,
                r.tokens_per_s, double(util::peak_rss_bytes()) / (1024.0 * 1024.0));
    const AllocatorStats as = allocator_stats();
    const double mib = 1024.0 * 1024.0;
    std::printf("tensor memory: peak in use %.0f MiB, peak cached %.0f MiB, peak in use + cached %.0f MiB, "
                "cache limit %.0f MiB; %lld of %lld allocations fresh from the system, %lld evictions\n",
                double(as.peak_bytes) / mib, double(as.peak_cached) / mib, double(as.peak_reserved) / mib,
                double(allocator_cache_limit()) / mib, (long long)as.system_allocs, (long long)as.allocs,
                (long long)as.evictions);
    std::printf("model folder: %s (%s)\n", out.c_str(), files);
}

/// Before the summary: "nothing to do" (true: the folder stays as it is, exit 0), a run that put
/// an overwritten run's files back, an LM run stopped before its first checkpoint (exit status).
bool report_early_end(const train::RunResult& r, bool lm) {
    if (!r.nothing_to_do.empty()) {
        std::printf("qkv train: nothing to do: %s\n", r.nothing_to_do.c_str());
        return true;
    }
    if (r.restored_earlier) throw ExitStatus{r.signal != 0 ? 128 + r.signal : 1};
    if (lm && !r.trained) {  // stopped before the first checkpoint: the run removed what it wrote
        std::fprintf(stderr, "qkv train: interrupted (%s) before the first checkpoint; nothing saved\n",
                     r.signal == SIGINT ? "SIGINT" : r.signal == SIGTERM ? "SIGTERM" : "stopped");
        throw ExitStatus{r.signal != 0 ? 128 + r.signal : 1};
    }
    return false;
}

/// After the summary: a caught signal's message (what is saved, the command that continues) and
/// exit status 128 + signal. No samples then: whoever pressed Ctrl-C wants the prompt back.
void report_signal(const train::RunResult& r, const std::string& out, bool lm) {
    if (r.signal == 0) return;
    const char* name = r.signal == SIGINT ? "SIGINT" : "SIGTERM";
    const std::string ckpt = (fs::path(out) / "checkpoint.safetensors").string();
    if (r.train.stop_reason != "interrupted")
        std::fprintf(stderr, "qkv train: %s after training finished (step %lld); the model is saved in %s\n", name,
                     (long long)r.train.steps, out.c_str());
    else if (lm || fs::exists(ckpt))
        std::fprintf(stderr, "qkv train: interrupted (%s) at step %lld; checkpoint saved in %s; continue with: "
                             "qkv train%s --resume --out %s\n",
                     name, (long long)r.train.steps, ckpt.c_str(), lm ? " --model lm" : "", shell_quote(out).c_str());
    else
        std::fprintf(stderr, "qkv train: interrupted (%s) before the first step; nothing saved\n", name);
    std::fflush(stdout);
    throw ExitStatus{128 + r.signal};
}

}  // namespace qkv::cli
