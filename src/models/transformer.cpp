// D2L's Transformer: encoder/decoder blocks composed from nn/attention.h modules, teacher-forced
// forward, and incremental decoding: the same decoder blocks with an nn::KVCache per attention.
#include "qkv/models/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/quantize.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::models {

namespace {

/// D2L's encoder and decoder stacks: "embedding", "pos_encoding", then "blks.0" ... blocks,
/// registered in that order (the state_dict's order and names) through `reg` (the stack's
/// register_module).
template <class Block, class Register>
void build_stack(const TransformerConfig& cfg, int64_t vocab_size, Register reg, std::shared_ptr<nn::Embedding>& embedding,
                 std::shared_ptr<nn::PositionalEncoding>& pos_encoding, std::vector<std::shared_ptr<Block>>& blks) {
    embedding    = reg("embedding", std::make_shared<nn::Embedding>(vocab_size, cfg.num_hiddens));
    pos_encoding = reg("pos_encoding", std::make_shared<nn::PositionalEncoding>(cfg.num_hiddens, cfg.dropout, cfg.max_len));
    for (int64_t i = 0; i < cfg.num_blks; ++i) blks.push_back(reg("blks." + std::to_string(i), std::make_shared<Block>(cfg)));
}

nn::MultiHeadAttentionConfig mha_config(const TransformerConfig& cfg) {
    nn::MultiHeadAttentionConfig m;
    m.num_hiddens = cfg.num_hiddens;
    m.num_heads   = cfg.num_heads;
    m.dropout     = cfg.dropout;
    m.bias        = false;  // D2L: bias=False in every attention projection
    return m;
}

void check_config(const TransformerConfig& c) {
    QKV_CHECK(c.src_vocab_size > 0 && c.tgt_vocab_size > 0,
              "Transformer: vocabulary sizes must be positive, got src ", c.src_vocab_size, ", tgt ",
              c.tgt_vocab_size);
    QKV_CHECK(c.num_hiddens > 0 && c.num_blks > 0 && c.num_heads > 0 && c.ffn_num_hiddens > 0,
              "Transformer: num_hiddens, num_blks, num_heads and ffn_num_hiddens must be positive, "
              "got ", c.num_hiddens, ", ", c.num_blks, ", ", c.num_heads, ", ", c.ffn_num_hiddens);
    QKV_CHECK(c.num_hiddens % c.num_heads == 0, "Transformer: num_heads (", c.num_heads,
              ") must divide num_hiddens (", c.num_hiddens, ")");
    QKV_CHECK(c.dropout >= 0 && c.dropout < 1, "Transformer: dropout must be in [0, 1), got ",
              c.dropout);
    QKV_CHECK(c.max_len > 0, "Transformer: max_len must be positive, got ", c.max_len);
}

void check_ids(const Tensor& ids, const char* what) {
    QKV_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::i64, "Transformer: ", what,
              " must be int64 (B, T), got ",
              ids.defined() ? std::string(dtype_name(ids.dtype())) : std::string("undefined"), " ",
              ids.defined() ? ids.shape() : Shape{});
}

void check_valid_len(const Tensor& vl, int64_t B) {
    QKV_CHECK(vl.defined() && vl.dim() == 1 && vl.shape()[0] == B && vl.dtype() == DType::i64,
              "Transformer: src_valid_len must be int64 (B) with B = ", B, ", got ",
              vl.defined() ? vl.shape() : Shape{});
}

}  // namespace

// ---- encoder --------------------------------------------------------------------------------------

TransformerEncoderBlock::TransformerEncoderBlock(const TransformerConfig& cfg) {
    attention = register_module("attention", std::make_shared<nn::MultiHeadAttention>(mha_config(cfg)));
    addnorm1  = register_module("addnorm1", std::make_shared<nn::AddNorm>(Shape{cfg.num_hiddens}, cfg.dropout));
    ffn       = register_module("ffn", std::make_shared<nn::PositionWiseFFN>(
                                         cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_hiddens));
    addnorm2  = register_module("addnorm2", std::make_shared<nn::AddNorm>(Shape{cfg.num_hiddens}, cfg.dropout));
}

Tensor TransformerEncoderBlock::forward(const Tensor& X, const Tensor& valid_lens, const nn::RowPacking* rows) {
    Tensor Y = addnorm1->forward(X, attention->forward(X, X, X, valid_lens, false, {rows, rows}));
    return addnorm2->forward(Y, ffn->forward(Y));
}

