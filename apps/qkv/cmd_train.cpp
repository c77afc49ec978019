// `qkv train`: train D2L's Transformer (or, with --model bahdanau, D2L's GRU encoder–decoder with
// Bahdanau attention) on English–French from a preset plus flag overrides;
// writes the model folder (train/model_dir.h) and ends with a few held-out translations.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/core/allocator.h"
#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/bleu.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_config.h"
#include "qkv/train/trainer.h"
#include "qkv/train/translation_data.h"
#include "qkv/util/progress.h"
#include "qkv/util/timer.h"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
    std::string preset = "demo", model = "transformer";
    std::string data, out = "runs/qkv";
    std::string time_budget;
    std::string schedule;
    bool resume = false, no_progress = false;
    int64_t log_every = 50;
    int64_t num_hiddens = 0, num_blks = 0, num_heads = 0, ffn_num_hiddens = 0, batch_size = 0,
            num_steps = 0, epochs = 0, max_pairs = 0, max_steps = 0, warmup = 0, max_src_tokens = 0,
            max_tgt_tokens = 0, n_test = 0, n_valid = 0, min_freq = 0, embed_size = 0, num_layers = 0,
            bucket_pool = -1;
    std::string trim, val_every;
    std::string subword;
    int64_t vocab_size = 0;
    bool shared_vocab = false, tie_weights = false;
    double dropout = -1, lr = 0, label_smoothing = -1, clip = -1;
    uint64_t seed = 0;
    CLI::Option *o_seed = nullptr, *o_dropout = nullptr, *o_ls = nullptr, *o_clip = nullptr,
                *o_lop = nullptr, *o_strict = nullptr, *o_quirk = nullptr;
    bool loss_on_padding = false, strict = false, pe_quirk = false;
};

void print_samples(train::ModelDir& m, const train::TranslationData& d, int n) {
    std::vector<std::vector<std::string>> src(d.test_src.begin(),
                                              d.test_src.begin() + std::min<size_t>(size_t(n), d.test_src.size()));
    train::TranslateOptions to;
    to.max_len = m.config.decode.max_len;
    auto hyp = train::translate_tokens(m, src, to);
    std::printf("held-out translations (greedy):\n");
    for (size_t i = 0; i < hyp.size(); ++i)
        std::printf("  %s => %s   [ref: %s]\n", train::join_tokens(src[i]).c_str(),
                    train::join_tokens(hyp[i]).c_str(), train::join_tokens(d.test_ref[i]).c_str());
    const std::vector<std::pair<std::string, std::string>> book = {
        {"go .", "va !"}, {"i lost .", "j'ai perdu ."}, {"he's calm .", "il est calme ."},
        {"i'm home .", "je suis chez moi ."}};
    std::vector<std::vector<std::string>> bsrc;
    for (auto& [e, f] : book) bsrc.push_back(data::split_tokens(e));
    auto bhyp = train::translate_tokens(m, bsrc, to);
    double mean = 0;
    std::printf("book sentences (D2L BLEU, k=2):\n");
    for (size_t i = 0; i < book.size(); ++i) {
        const std::string h = train::join_tokens(bhyp[i]);
        const double b = decode::d2l_bleu(h, book[i].second, 2);
        mean += b / double(book.size());
        std::printf("  %s => %s, bleu %.3f\n", book[i].first.c_str(), h.c_str(), b);
    }
    std::printf("  mean bleu %.3f\n", mean);
}

