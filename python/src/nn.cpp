// qkv.nn: D2L's attention modules and models over nn::Module (state_dict / load_state_dict from
// numpy arrays, qkv tensors or a safetensors file), the optimizers, safetensors I/O.
#include "bind.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/bahdanau.h"
#include "qkv/models/transformer.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/module.h"
#include "qkv/optim/optimizer.h"

namespace qkv::py {
namespace {

using pyb::arg;

std::map<std::string, Tensor> tensor_map(const pyb::object& sd, const char* arg) {
    if (pyb::isinstance<pyb::str>(sd)) return io::load_safetensors(sd.cast<std::string>());
    if (!pyb::isinstance<pyb::dict>(sd))
        throw pyb::type_error(detail::str(arg, ": expected a dict of name -> array/Tensor or a .safetensors path"));
    std::map<std::string, Tensor> out;
    for (auto kv : pyb::reinterpret_borrow<pyb::dict>(sd)) {
        const std::string name = kv.first.cast<std::string>();
        out[name] = to_tensor(kv.second, (std::string(arg) + "['" + name + "']").c_str());
    }
    return out;
}

std::vector<Tensor> param_list(const pyb::object& params) {
    if (pyb::isinstance<nn::Module>(params)) return params.cast<nn::Module&>().parameters();
    std::vector<Tensor> out;
    for (auto p : params) out.push_back(p.cast<Tensor>());
    return out;
}

models::TransformerConfig transformer_config(int64_t src_vocab_size, int64_t tgt_vocab_size, int64_t num_hiddens,
                                             int64_t num_blks, int64_t num_heads, int64_t ffn_num_hiddens, double dropout,
                                             int64_t max_len) {
    models::TransformerConfig c;
    c.src_vocab_size  = src_vocab_size;
    c.tgt_vocab_size  = tgt_vocab_size;
    c.num_hiddens     = num_hiddens;
    c.num_blks        = num_blks;
    c.num_heads       = num_heads;
    c.ffn_num_hiddens = ffn_num_hiddens;
    c.dropout         = dropout;
    c.max_len         = max_len;
    return c;
}

template <class M>
using Cls = pyb::class_<M, nn::Module, std::shared_ptr<M>>;

// nn::Module: parameters, state_dict in and out (numpy, Tensor, safetensors), train/eval.
void bind_module(pyb::module_& m) {
    pyb::class_<nn::Module, std::shared_ptr<nn::Module>>(m, "Module", "Base of qkv's layers and models (nn::Module).")
        .def("parameters", &nn::Module::parameters)
        .def("named_parameters", &nn::Module::named_parameters)
        .def("state_dict", [](const nn::Module& mod) {
            pyb::dict d;
            for (auto& [k, v] : mod.state_dict()) d[pyb::str(k)] = v;
            return d;
        }, "name -> Tensor (sharing the parameters' memory; np.asarray(t) views it).")
        .def("load_state_dict", [](nn::Module& mod, const pyb::object& sd, bool strict) {
            mod.load_state_dict(tensor_map(sd, "state_dict"), strict);
        }, arg("state_dict"), arg("strict") = true,
            "Copies values in from a dict of numpy arrays / Tensors or a .safetensors file (PyTorch names).")
        .def("save", [](const nn::Module& mod, const std::string& path) {
            std::vector<std::pair<std::string, Tensor>> v;
            for (auto& [k, t] : mod.state_dict()) v.emplace_back(k, t);
            io::save_safetensors(path, v);
        }, arg("path"), "Writes state_dict() to a .safetensors file (atomically).")
        .def("num_parameters", &nn::Module::num_parameters)
        .def("train", [](nn::Module& mod, bool on) { mod.train(on); }, arg("mode") = true)
        .def("eval", &nn::Module::eval)
        .def_property_readonly("training", &nn::Module::is_training)
        .def("zero_grad", &nn::Module::zero_grad);

}

// D2L 11.3-11.6: the attention layers and positional encoding.
void bind_attention(pyb::module_& m) {
    Cls<nn::DotProductAttention>(m, "DotProductAttention", "D2L 11.3.2: q (B, Tq, D), k (B, Tk, D), v (B, Tk, Dv) -> (B, Tq, Dv).")
        .def(pyb::init<double>(), arg("dropout") = 0.0)
        .def("__call__", [](nn::DotProductAttention& a, const pyb::object& q, const pyb::object& k, const pyb::object& v,
                            const pyb::object& vl) {
            Tensor qt = to_tensor(q, "queries"), kt = to_tensor(k, "keys"), vt = to_tensor(v, "values"),
                   lt = to_lengths(vl, "valid_lens");
            pyb::gil_scoped_release nogil;
            return a.forward(qt, kt, vt, lt);
        }, arg("queries"), arg("keys"), arg("values"), arg("valid_lens") = pyb::none())
        .def_property_readonly("attention_weights", &nn::DotProductAttention::attention_weights);

    Cls<nn::AdditiveAttention>(m, "AdditiveAttention", "D2L 11.3.3 (Bahdanau et al. 2015): w_vᵀ tanh(W_q q + W_k k).")
        .def(pyb::init<int64_t, int64_t, int64_t, double>(), arg("key_size"), arg("query_size"), arg("num_hiddens"),
             arg("dropout") = 0.0)
        .def("__call__", [](nn::AdditiveAttention& a, const pyb::object& q, const pyb::object& k, const pyb::object& v,
                            const pyb::object& vl) {
            Tensor qt = to_tensor(q, "queries"), kt = to_tensor(k, "keys"), vt = to_tensor(v, "values"),
                   lt = to_lengths(vl, "valid_lens");
            pyb::gil_scoped_release nogil;
            return a.forward(qt, kt, vt, lt);
        }, arg("queries"), arg("keys"), arg("values"), arg("valid_lens") = pyb::none())
        .def_property_readonly("attention_weights", &nn::AdditiveAttention::attention_weights);

    Cls<nn::MultiHeadAttention>(m, "MultiHeadAttention",
                                "D2L 11.5: queries (B, Tq, q), keys (B, Tk, k), values (B, Tk, v) -> (B, Tq, num_hiddens).")
        .def(pyb::init([](int64_t num_hiddens, int64_t num_heads, double dropout, bool bias, int64_t query_size,
                          int64_t key_size, int64_t value_size) {
                 nn::MultiHeadAttentionConfig c;
                 c.num_hiddens = num_hiddens;
                 c.num_heads   = num_heads;
                 c.dropout     = dropout;
                 c.bias        = bias;
                 c.query_size  = query_size;
                 c.key_size    = key_size;
                 c.value_size  = value_size;
                 return std::make_shared<nn::MultiHeadAttention>(c);
             }),
             arg("num_hiddens"), arg("num_heads"), arg("dropout") = 0.0, arg("bias") = false, arg("query_size") = 0,
             arg("key_size") = 0, arg("value_size") = 0)
        .def("__call__", [](nn::MultiHeadAttention& a, const pyb::object& q, const pyb::object& k, const pyb::object& v,
                            const pyb::object& vl, bool causal) {
            Tensor qt = to_tensor(q, "queries"), kt = to_tensor(k, "keys"), vt = to_tensor(v, "values"),
                   lt = to_lengths(vl, "valid_lens");
            pyb::gil_scoped_release nogil;
            return a.forward(qt, kt, vt, lt, causal);
        }, arg("queries"), arg("keys"), arg("values"), arg("valid_lens") = pyb::none(), arg("causal") = false)
        .def("keep_attention_weights", &nn::MultiHeadAttention::keep_attention_weights, arg("on") = true)
        .def_property_readonly("attention_weights", [](const nn::MultiHeadAttention& a) -> pyb::object {
            if (!a.attention_weights().defined()) return pyb::none();
            return pyb::cast(a.attention_weights());
        });

    Cls<nn::PositionalEncoding>(m, "PositionalEncoding", "D2L 11.6.3: X (B, T, C) + P[offset:offset+T], then dropout.")
        .def(pyb::init<int64_t, double, int64_t>(), arg("num_hiddens"), arg("dropout") = 0.0, arg("max_len") = 1000)
        .def("__call__", [](const nn::PositionalEncoding& pe, const pyb::object& X, int64_t offset) {
            return pe.forward(to_tensor(X, "X"), offset);
        }, arg("X"), arg("offset") = 0)
        .def_readonly("P", &nn::PositionalEncoding::P);

}

// The encoder-decoder models: D2L 11.7 Transformer and 11.4 Bahdanau.
void bind_models(pyb::module_& m) {
    Cls<models::EncoderDecoder>(m, "EncoderDecoder", "Encoder–decoder model: forward(src, src_valid_len, dec_input) -> logits.")
        .def("__call__", [](models::EncoderDecoder& ed, const pyb::object& src, const pyb::object& vl, const pyb::object& dec) {
            Tensor s = to_tensor(src, "src"), l = to_tensor(vl, "src_valid_len"), d = to_tensor(dec, "dec_input");
            pyb::gil_scoped_release nogil;
            return ed.forward(s, l, d);
        }, arg("src"), arg("src_valid_len"), arg("dec_input"),
            "src (B, Ts) int64, src_valid_len (B) int64, dec_input (B, Tt) int64 -> logits (B, Tt, V).");

    Cls<models::TransformerEncoder>(m, "TransformerEncoder", "D2L 11.7.4: src (B, Ts) int64, valid_lens (B) -> (B, Ts, C).")
        .def(pyb::init([](int64_t vocab_size, int64_t num_hiddens, int64_t num_blks, int64_t num_heads,
                          int64_t ffn_num_hiddens, double dropout, int64_t max_len) {
                 return std::make_shared<models::TransformerEncoder>(
                     transformer_config(vocab_size, vocab_size, num_hiddens, num_blks, num_heads, ffn_num_hiddens, dropout, max_len));
             }),
             arg("vocab_size"), arg("num_hiddens") = 256, arg("num_blks") = 2, arg("num_heads") = 4,
             arg("ffn_num_hiddens") = 64, arg("dropout") = 0.2, arg("max_len") = 1000)
        .def("__call__", [](models::TransformerEncoder& e, const pyb::object& src, const pyb::object& vl) {
            return e.forward(to_tensor(src, "src"), to_lengths(vl, "valid_lens"));
        }, arg("src"), arg("valid_lens") = pyb::none());
    Cls<models::TransformerDecoder>(m, "TransformerDecoder", "D2L 11.7.6 (teacher forcing).")
        .def(pyb::init([](int64_t vocab_size, int64_t num_hiddens, int64_t num_blks, int64_t num_heads,
                          int64_t ffn_num_hiddens, double dropout, int64_t max_len) {
                 return std::make_shared<models::TransformerDecoder>(
                     transformer_config(vocab_size, vocab_size, num_hiddens, num_blks, num_heads, ffn_num_hiddens, dropout, max_len));
             }),
             arg("vocab_size"), arg("num_hiddens") = 256, arg("num_blks") = 2, arg("num_heads") = 4,
             arg("ffn_num_hiddens") = 64, arg("dropout") = 0.2, arg("max_len") = 1000)
        .def("__call__", [](models::TransformerDecoder& d, const pyb::object& tgt, const pyb::object& enc,
                            const pyb::object& vl) {
            Tensor t = to_tensor(tgt, "tgt"), e = to_tensor(enc, "enc_outputs"), l = to_lengths(vl, "enc_valid_lens");
            pyb::gil_scoped_release nogil;
            return d.dense->forward(d.forward_hidden(t, e, l));
        }, arg("tgt"), arg("enc_outputs"), arg("enc_valid_lens") = pyb::none(),
            "tgt (B, Tt) int64, enc_outputs (B, Ts, C), enc_valid_lens (B) -> logits (B, Tt, V).")
        .def("forward_hidden", [](models::TransformerDecoder& d, const pyb::object& tgt, const pyb::object& enc,
                                  const pyb::object& vl) {
            return d.forward_hidden(to_tensor(tgt, "tgt"), to_tensor(enc, "enc_outputs"), to_lengths(vl, "enc_valid_lens"));
        }, arg("tgt"), arg("enc_outputs"), arg("enc_valid_lens") = pyb::none());

    pyb::class_<models::Transformer, models::EncoderDecoder, std::shared_ptr<models::Transformer>>(
        m, "Transformer", "D2L 11.7 Transformer seq2seq (parameter names as PyTorch's state_dict of D2L's class).")
        .def(pyb::init([](int64_t src_vocab_size, int64_t tgt_vocab_size, int64_t num_hiddens, int64_t num_blks,
                          int64_t num_heads, int64_t ffn_num_hiddens, double dropout, int64_t max_len) {
             return std::make_shared<models::Transformer>(transformer_config(
                 src_vocab_size, tgt_vocab_size, num_hiddens, num_blks, num_heads, ffn_num_hiddens, dropout, max_len));
         }),
         arg("src_vocab_size"), arg("tgt_vocab_size"), arg("num_hiddens") = 256, arg("num_blks") = 2, arg("num_heads") = 4,
         arg("ffn_num_hiddens") = 64, arg("dropout") = 0.2, arg("max_len") = 1000)
        .def_readonly("encoder", &models::Transformer::encoder)
        .def_readonly("decoder", &models::Transformer::decoder)
        .def("keep_attention_weights", &models::Transformer::keep_attention_weights, arg("on") = true);

    pyb::class_<models::Bahdanau, models::EncoderDecoder, std::shared_ptr<models::Bahdanau>>(
        m, "Bahdanau", "D2L 11.4 GRU encoder–decoder with additive attention (Bahdanau et al. 2015).")
        .def(pyb::init([](int64_t src_vocab_size, int64_t tgt_vocab_size, int64_t embed_size, int64_t num_hiddens,
                          int64_t num_layers, double dropout) {
                 models::BahdanauConfig c;
                 c.src_vocab_size = src_vocab_size;
                 c.tgt_vocab_size = tgt_vocab_size;
                 c.embed_size     = embed_size;
                 c.num_hiddens    = num_hiddens;
                 c.num_layers     = num_layers;
                 c.dropout        = dropout;
                 return std::make_shared<models::Bahdanau>(c);
             }),
             arg("src_vocab_size"), arg("tgt_vocab_size"), arg("embed_size") = 256, arg("num_hiddens") = 256,
             arg("num_layers") = 2, arg("dropout") = 0.2);

}

// SGD, Adam, AdamW with torch.optim's update rules; gradient clipping.
void bind_optimizers(pyb::module_& m) {
    pyb::class_<optim::Optimizer, std::shared_ptr<optim::Optimizer>>(m, "Optimizer")
        .def("step", [](optim::Optimizer& o) {
            pyb::gil_scoped_release nogil;
            o.step();
        })
        .def("zero_grad", &optim::Optimizer::zero_grad)
        .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
        .def("state_dict", [](const optim::Optimizer& o) {
            pyb::dict d;
            for (auto& [k, v] : o.state_dict()) d[pyb::str(k)] = v;
            return d;
        })
        .def("load_state_dict", [](optim::Optimizer& o, const pyb::object& sd) { o.load_state_dict(tensor_map(sd, "state_dict")); });
    pyb::class_<optim::SGD, optim::Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD", "torch.optim.SGD's update rule.")
        .def(pyb::init([](const pyb::object& params, double lr, double momentum, double dampening, double weight_decay,
                          bool nesterov) {
                 optim::SGDOptions o{momentum, dampening, weight_decay, nesterov};
                 return std::make_shared<optim::SGD>(param_list(params), lr, o);
             }),
             arg("params"), arg("lr"), arg("momentum") = 0.0, arg("dampening") = 0.0, arg("weight_decay") = 0.0,
             arg("nesterov") = false);
    auto make_adam = [](bool decoupled, double default_wd) {
        return [decoupled, default_wd](const pyb::object& params, double lr, std::pair<double, double> betas, double eps,
                                       const pyb::object& weight_decay) {
            optim::AdamOptions o;
            o.beta1 = betas.first;
            o.beta2 = betas.second;
            o.eps   = eps;
            o.weight_decay           = weight_decay.is_none() ? default_wd : weight_decay.cast<double>();
            o.decoupled_weight_decay = decoupled;
            return std::make_shared<optim::Adam>(param_list(params), lr, o);
        };
    };
    pyb::class_<optim::Adam, optim::Optimizer, std::shared_ptr<optim::Adam>>(m, "Adam", "torch.optim.Adam's update rule.")
        .def(pyb::init(make_adam(false, 0.0)), arg("params"), arg("lr") = 1e-3, arg("betas") = std::make_pair(0.9, 0.999),
             arg("eps") = 1e-8, arg("weight_decay") = pyb::none());
    m.def("AdamW", make_adam(true, 1e-2), arg("params"), arg("lr") = 1e-3, arg("betas") = std::make_pair(0.9, 0.999),
          arg("eps") = 1e-8, arg("weight_decay") = pyb::none(), "torch.optim.AdamW's update rule (an Adam with decoupled decay).");
    m.def("clip_grad_norm", [](const pyb::object& params, double max_norm) { return optim::clip_grad_norm(param_list(params), max_norm); },
          arg("params"), arg("max_norm"));

}

void bind_safetensors(pyb::module_& m) {
    m.def("load_safetensors", [](const std::string& path) {
        pyb::dict d;
        for (auto& [k, v] : io::load_safetensors(path)) d[pyb::str(k)] = v;
        return d;
    }, arg("path"));
    m.def("save_safetensors", [](const std::string& path, const pyb::dict& tensors) {
        std::vector<std::pair<std::string, Tensor>> v;
        for (auto kv : tensors) {
            const std::string name = kv.first.cast<std::string>();
            v.emplace_back(name, to_tensor(kv.second, name.c_str()));
        }
        io::save_safetensors(path, v);
    }, arg("path"), arg("tensors"), "Writes name -> array/Tensor atomically (util/atomic_file.h).");
}

}  // namespace

// Registration order matters: a base class (Module, EncoderDecoder, Optimizer) before its subclasses.
void bind_nn(pyb::module_& m) {
    bind_module(m);
    bind_attention(m);
    bind_models(m);
    bind_optimizers(m);
    bind_safetensors(m);
}

}  // namespace qkv::py