TransformerEncoder::TransformerEncoder(const TransformerConfig& cfg) : num_hiddens(cfg.num_hiddens) {
    build_stack(cfg, cfg.src_vocab_size, [this](const std::string& n, auto m) { return register_module(n, std::move(m)); },
                embedding, pos_encoding, blks);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& valid_lens, const nn::RowPacking* rows) {
    // Embedding values are N(0, 1) and PE values lie in [-1, 1]: scale by √C first (D2L 11.7).
    Tensor X = pos_encoding->forward(mul(embedding->forward(src), std::sqrt(double(num_hiddens))));
    if (rows) X = rows->pack(X);
    for (auto& blk : blks) X = blk->forward(X, valid_lens, rows);
    return X;
}

// ---- decoder --------------------------------------------------------------------------------------

TransformerDecoderBlock::TransformerDecoderBlock(const TransformerConfig& cfg) {
    const Shape ns{cfg.num_hiddens};
    attention1 = register_module("attention1", std::make_shared<nn::MultiHeadAttention>(mha_config(cfg)));
    addnorm1   = register_module("addnorm1", std::make_shared<nn::AddNorm>(ns, cfg.dropout));
    attention2 = register_module("attention2", std::make_shared<nn::MultiHeadAttention>(mha_config(cfg)));
    addnorm2   = register_module("addnorm2", std::make_shared<nn::AddNorm>(ns, cfg.dropout));
    ffn        = register_module("ffn", std::make_shared<nn::PositionWiseFFN>(
                                          cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_hiddens));
    addnorm3   = register_module("addnorm3", std::make_shared<nn::AddNorm>(ns, cfg.dropout));
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, const Tensor& enc_outputs,
                                        const Tensor& enc_valid_lens, const nn::RowPacking* rows,
                                        const nn::RowPacking* enc_rows, DecoderBlockCache* cache) {
    // Causal self-attention: D2L's training-time dec_valid_lens = [1..Tt] is the top-left causal
    // mask. Unlike D2L EN, the mask stays on in eval mode (spec §1.9 quirk 2 is not reproduced).
    Tensor a1, a2;
    if (cache) {
        QKV_CHECK(rows == nullptr && enc_rows == nullptr,
                  "TransformerDecoderBlock: a cached forward takes padded inputs only");
        nn::AttentionCall call;
        call.causal  = CausalAlign::top_left;  // bottom-right over the cache (MultiHeadAttention)
        call.cache   = &cache->self;
        call.weights = cache->record ? &cache->self_weights : nullptr;
        a1 = attention1->forward(X, X, X, call);
    } else {
        a1 = attention1->forward(X, X, X, Tensor(), /*causal=*/true, {rows, rows});
    }
    Tensor Y = addnorm1->forward(X, a1);
    if (cache) {
        nn::AttentionCall call;
        call.valid_lens = enc_valid_lens;
        call.cache      = &cache->cross;
        call.weights    = cache->record ? &cache->cross_weights : nullptr;
        a2 = attention2->forward(Y, enc_outputs, enc_outputs, call);
    } else {
        a2 = attention2->forward(Y, enc_outputs, enc_outputs, enc_valid_lens, false, {rows, enc_rows});
    }
    Tensor Z = addnorm2->forward(Y, a2);
    return addnorm3->forward(Z, ffn->forward(Z));
}

void TransformerDecoderBlock::cache_encoder(const Tensor& enc_outputs, DecoderBlockCache& cache) const {
    cache.self.clear();
    attention2->cache_memory(enc_outputs, enc_outputs, cache.cross);
}

TransformerDecoder::TransformerDecoder(const TransformerConfig& cfg) : num_hiddens(cfg.num_hiddens) {
    build_stack(cfg, cfg.tgt_vocab_size, [this](const std::string& n, auto m) { return register_module(n, std::move(m)); },
                embedding, pos_encoding, blks);
    dense = register_module("dense", std::make_shared<nn::Linear>(cfg.num_hiddens, cfg.tgt_vocab_size));
}

Tensor TransformerDecoder::forward_hidden(const Tensor& tgt, const Tensor& enc_outputs,
                                          const Tensor& enc_valid_lens, const nn::RowPacking* rows,
                                          const nn::RowPacking* enc_rows, std::vector<DecoderBlockCache>* caches,
                                          int64_t pe_offset) {
    QKV_CHECK(!caches || caches->size() == blks.size(), "TransformerDecoder: ", caches ? caches->size() : 0,
              " block caches for ", blks.size(), " blocks");
    Tensor X = pos_encoding->forward(mul(embedding->forward(tgt), std::sqrt(double(num_hiddens))), pe_offset);
    if (rows) X = rows->pack(X);
    for (size_t i = 0; i < blks.size(); ++i)
        X = blks[i]->forward(X, enc_outputs, enc_valid_lens, rows, enc_rows, caches ? &(*caches)[i] : nullptr);
    return X;
}

