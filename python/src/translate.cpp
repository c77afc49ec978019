// qkv.Translator: bindings of runtime::Translator (translate_batch / score_batch over a model
// folder, the code path of `qkv translate`), with the GIL released while they compute.
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>

#include "bind.h"
#include "qkv/runtime/text.h"
#include "qkv/data/text.h"
#include "qkv/runtime/translator.h"

namespace qkv::py {
namespace {

using pyb::arg;

struct TranslationResult {
    std::string translation;
    std::vector<std::string> hypotheses;
    std::vector<double> scores;
    pyb::object attention = pyb::none();
    bool finished = true;  // every sentence's best hypothesis ended with <eos> (false: cut at max_len)
    bool source_tied = false;  // (not bound) cut below max_len, at a real-text model's source-tied limit
};

/// runtime::parse_compute_type with its message as a ValueError.
runtime::ComputeType parse_compute_type(const std::string& name) {
    try {
        return runtime::parse_compute_type(name);
    } catch (const Error& e) {
        throw pyb::value_error(e.what());
    }
}

/// A Python list (any sequence) of str as strings; TypeError naming the argument and the index
/// otherwise: a str (one sentence: wrap it in a list), bytes, None, a number, an item not a str.
std::vector<std::string> str_list(const pyb::handle& obj, const char* what) {
    const auto type_name = [](const pyb::handle& h) { return std::string(pyb::str(h.get_type().attr("__name__"))); };
    if (pyb::isinstance<pyb::str>(obj))
        throw pyb::type_error(detail::str(what, ": expected a list of str, got a str (one text: pass [text])"));
    if (!pyb::isinstance<pyb::sequence>(obj) || pyb::isinstance<pyb::bytes>(obj) || pyb::isinstance<pyb::bytearray>(obj))
        throw pyb::type_error(detail::str(what, ": expected a list of str, got ", type_name(obj)));
    const auto seq = pyb::reinterpret_borrow<pyb::sequence>(obj);
    std::vector<std::string> out;
    out.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
        const pyb::object item = seq[i];
        if (!pyb::isinstance<pyb::str>(item))
            throw pyb::type_error(detail::str(what, "[", i, "]: expected str, got ", type_name(item)));
        try {
            out.push_back(item.cast<std::string>());
        } catch (const pyb::cast_error&) {  // a lone surrogate ("\udcff") has no UTF-8 form
            throw pyb::value_error(detail::str(what, "[", i, "]: not encodable as UTF-8 (a lone surrogate?)"));
        }
    }
    return out;
}

/// Word tokens of each sentence as `qkv translate` makes them; throws ValueError naming the index
/// for text the CLI would refuse (invalid UTF-8, a NUL byte). Blank sentences give an empty list.
void check_text(const std::vector<std::string>& sentences, const char* what) {
    for (size_t i = 0; i < sentences.size(); ++i)
        if (const runtime::TextProblem p = runtime::text_problem(sentences[i]))
            throw pyb::value_error(detail::str(what, "[", i, "]: ", p.what, " at byte offset ", p.offset));
}

std::vector<std::vector<std::string>> tokenize_all(const runtime::Translator& tr, const std::vector<std::string>& sentences,
                                                   const char* what) {
    check_text(sentences, what);
    return runtime::tokenize_sentences(*tr.get(), sentences);
}

/// The ranges of `qkv translate`'s flags (and the server's fields): a beam of 10^12 would only
/// fail allocating, a NaN length penalty would rank hypotheses at random. None takes config.json's.
/// A keyword that takes an int (any integer type: Python's, numpy's) or, with `none_ok`, None:
/// True/False (an int subclass in Python) and other types are a TypeError naming it, as `qkv
/// translate --beam true` is a usage error; an int beyond 64 bits a ValueError naming it.
std::optional<int64_t> opt_int(const pyb::object& v, const char* name, bool none_ok = true) {
    const char* expected = none_ok ? "an int or None" : "an int";
    if (v.is_none() && none_ok) return std::nullopt;
    if (v.is_none() || pyb::isinstance<pyb::bool_>(v) || !PyIndex_Check(v.ptr()))
        throw pyb::type_error(detail::str(name, ": expected ", expected, ", got ",
                                          std::string(pyb::str(v.get_type().attr("__name__")))));
    try {
        return v.cast<int64_t>();
    } catch (const pyb::cast_error&) {
        throw pyb::value_error(detail::str(name, ": ", std::string(pyb::str(v)), " is out of range"));
    }
}

/// The same for a number (an int or float of any type: anything with __float__, not bool) or None.
std::optional<double> opt_number(const pyb::object& v, const char* name) {
    if (v.is_none()) return std::nullopt;
    if (pyb::isinstance<pyb::bool_>(v) || !pyb::hasattr(v, "__float__"))
        throw pyb::type_error(detail::str(name, ": expected a number or None, got ",
                                          std::string(pyb::str(v.get_type().attr("__name__")))));
    try {
        return pyb::float_(v).cast<double>();
    } catch (const pyb::error_already_set&) {  // an int beyond double's range
        throw pyb::value_error(detail::str(name, ": ", std::string(pyb::str(v)), " is out of range"));
    }
}

void check_ranges(std::optional<int64_t> beam_size, std::optional<double> length_penalty, std::optional<int64_t> max_len,
                  int64_t batch_size) {
    if (beam_size && (*beam_size < 1 || *beam_size > 100))
        throw pyb::value_error(detail::str("beam_size: ", *beam_size, " is not in [1, 100] (None: config.json's)"));
    if (length_penalty && !(*length_penalty >= 0 && *length_penalty <= 10))
        throw pyb::value_error(detail::str("length_penalty: ", *length_penalty, " is not in [0, 10] (None: config.json's)"));
    if (max_len && (*max_len < 1 || *max_len > runtime::kMaxLenMost))
        throw pyb::value_error(detail::str("max_len: ", *max_len, " is not in [1, ", runtime::kMaxLenMost,
                                           "] (None: config.json's)"));
    if (batch_size < 1 || batch_size > 100000)
        throw pyb::value_error(detail::str("batch_size: ", batch_size, " is not in [1, 100000]"));
}

/// The translations, and with num_hypotheses > 1 or return_scores the n best with their scores
/// (the search path: beam K = 1 is greedy decoding), of the non-blank sentences (rows of src).
void translate_rows(runtime::Translator& tr, const std::vector<std::vector<std::string>>& src,
                    const std::vector<size_t>& row_of, const runtime::TranslateOptions& to, int64_t num_hypotheses,
                    bool return_scores, std::vector<TranslationResult>& res) {
    const auto hyp = tr.translate(src, to);
    for (size_t i = 0; i < res.size(); ++i)
        if (row_of[i] != std::string::npos && !hyp[row_of[i]].empty()) {
            res[i].translation = runtime::join_tokens(hyp[row_of[i]].front().words);
            res[i].finished    = hyp[row_of[i]].front().finished;
            res[i].source_tied = !res[i].finished && int64_t(hyp[row_of[i]].front().ids.size()) < to.max_len;
        }
    if ((num_hypotheses == 1 && !return_scores) || src.empty()) return;
    runtime::TranslateOptions o = to;
    o.num_hypotheses            = num_hypotheses;
    o.scores                    = true;
    const auto nbest            = tr.translate(src, o);
    for (size_t i = 0; i < res.size(); ++i)
        if (row_of[i] != std::string::npos)
            for (const auto& t : nbest[row_of[i]]) {
                res[i].hypotheses.push_back(runtime::join_tokens(t.words));
                res[i].scores.push_back(t.score);
            }
}

/// What `qkv translate` warns about a source the model cannot read whole (runtime::source_notes),
/// as Python warnings (UserWarning, at the caller's line) naming the text: "sentences[2] has 9 source tokens but the model
/// reads ...". `text_of[k]`: the text of sentence k (empty: sentence k is text k).
void warn_source_notes(const runtime::ModelDir& m, const std::vector<std::vector<std::string>>& words,
                       const std::vector<size_t>& text_of) {
    const pyb::object warn = pyb::module_::import("warnings").attr("warn");
    const pyb::object category = pyb::module_::import("builtins").attr("UserWarning");
    for (size_t k = 0; k < words.size(); ++k) {
        if (words[k].empty()) continue;
        const runtime::SourceNotes notes = runtime::source_notes(m, words[k]);
        const std::string what = detail::str("sentences[", text_of.empty() ? k : text_of[k], "]");
        for (const auto& w : notes.long_words) warn(detail::str(what, ": ", w), category, 1);
        if (!notes.cut.empty()) warn(detail::str(what, " ", notes.cut), category, 1);
    }
}

/// What `qkv translate` warns about translations cut at the length limit (runtime::length_limit_note),
/// as one UserWarning naming the texts: "2 sentences (sentences[0], sentences[3]) reached the length
/// limit of 20 tokens (max_len) ...". `text_of[k]`: the text of result k (empty: result k is text k).
void warn_unfinished(const std::vector<TranslationResult>& res, const std::vector<size_t>& text_of, int64_t max_len) {
    std::vector<size_t> texts;
    bool source_tied = true;
    for (size_t k = 0; k < res.size(); ++k) {
        if (res[k].finished) continue;
        const size_t t = text_of.empty() ? k : text_of[k];
        if (texts.empty() || texts.back() != t) texts.push_back(t);
        source_tied = source_tied && res[k].source_tied;
    }
    if (texts.empty()) return;
    std::string subject;
    if (texts.size() == 1) {
        subject = detail::str("sentences[", texts[0], "]");
    } else {
        subject = detail::str(texts.size(), " sentences (");
        for (size_t k = 0; k < texts.size() && k < 5; ++k) subject += detail::str(k ? ", " : "", "sentences[", texts[k], "]");
        subject += texts.size() > 5 ? ", ...)" : ")";
    }
    pyb::module_::import("warnings").attr("warn")(runtime::length_limit_note(subject, "max_len", max_len, source_tied),
                                                  pyb::module_::import("builtins").attr("UserWarning"), 1);
}

std::vector<TranslationResult> translate_batch(runtime::Translator& tr, const std::vector<std::string>& sentences,
                                               std::optional<int64_t> beam_size, std::optional<double> length_penalty,
                                               std::optional<int64_t> max_len,
                                               int64_t num_hypotheses, bool return_scores, bool return_attention,
                                               int64_t batch_size, bool no_unk) {
    check_ranges(beam_size, length_penalty, max_len, batch_size);
    if (const int64_t beam = beam_size.value_or(tr.get()->config.decode.beam); num_hypotheses < 1 || num_hypotheses > beam)
        throw pyb::value_error(detail::str("num_hypotheses: ", num_hypotheses, " is not in [1, beam_size] = [1, ", beam, "]"));
    check_text(sentences, "sentences");
    // Plain translations: each text cut into sentences and put back together, as `qkv translate`
    // and `qkv serve` do (runtime::split_text); n-best, scores and attention are per text.
    const bool split = !return_attention;  // attention maps index one source and one output
    std::vector<data::SentenceSplit> layout;
    std::vector<std::string> parts;
    std::vector<size_t> text_of;
    if (split) {
        for (size_t i = 0; i < sentences.size(); ++i) {
            layout.push_back(runtime::split_text(*tr.get(), sentences[i]));
            for (const auto& x : layout.back().sentences) parts.push_back(x.text), text_of.push_back(i);
        }
    }
    const std::vector<std::string>& todo = split ? parts : sentences;
    auto words = runtime::tokenize_sentences(*tr.get(), todo);
    warn_source_notes(*tr.get(), words, split ? text_of : std::vector<size_t>{});
    std::vector<TranslationResult> res(todo.size());
    std::vector<runtime::AttentionMap> att;
    {
        pyb::gil_scoped_release nogil;
        FlushDenormals flush;
        const runtime::DecodeConfig& dc = tr.get()->config.decode;
        runtime::TranslateOptions to;  // the defaults of `qkv translate` (config.json's decode section)
        to.max_len        = max_len.value_or(dc.max_len);
        to.beam           = beam_size.value_or(dc.beam);
        to.length_penalty = length_penalty.value_or(dc.length_penalty);
        to.batch_size     = batch_size;
        to.no_unk         = no_unk;
        std::vector<std::vector<std::string>> src;
        std::vector<size_t> row_of;
        for (auto& w : words) {
            row_of.push_back(w.empty() ? std::string::npos : src.size());
            if (!w.empty()) src.push_back(w);
        }
        translate_rows(tr, src, row_of, to, num_hypotheses, return_scores, res);
        // Cross-attention of the last decoder layer, averaged over heads, one sentence at a time
        // with greedy decoding (what `qkv heatmap` draws): (target steps, source units).
        if (return_attention) att = tr.attention(words, to.max_len, no_unk);
    }
    warn_unfinished(res, split ? text_of : std::vector<size_t>{}, max_len.value_or(tr.get()->config.decode.max_len));
    for (size_t i = 0; i < att.size(); ++i) {
        pyb::array_t<float> a({att[i].steps, att[i].sources});
        std::copy(att[i].weights.begin(), att[i].weights.end(), a.mutable_data());
        res[i].attention = a;
    }
    if (!split) return res;
    // Each text's results from its sentences': the k-th hypothesis joins the sentences' k-th, their
    // scores summed (as qkv translate's n-best lines and qkv serve's /v1 do).
    std::vector<std::vector<size_t>> parts_of(sentences.size());
    for (size_t k = 0; k < res.size(); ++k) parts_of[text_of[k]].push_back(k);
    std::vector<TranslationResult> joined(sentences.size());
    for (size_t i = 0; i < sentences.size(); ++i) {
        if (layout[i].sentences.empty()) continue;
        std::vector<std::string> best;
        std::vector<std::vector<runtime::TextHypothesis>> lists;
        for (size_t k : parts_of[i]) {
            best.push_back(res[k].translation);
            joined[i].finished = joined[i].finished && res[k].finished;
            auto& l = lists.emplace_back();
            for (size_t j = 0; j < res[k].hypotheses.size(); ++j) {
                runtime::TextHypothesis h;
                h.text = res[k].hypotheses[j], h.score = res[k].scores[j];
                l.push_back(std::move(h));
            }
        }
        joined[i].translation = runtime::join_translations(layout[i], best);
        for (const auto& h : runtime::join_sentence_nbest(lists, layout[i])) {
            joined[i].hypotheses.push_back(h.text);
            joined[i].scores.push_back(h.score);
        }
    }
    return joined;
}

std::vector<runtime::TokenScores> score_batch(runtime::Translator& tr, const std::vector<std::string>& sources,
                                              const std::vector<std::string>& targets) {
    if (sources.size() != targets.size())
        throw pyb::value_error(detail::str("score_batch: ", sources.size(), " sources but ", targets.size(), " targets"));
    auto sw = tokenize_all(tr, sources, "sources");
    auto tw = tokenize_all(tr, targets, "targets");
    pyb::gil_scoped_release nogil;
    FlushDenormals flush;
    return tr.score(sw, tw);
}

}  // namespace

