// train_tiny_transformer: D2L's Transformer (qkv::models::Transformer) memorises eight
// English–French pairs with a hand-written training loop (Adam, the masked seq2seq loss, gradient
// clipping), translates them back with greedy decoding, and round-trips the weights through a
// safetensors model file. Public headers only; about a second on two cores.
// Exits 1 when a sentence is not learned or the reloaded model translates differently.
// (train::Trainer in qkv/train/trainer.h runs the same loop with minibatches, validation,
// checkpoints and resume; this program spells it out.)
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/parallel.h"
#include "qkv/data/nmt_data.h"
#include "qkv/data/tokenizer.h"
#include "qkv/data/vocab.h"
#include "qkv/decode/greedy.h"
#include "qkv/models/transformer.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/loss.h"

using namespace qkv;

namespace {

std::string join(const std::vector<std::string>& words) {
    std::string s;
    for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
    return s;
}

// Greedy translations of every source row, as id lists without <eos>.
std::vector<std::vector<int64_t>> translate(models::Transformer& model, const data::NmtArrays& a,
                                            const data::Vocab& tgt_vocab) {
    decode::GreedyOptions g;
    g.bos = tgt_vocab.bos();
    g.eos = tgt_vocab.eos();
    g.max_len = a.num_steps;
    return decode::greedy_decode(model, from_vector(a.src, {a.n, a.num_steps}),
                                 from_vector(a.src_valid_len, {a.n}), g);
}

}  // namespace

int main() try {
    // Subnormal floats become 0 on every compute thread, as in the qkv program: peaked attention
    // gives gradients in that range, which x86 cores process ~100x slower.
    set_flush_denormal(true);
    // ---- data: D2L's tokenisation ("Go." -> "go ."), vocabularies, padded id arrays ----------
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"Go.", "Va !"},          {"I lost.", "J'ai perdu."},         {"He's calm.", "Il est calme."},
        {"I'm home.", "Je suis chez moi."}, {"We won.", "Nous avons gagné."}, {"Run!", "Cours !"},
        {"Hello!", "Bonjour !"},  {"Thank you.", "Merci."}};
    data::Sentences src, tgt;
    for (const auto& [en, fr] : pairs) {
        src.push_back(data::tokenize_nmt(en));
        tgt.push_back(data::tokenize_nmt(fr));
    }
    data::VocabOptions vo;
    vo.min_freq = 1;  // keep every word (the default 2 would map most of them to <unk>)
    const data::Vocab src_vocab = data::Vocab::build(src, vo), tgt_vocab = data::Vocab::build(tgt, vo);
    // (N, T) row-major int64: source + <eos> padded, decoder input <bos> + label[:-1], label.
    const data::NmtArrays a = data::build_nmt_arrays(src, tgt, src_vocab, tgt_vocab, /*num_steps=*/8);
    const Tensor src_ids = from_vector(a.src, {a.n, a.num_steps});
    const Tensor src_len = from_vector(a.src_valid_len, {a.n});
    const Tensor dec_in  = from_vector(a.dec_input, {a.n, a.num_steps});
    const Tensor label   = from_vector(a.label, {a.n, a.num_steps});

    // ---- model: a small Transformer (C 32, 2+2 blocks, 4 heads), no dropout ------------------
    models::TransformerConfig cfg;
    cfg.src_vocab_size  = src_vocab.size();
    cfg.tgt_vocab_size  = tgt_vocab.size();
    cfg.num_hiddens     = 32;
    cfg.num_blks        = 2;
    cfg.num_heads       = 4;
    cfg.ffn_num_hiddens = 64;
    cfg.dropout         = 0.0;
    manual_seed(0);  // parameter init draws from the default generator
    models::Transformer model(cfg);
    std::printf("Transformer with %lld parameters, vocabularies %lld / %lld\n",
                (long long)model.num_parameters(), (long long)src_vocab.size(), (long long)tgt_vocab.size());

    // ---- training: the whole toy set is one batch --------------------------------------------
    optim::Adam adam(model.parameters(), /*lr=*/0.005);
    train::Seq2SeqLossOptions lo;
    lo.pad = tgt_vocab.pad();  // mean cross-entropy over the real target tokens (<eos> included)
    model.train();
    double loss = 0;
    for (int step = 1; step <= 120; ++step) {
        adam.zero_grad();
        const train::Seq2SeqLoss r = train::seq2seq_loss(model, src_ids, src_len, dec_in, label, lo);
        r.loss.backward();
        optim::clip_grad_norm(model.parameters(), /*max_norm=*/1.0);
        adam.step();
        loss = r.loss.item();
        if (step % 30 == 0) std::printf("step %3d  loss %.4f\n", step, loss);
    }

    // ---- greedy decoding: every pair must come back exactly ----------------------------------
    model.eval();
    const auto out = translate(model, a, tgt_vocab);
    int learned = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
        const bool ok = tgt_vocab.decode(out[i]) == tgt[i];
        learned += ok ? 1 : 0;
        std::printf("  %-12s -> %-20s %s\n", pairs[i].first.c_str(), join(tgt_vocab.decode(out[i])).c_str(),
                    ok ? "" : ("(expected " + join(tgt[i]) + ")").c_str());
    }

    // ---- model file: save, load into a fresh model, translate the same -----------------------
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("qkv_example_" + std::to_string(::getpid()) + ".safetensors")).string();
    train::save_model(path, model);  // PyTorch state_dict names, F32, loadable by safetensors.torch
    models::Transformer reloaded(cfg);
    train::load_model(path, reloaded);  // strict: every name and shape must match
    std::filesystem::remove(path);
    reloaded.eval();
    const bool same = translate(reloaded, a, tgt_vocab) == out;

    std::printf("final loss %.4f, %d of %zu pairs learned, reloaded model %s\n", loss, learned, pairs.size(),
                same ? "translates the same" : "TRANSLATES DIFFERENTLY");
    return learned == int(pairs.size()) && same ? 0 : 1;
} catch (const Error& e) {  // qkv::Error names the argument, shape or file at fault
    std::fprintf(stderr, "train_tiny_transformer: error: %s\n", e.what());
    return 1;
}