// ---- the model ------------------------------------------------------------------------------------

Transformer::Transformer(const TransformerConfig& cfg) : cfg_(cfg) {
    check_config(cfg);
    QKV_CHECK(!cfg.tie_weights || cfg.src_vocab_size == cfg.tgt_vocab_size,
              "Transformer: tie_weights needs one shared vocabulary (--shared-vocab), got src ",
              cfg.src_vocab_size, " and tgt ", cfg.tgt_vocab_size, " tokens");
    encoder = register_module("encoder", std::make_shared<TransformerEncoder>(cfg));
    decoder = register_module("decoder", std::make_shared<TransformerDecoder>(cfg));
    if (cfg.tie_weights) {
        // One (V, C) matrix, N(0, 1/C) (Vaswani et al. 2017 §3.4), drawn after the untied init.
        Tensor w = nn::normal_init({cfg.tgt_vocab_size, cfg.num_hiddens}, 0.0,
                                   1.0 / std::sqrt(double(cfg.num_hiddens)));
        encoder->embedding->tie_parameter("weight", w);
        encoder->embedding->weight = w;
        decoder->embedding->tie_parameter("weight", w);
        decoder->embedding->weight = w;
        decoder->dense->tie_parameter("weight", w);
        decoder->dense->weight = w;
    }
}

Tensor Transformer::forward_hidden(const Tensor& src, const Tensor& src_valid_len,
                                   const Tensor& dec_input) {
    check_ids(src, "src");
    check_ids(dec_input, "dec_input");
    check_valid_len(src_valid_len, src.size(0));
    QKV_CHECK(dec_input.size(0) == src.size(0), "Transformer: src ", src.shape(), " and dec_input ",
              dec_input.shape(), " differ in batch size");
    QKV_CHECK(src.size(1) <= cfg_.max_len && dec_input.size(1) <= cfg_.max_len,
              "Transformer: sequences longer than max_len = ", cfg_.max_len, ": src ", src.shape(),
              ", dec_input ", dec_input.shape());
    Tensor enc = encoder->forward(src, src_valid_len);
    return decoder->forward_hidden(dec_input, enc, src_valid_len);
}

// ---- the pad-free training path ----------------------------------------------------------------

Tensor Transformer::forward_hidden_rows(const Tensor& src, const Tensor& src_valid_len,
                                        const Tensor& dec_input, const Tensor& rows) {
    check_ids(src, "src");
    check_ids(dec_input, "dec_input");
    check_valid_len(src_valid_len, src.size(0));
    const int64_t B = src.size(0), Ts = src.size(1), Tt = dec_input.size(1);
    QKV_CHECK(dec_input.size(0) == B, "Transformer: src ", src.shape(), " and dec_input ", dec_input.shape(),
              " differ in batch size");
    detail::check_hidden_rows(rows, B * Tt);
    bool keeps = false;
    for (auto& b : encoder->blks) keeps = keeps || b->attention->keeps_attention_weights();
    for (auto& b : decoder->blks)
        keeps = keeps || b->attention1->keeps_attention_weights() || b->attention2->keeps_attention_weights();
    std::vector<int64_t> slen = src_valid_len.to_vector<int64_t>();
    bool empty_source = false;
    for (int64_t& l : slen) {
        l = std::clamp<int64_t>(l, 0, Ts);
        empty_source = empty_source || l == 0;
    }
    // A source with no valid position makes D2L's masked softmax average over all (pad) keys:
    // their values matter then, so keep them.
    if (keeps || empty_source) return EncoderDecoder::forward_hidden_rows(src, src_valid_len, dec_input, rows);
    QKV_CHECK(Ts <= cfg_.max_len && Tt <= cfg_.max_len, "Transformer: sequences longer than max_len = ",
              cfg_.max_len, ": src ", src.shape(), ", dec_input ", dec_input.shape());

    const std::vector<int64_t> r = rows.to_vector<int64_t>();
    std::vector<int64_t> dlen(size_t(B), 0);
    for (int64_t x : r) dlen[size_t(x / Tt)] = std::max(dlen[size_t(x / Tt)], x % Tt + 1);
    const nn::RowPacking sp(std::move(slen), Ts), dp(std::move(dlen), Tt);
    const Tensor enc = encoder->forward(src, src_valid_len, &sp);
    const Tensor dec = decoder->forward_hidden(dec_input, enc, src_valid_len, &dp, &sp);
    if (dp.rows() == int64_t(r.size())) return dec;  // the requested rows are the kept prefixes
    // Position of each requested row among the kept rows (both increasing).
    const std::vector<int64_t> kept = dp.index().to_vector<int64_t>();
    std::vector<int64_t> pos(r.size());
    size_t j = 0;
    for (size_t i = 0; i < r.size(); ++i) {
        while (kept[j] != r[i]) ++j;
        pos[i] = int64_t(j);
    }
    return index_select(dec, 0, from_vector(pos, {int64_t(pos.size())}));
}