void bind_translate(pyb::module_& m) {
    pyb::class_<TranslationResult>(m, "TranslationResult")
        .def_readonly("translation", &TranslationResult::translation)
        .def_readonly("hypotheses", &TranslationResult::hypotheses)
        .def_readonly("scores", &TranslationResult::scores)
        .def_readonly("attention", &TranslationResult::attention)
        .def_readonly("finished", &TranslationResult::finished,
                      "False when the best translation (of some sentence of the text) reached its length limit (max_len, or "
                      "a real-text model's twice the source's tokens + 10 when lower) before <eos>: it is cut there, "
                      "possibly mid-word (translate_batch warns then)")
        .def("__repr__", [](const TranslationResult& r) { return "TranslationResult(" + std::string(pyb::repr(pyb::str(r.translation))) + ")"; });
    pyb::class_<runtime::TokenScores>(m, "ScoreResult")
        .def_readonly("tokens", &runtime::TokenScores::tokens)
        .def_readonly("log_probs", &runtime::TokenScores::log_probs)
        .def_readonly("score", &runtime::TokenScores::sum);
    pyb::class_<runtime::Translator, std::shared_ptr<runtime::Translator>>(m, "Translator", R"(A trained model folder (qkv train --out DIR).

translate_batch runs `qkv translate`'s code path (runtime::Translator): same tokenisation, same
defaults from config.json, same output. Thread-safe: concurrent calls from several Python threads
each borrow their own loaded copy of the model (a second copy is loaded the first time two calls
overlap), and the GIL is released while decoding, so threads translate in parallel.
compute_type as `qkv translate --compute-type`: "fp32" (default), "bf16" (bf16 matrix products and
attention, fp32 accumulation) or "int8" (Linear weights quantized per output channel, activations
per row at run time; CTranslate2's name for the same setting). ValueError for another value.)")
        .def(pyb::init([](const std::filesystem::path& dir, const std::string& compute_type) {
                 const runtime::ComputeType ct = parse_compute_type(compute_type);
                 pyb::gil_scoped_release nogil;  // a str or any os.PathLike (pathlib.Path)
                 auto t = std::make_shared<runtime::Translator>(dir.string(), ct);
                 t->load();
                 return t;
             }),
             arg("model_dir"), arg("compute_type") = "fp32")
        .def_property_readonly("model_dir", &runtime::Translator::dir)
        .def_property_readonly("active_calls", &runtime::Translator::active_calls,
                               "Calls computing now with the GIL released (translate_batch, score_batch), each on "
                               "its own copy of the model: a thread that reads a non-zero value ran while another "
                               "was translating.")
        .def_property_readonly("compute_type",
                               [](const runtime::Translator& t) { return std::string(runtime::compute_type_name(t.compute_type())); })
        .def_property_readonly("architecture", [](const runtime::Translator& t) {
            return std::string(runtime::model_kind_name(t.get()->config.architecture));
        })
        .def("translate_batch",
             [](runtime::Translator& tr, const pyb::object& sentences, const pyb::object& beam_size,
                const pyb::object& length_penalty, const pyb::object& max_len, const pyb::object& num_hypotheses,
                bool return_scores, bool return_attention, const pyb::object& batch_size, bool no_unk) {
                 const int64_t n = *opt_int(num_hypotheses, "num_hypotheses", /*none_ok=*/false);
                 const int64_t b = *opt_int(batch_size, "batch_size", /*none_ok=*/false);
                 return translate_batch(tr, str_list(sentences, "sentences"), opt_int(beam_size, "beam_size"),
                                        opt_number(length_penalty, "length_penalty"), opt_int(max_len, "max_len"), n,
                                        return_scores, return_attention, b, no_unk);
             },
             arg("sentences"), pyb::kw_only(), arg("beam_size") = pyb::none(),
             arg("length_penalty") = pyb::none(), arg("max_len") = pyb::none(), arg("num_hypotheses") = 1, arg("return_scores") = false,
             arg("return_attention") = false, arg("batch_size") = 500, arg("no_unk") = false,
             R"(One TranslationResult per sentence: .translation (the best hypothesis, as `qkv translate` prints it;
"" for a blank sentence); with num_hypotheses > 1 or return_scores, .hypotheses and .scores (beam search's
n best, length-penalised log-probabilities); with return_attention, .attention: a float32 array (target
steps, source units) of the last decoder layer's cross-attention averaged over heads (greedy decoding).
.finished is False when a translation reached max_len before <eos> (cut there, possibly mid-word).
beam_size, length_penalty, max_len: None (the default) takes config.json's decode settings, as the CLI
does; a value out of range ([1, 100], [0, 10], [1, 1000]) raises ValueError naming it.)")
        .def("score_batch",
             [](runtime::Translator& tr, const pyb::object& sources, const pyb::object& targets) {
                 return score_batch(tr, str_list(sources, "sources"), str_list(targets, "targets"));
             },
             arg("sources"), arg("targets"),
             "Teacher-forced log-probabilities of each target given its source: ScoreResult(.tokens (target units + "
             "<eos>), .log_probs, .score = their sum).");

}

}  // namespace qkv::py