void run(TrainArgs& a) {
    util::Timer wall;
    const std::string ckpt = (fs::path(a.out) / "checkpoint.safetensors").string();
    train::RunConfig cfg;
    if (a.resume) {
        QKV_CHECK(fs::exists(ckpt), "--resume: no checkpoint at '", ckpt, "'");
        cfg = train::load_model_dir_config(a.out);
        cfg.data = train::model_data_config(a.out, cfg, a.data);
    } else {
        cfg = train::preset_config(a.preset, train::parse_model_kind(a.model));
    }
    // Flag overrides (on resume only the stopping rules and the data path may change).
    if (!a.resume && !a.data.empty()) cfg.data.path = a.data;
    if (a.epochs) cfg.train.epochs = a.epochs;
    if (a.max_steps) cfg.train.max_steps = a.max_steps;
    if (!a.time_budget.empty()) cfg.train.time_budget_s = parse_duration_or_off(a.time_budget);
    if (!a.resume) {
        auto& d = cfg.data;
        auto& m = cfg.model;
        auto& t = cfg.train;
        if (a.num_steps) d.num_steps = a.num_steps;
        if (a.max_pairs) d.max_pairs = a.max_pairs;
        if (a.max_src_tokens) d.max_src_tokens = a.max_src_tokens;
        if (a.max_tgt_tokens) d.max_tgt_tokens = a.max_tgt_tokens;
        if (a.n_test) d.n_test = a.n_test;
        if (a.n_valid) d.n_valid = a.n_valid;
        if (a.min_freq) d.min_freq = a.min_freq;
        if (a.o_strict->count()) d.strict = true;
        if (a.num_hiddens) m.num_hiddens = a.num_hiddens;
        if (a.num_blks) m.num_blks = a.num_blks;
        if (a.num_heads) m.num_heads = a.num_heads;
        if (a.ffn_num_hiddens) m.ffn_num_hiddens = a.ffn_num_hiddens;
        if (a.o_dropout->count()) m.dropout = a.dropout;
        auto& b = cfg.bahdanau;
        if (a.num_hiddens) b.num_hiddens = a.num_hiddens;
        if (a.embed_size) b.embed_size = a.embed_size;
        if (a.num_layers) b.num_layers = a.num_layers;
        if (a.o_dropout->count()) b.dropout = a.dropout;
        if (a.o_quirk->count()) m.pe_position_zero_at_inference = true;
        if (a.batch_size) t.batch_size = a.batch_size;
        if (a.lr > 0) t.lr = a.lr;
        if (a.o_seed->count()) t.seed = a.seed;
        if (a.o_ls->count()) t.label_smoothing = a.label_smoothing;
        if (a.o_clip->count()) t.clip_norm = a.clip;
        if (a.o_lop->count()) t.loss_on_padding = true;
        if (!a.schedule.empty()) t.schedule = train::parse_schedule(a.schedule);
        if (a.warmup) t.warmup_steps = a.warmup;
        if (a.bucket_pool >= 0) t.bucket_pool = a.bucket_pool;
        if (!a.trim.empty()) t.trim_batches = a.trim == "on";
        if (!a.val_every.empty()) t.val_every_s = parse_duration_or_off(a.val_every);
        if (t.schedule != optim::LrSchedule::constant && t.warmup_steps == 0) t.warmup_steps = 400;
        const bool preset_subword = d.subword != data::SubwordKind::none;  // the full preset
        if (!a.subword.empty()) d.subword = data::parse_subword_kind(a.subword);
        if (preset_subword && d.subword == data::SubwordKind::none) {
            // `--preset full --subword none`: the same recipe on D2L words, untied (unless the
            // flags ask for a shared vocabulary / tying), with the anchor's word lengths.
            d.shared_vocab = false, m.tie_weights = false;
            if (!a.num_steps) d.num_steps = 12;
            cfg.decode.max_len = 20;
        }
        if (a.vocab_size) d.subword_vocab_size = a.vocab_size;
        if (a.shared_vocab) d.shared_vocab = true;
        if (a.tie_weights) m.tie_weights = true;
        QKV_CHECK(a.vocab_size == 0 || d.subword != data::SubwordKind::none,
                  "--vocab-size applies to subword vocabularies: add --subword bpe or --subword unigram");
        QKV_CHECK(!m.tie_weights || d.shared_vocab,
                  "--tie-weights needs one vocabulary for both languages: add --shared-vocab");
        QKV_CHECK(!m.tie_weights || cfg.architecture == train::ModelKind::transformer,
                  "--tie-weights applies to the Transformer only (not --model bahdanau)");
        QKV_CHECK((d.subword == data::SubwordKind::none && !d.shared_vocab) || d.pipeline == train::DataPipeline::anchor,
                  "--subword and --shared-vocab need the anchor pipeline (presets demo, full, anchor), not --preset ",
                  cfg.preset);
        if (d.subword != data::SubwordKind::none && !preset_subword && !a.num_steps) {
            // Full data, shared BPE 8000: 1.17 / 1.29 pieces per word (source / target), and the
            // long tail splits more: at 12 words 0.99% / 1.76% of the train pairs are cut, at 16
            // pieces 3.0% / 7.6%. Two thirds more steps (12 -> 20) for about the same pairs whole
            // (the data line reports the fractions); trimmed batches make the extra length free
            // for the short pairs. Decoding may run half as long again.
            d.num_steps += 2 * d.num_steps / 3;
            cfg.decode.max_len += cfg.decode.max_len / 2;
        }
    }

    std::fprintf(stderr, "qkv train: preset %s, %d threads\n", cfg.preset.empty() ? "-" : cfg.preset.c_str(),
                 get_num_threads());
    train::SubwordModels saved_subwords;
    if (a.resume) saved_subwords = train::load_model_dir_subwords(a.out, cfg);
    train::TranslationData d = train::load_translation_data(cfg.data, saved_subwords);
    cfg.data.path = fs::weakly_canonical(d.origin).string();  // eval may run in another folder
    std::fprintf(stderr, "data: %s\n", d.summary.c_str());
    std::fprintf(stderr, "vocabularies: source %lld, target %lld tokens\n", (long long)d.src_vocab.size(),
                 (long long)d.tgt_vocab.size());
    if (a.resume) {
        auto saved = train::load_model_dir_vocabs(a.out);
        QKV_CHECK(saved.first == d.src_vocab && saved.second == d.tgt_vocab,
                  "--resume: the data gives other vocabularies than the ones saved in '", a.out,
                  "' (different data file or filters)");
    }
    cfg.model.src_vocab_size = d.src_vocab.size();
    cfg.model.tgt_vocab_size = d.tgt_vocab.size();
    if (!a.resume) train::write_run_files(a.out, cfg, d.src_vocab, d.tgt_vocab, d.subwords);

    manual_seed(cfg.train.seed);  // init and dropout draw from the default generator
    auto model = train::build_model(cfg);
    std::fprintf(stderr, "model: %s\n", train::describe_model(cfg, *model).c_str());
    std::fprintf(stderr, "training: batch %lld, lr %g, %lld epochs%s%s, loss %s\n",
                 (long long)cfg.train.batch_size, cfg.train.lr, (long long)cfg.train.epochs,
                 cfg.train.time_budget_s > 0
                     ? (", budget " + util::format_duration(cfg.train.time_budget_s)).c_str() : "",
                 cfg.train.max_steps > 0 ? (", max " + std::to_string(cfg.train.max_steps) + " steps").c_str() : "",
                 cfg.train.loss_on_padding ? "on all positions (D2L EN)" : "on real tokens");

    train::TrainRuntime rt;
    rt.out_dir  = a.out;
    rt.resume   = a.resume;
    rt.progress = !a.no_progress;
    rt.log_every = a.log_every;
    rt.checkpoint_metadata["qkv.config"] = train::to_json(cfg).dump();
    train::Trainer trainer(*model, d.train, d.valid, d.tgt_vocab.pad(), cfg.train, rt);
    train::TrainResult r = trainer.fit();
    // The stopping rules given for this call are not part of the model's config.
    train::write_run_files(a.out, cfg, d.src_vocab, d.tgt_vocab, d.subwords);

    const double final_loss = r.epochs.empty() ? 0.0 : r.epochs.back().train_loss;
    std::printf("trained %lld steps in %s (stopped: %s); last epoch train loss %.4f, val loss %.4f; "
                "%.0f target tokens/s; peak RSS %.0f MiB\n",
                (long long)r.steps, util::format_duration(r.train_seconds).c_str(), r.stop_reason.c_str(),
                final_loss, r.epochs.empty() ? 0.0 : r.epochs.back().val_loss, r.tokens_per_s,
                double(util::peak_rss_bytes()) / (1024.0 * 1024.0));
    const AllocatorStats as = allocator_stats();
    std::printf("tensor memory: peak in use %.0f MiB, peak cached %.0f MiB, peak in use + cached %.0f MiB, "
                "cache limit %.0f MiB; %lld of %lld allocations fresh from the system, %lld evictions\n",
                double(as.peak_bytes) / (1024.0 * 1024.0), double(as.peak_cached) / (1024.0 * 1024.0),
                double(as.peak_reserved) / (1024.0 * 1024.0),
                double(allocator_cache_limit()) / (1024.0 * 1024.0), (long long)as.system_allocs,
                (long long)as.allocs, (long long)as.evictions);
    std::printf("model folder: %s (model.safetensors, config.json, vocabularies, metrics.jsonl, loss.png)\n",
                a.out.c_str());
    train::ModelDir m = train::load_model_dir(a.out);
    print_samples(m, d, 8);
    std::printf("total wall time %s\n", util::format_duration(wall.seconds()).c_str());
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<TrainArgs>();
    CLI::App* c = app.add_subcommand("train", "train D2L's Transformer or Bahdanau model on English-French");
    std::string presets;
    for (auto& n : train::preset_names()) presets += (presets.empty() ? "" : "|") + n;
    c->add_option("--preset", a->preset, "configuration to start from: " + presets + " (default demo)")
        ->check(CLI::IsMember(train::preset_names()));
    c->add_option("--model", a->model, "transformer (default) or bahdanau (GRU encoder-decoder with "
                                       "additive attention, D2L 11.4)")
        ->check(CLI::IsMember({"transformer", "bahdanau"}));
    c->add_option("--data", a->data, "fra-eng.zip, fra.txt or a folder (default: $QKV_DATA, then "
                                     "../shared/data/fra-eng.zip)");
    c->add_option("--out", a->out, "output folder (default runs/qkv)");
    c->add_flag("--resume", a->resume, "continue from OUT/checkpoint.safetensors (same losses as an "
                                       "uninterrupted run)");
    c->add_option("--time-budget", a->time_budget,
                  "stop after this much training time, e.g. 20m, 90s, 1h; 'none' (or 'off'): no time "
                  "limit (default: the preset's, 210s for demo, 20m for full and anchor, none for d2l)")
        ->check(duration_or_off());
    c->add_option("--val-every", a->val_every,
                  "also validate every this much training time, e.g. 5m; 'off': at epoch ends only "
                  "(default: the preset's, 5m for full and anchor, else off)")
        ->check(duration_or_off());
    c->add_option("--epochs", a->epochs, "epochs")->check(int_range(1, 1000000));
    c->add_option("--max-steps,--steps", a->max_steps, "stop after this many optimizer steps in total")
        ->check(int_range(1, 1000000000));
    c->add_option("--num-hiddens", a->num_hiddens, "model width C (bahdanau: GRU and attention width H)")
        ->check(int_range(1, 65536));
    c->add_option("--embed-size", a->embed_size, "bahdanau: embedding size E")->check(int_range(1, 65536));
    c->add_option("--num-layers", a->num_layers, "bahdanau: GRU layers")->check(int_range(1, 64));
    c->add_option("--num-blks", a->num_blks, "blocks in the encoder and in the decoder")->check(int_range(1, 64));
    c->add_option("--num-heads", a->num_heads, "attention heads")->check(int_range(1, 1024));
    c->add_option("--ffn-num-hiddens", a->ffn_num_hiddens, "FFN width")->check(int_range(1, 262144));
    a->o_dropout = c->add_option("--dropout", a->dropout, "dropout probability")->check(real_range(0, 0.99));
    c->add_option("--batch-size", a->batch_size, "minibatch size")->check(int_range(1, 100000));
    c->add_option("--num-steps", a->num_steps, "tokens per sequence (truncate/pad; with --subword pieces, "
                                               "default the preset's + 2/3)")->check(int_range(2, 1000));
    c->add_option("--lr", a->lr, "Adam learning rate")->check(real_range(0, 10, /*lo_open=*/true));
    a->o_ls = c->add_option("--label-smoothing", a->label_smoothing, "label smoothing epsilon")
                  ->check(real_range(0, 0.99));
    a->o_clip = c->add_option("--clip", a->clip, "clip gradients to this global norm (0: off; default 1)")
                    ->check(real_range(0, 1e6));
    c->add_option("--schedule", a->schedule, "learning-rate schedule (default: the preset's)")
        ->check(CLI::IsMember({"constant", "warmup_inv_sqrt", "warmup_linear_decay"}));
    c->add_option("--warmup", a->warmup, "warmup steps for the warmup schedules (default 400)")
        ->check(int_range(1, 1000000000));
    c->add_option("--bucket-pool", a->bucket_pool,
                  "length bucketing: sort pools of N batches by pair length, shuffle the batches "
                  "(0: off)")
        ->check(int_range(0, 1000000));
    c->add_option("--trim", a->trim, "on|off: cut each batch to its longest pair (masked loss only; "
                                     "same loss, less padding computed)")
        ->check(CLI::IsMember({"on", "off"}));
    a->o_lop = c->add_flag("--loss-on-padding", a->loss_on_padding,
                           "average the loss over pad positions too (reproduces D2L EN's curves)");
    a->o_quirk = c->add_flag("--pe-quirk", a->pe_quirk,
                             "decode with D2L's position-0 positional encoding at every step");
    c->add_option("--max-pairs", a->max_pairs, "use only the first N (filtered) pairs")
        ->check(int_range(1, 1000000000));
    c->add_option("--max-src-tokens", a->max_src_tokens, "keep pairs with at most N source tokens")
        ->check(int_range(1, 1000));
    c->add_option("--max-tgt-tokens", a->max_tgt_tokens, "keep pairs with at most N target tokens")
        ->check(int_range(1, 1000));
    c->add_option("--subword", a->subword,
                  "none (D2L words, default) | bpe | unigram: SentencePiece subword units learned from "
                  "the train split (BLEU stays on words)")
        ->check(CLI::IsMember({"none", "bpe", "unigram"}));
    c->add_option("--vocab-size", a->vocab_size, "subword vocabulary size, reserved tokens included (default 8000)")
        ->check(int_range(8, 1000000));
    c->add_flag("--shared-vocab", a->shared_vocab,
                "one vocabulary (one SentencePiece model) for English and French");
    c->add_flag("--tie-weights", a->tie_weights,
                "Transformer: one matrix for source/target embeddings and the output layer "
                "(needs --shared-vocab)");
    c->add_option("--min-freq", a->min_freq, "vocabulary: keep words seen at least N times in training")
        ->check(int_range(1, 1000000000));
    c->add_option("--test-pairs", a->n_test, "held-out test pairs (default 5000)")
        ->check(int_range(1, 100000000));
    c->add_option("--valid-pairs", a->n_valid, "validation pairs")->check(int_range(1, 100000000));
    a->o_strict = c->add_flag("--strict", a->strict, "a malformed data line is an error (default: skipped)");
    a->o_seed = c->add_option("--seed", a->seed, "seed for init, dropout and batch order (default 0; the split keeps seed 0)");
    c->add_flag("--no-progress", a->no_progress, "no progress bar");
    c->add_option("--log-every", a->log_every, "metrics.jsonl: mean train loss every N steps (default 50; 0: none)")
        ->check(int_range(0, 1000000000));
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