Tensor Transformer::output_logits(const Tensor& hidden) { return decoder->dense->forward(hidden); }

void Transformer::keep_attention_weights(bool on) {
    for (auto& b : encoder->blks) b->attention->keep_attention_weights(on);
    for (auto& b : decoder->blks) {
        b->attention1->keep_attention_weights(on);
        b->attention2->keep_attention_weights(on);
    }
}

// ---- incremental decoding ---------------------------------------------------------------------------

namespace {

/// The decoder blocks' caches (nn::KVCache self- and cross-attention keys/values) and the source
/// lengths the cross-attention masks with.
class TransformerState : public DecoderState {
public:
    std::vector<DecoderBlockCache> blks;
    Tensor enc_valid_lens;  // (B) i64
    int64_t t = 0;          // positions decoded so far

    void reorder(const Tensor& index) override {
        QKV_CHECK(index.defined() && index.dim() == 1 && index.dtype() == DType::i64,
                  "DecoderState::reorder: index must be int64 (B'), got ",
                  index.defined() ? index.shape() : Shape{});
        NoGradGuard ng;
        enc_valid_lens = index_select(enc_valid_lens, 0, index);  // throws on an out-of-range row
        for (auto& b : blks) b.reorder(index);
    }
    int64_t steps() const override { return t; }
    int64_t batch_size() const override { return enc_valid_lens.size(0); }
};

}  // namespace

std::unique_ptr<DecoderState> Transformer::init_state(const Tensor& src, const Tensor& src_valid_len) {
    check_ids(src, "src");
    check_valid_len(src_valid_len, src.size(0));
    QKV_CHECK(src.size(1) <= cfg_.max_len, "Transformer: source longer than max_len = ", cfg_.max_len,
              ": ", src.shape());
    NoGradGuard ng;
    auto st = std::make_unique<TransformerState>();
    st->enc_valid_lens = src_valid_len.contiguous();
    // Trailing source columns past every row's valid length only ever act as masked keys, and the
    // positional encoding is absolute, so dropping them changes no output of a real position;
    // a batch of similar lengths (translate_tokens sorts them) then skips most of its padding.
    int64_t keep = 1;
    for (int64_t v : st->enc_valid_lens.to_vector<int64_t>()) keep = std::max(keep, v);
    const Tensor src_used = keep < src.size(1) ? src.slice(1, 0, keep).contiguous() : src;
    Tensor enc = encoder->forward(src_used, src_valid_len);
    st->blks.resize(decoder->blks.size());
    for (size_t i = 0; i < decoder->blks.size(); ++i) decoder->blks[i]->cache_encoder(enc, st->blks[i]);
    return st;
}

Tensor Transformer::decode_step_hidden(const Tensor& tokens, DecoderState& state_base) {
    auto* st = dynamic_cast<TransformerState*>(&state_base);
    QKV_CHECK(st != nullptr, "Transformer::decode_step: the state was not made by Transformer::init_state");
    const int64_t B = st->batch_size();
    QKV_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.size(0) == B && tokens.dtype() == DType::i64,
              "Transformer::decode_step: tokens must be int64 (B) with B = ", B, ", got ",
              tokens.defined() ? tokens.shape() : Shape{});
    const int64_t pos = cfg_.pe_position_zero_at_inference ? 0 : st->t;
    QKV_CHECK(pos < cfg_.max_len, "Transformer::decode_step: position ", pos, " reaches max_len ",
              cfg_.max_len);
    NoGradGuard ng;
    DecoderAttentionTrace* trace = st->trace;
    for (auto& c : st->blks) c.record = trace != nullptr;
    // The teacher-forced decoder on one position, with the blocks' caches.
    const Tensor X = decoder->forward_hidden(tokens.reshape({B, 1}), Tensor(), st->enc_valid_lens, nullptr, nullptr,
                                             &st->blks, pos);
    if (trace) {
        trace->self.emplace_back();
        trace->cross.emplace_back();
        for (auto& c : st->blks) {
            trace->self.back().push_back(c.self_weights);
            trace->cross.back().push_back(c.cross_weights);
            c.self_weights = c.cross_weights = Tensor();
        }
    }
    st->t += 1;
    return X.reshape({B, cfg_.num_hiddens});
}

}  // namespace qkv::models
