// Training checkpoints and model files on top of io/safetensors.h: tensor naming, the metadata
// contract, a FNV-1a checksum of the data section, and clear errors for damaged files.
#include "qkv/runtime/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/io/safetensors.h"
#include "runtime/json_error.h"

namespace qkv::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kChecksumKey = "qkv.checksum";

/// FNV-1a, 64 bit, over a sequence of byte ranges.
struct Fnv1a {
    uint64_t h = 1469598103934665603ULL;
    void add(const uint8_t* p, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            h ^= p[i];
            h *= 1099511628211ULL;
        }
    }
    std::string hex() const {
        static const char* digits = "0123456789abcdef";
        std::string s(16, '0');
        for (int i = 0; i < 16; ++i) s[size_t(15 - i)] = digits[(h >> (4 * i)) & 15];
        return s;
    }
};

const char* st_dtype(DType d) {
    switch (d) {
        case DType::f32: return "F32";
        case DType::f64: return "F64";
        case DType::i64: return "I64";
        case DType::b8: return "BOOL";
        case DType::bf16: return "BF16";  // never a model's (save_model asks for f32); read back as bf16
        case DType::f16: return "F16";    // likewise: read back as f16
    }
    return "";
}

/// Tensors to write, kept contiguous and alive while the views point at them.
struct WriteList {
    std::vector<Tensor> keep;
    std::vector<io::SafeTensorView> views;
    void add(const std::string& name, const Tensor& t) {
        Tensor c = t.detach().contiguous();
        keep.push_back(c);
        io::SafeTensorView v;
        v.name   = name;
        v.dtype  = st_dtype(c.dtype());
        v.shape  = c.shape();
        v.data   = c.raw_data();
        v.nbytes = size_t(c.numel() * dtype_size(c.dtype()));
        views.push_back(std::move(v));
    }
    std::string checksum() const {
        Fnv1a f;
        for (const auto& v : views) f.add(static_cast<const uint8_t*>(v.data), v.nbytes);
        return f.hex();
    }
};

/// Parameters in registration (PyTorch) order, then any buffers.
std::vector<std::pair<std::string, Tensor>> ordered_state(const nn::Module& model) {
    auto out = model.named_parameters();
    std::set<std::string> seen;
    for (auto& [n, t] : out) seen.insert(n);
    for (auto& [n, t] : model.state_dict())
        if (!seen.count(n)) out.emplace_back(n, t);
    return out;
}

/// Throws naming the first parameter or buffer that holds a NaN or an infinity: a model whose
/// checksum was removed or that was saved from a diverged run would otherwise decode to <unk>s
/// and exit 0.
void check_finite_state(const nn::Module& model) {
    for (const auto& [n, t] : ordered_state(model)) {
        if (!is_floating(t.dtype())) continue;
        const Tensor c = t.contiguous().to(DType::f64);
        const double* p = c.data<double>();
        for (int64_t i = 0, e = c.numel(); i < e; ++i)
            QKV_CHECK(std::isfinite(p[i]), "parameter '", n, "' holds ", p[i], " at element ", i,
                      " (the weights are damaged, or were saved from a run that diverged)");
    }
}

/// Opens and validates a file; rethrows its errors as "<what> '<path>': <problem> (the file is
/// truncated, ...)", naming the path once, or "<what> '<path>': the file is truncated: expected N
/// bytes (...), found M" when the file is shorter than its header says.
io::SafeTensorsFile open_checked(const std::string& path, const char* what) {
    std::error_code ec;
    QKV_CHECK(fs::exists(path, ec), what, " '", path, "' not found");
    try {
        io::SafeTensorsFile f(path);
        auto it = f.metadata().find(kChecksumKey);
        if (it != f.metadata().end()) {
            Fnv1a h;
            for (const auto& e : f.entries()) {
                auto b = f.bytes(e.name);
                h.add(b.data(), b.size());
            }
            QKV_CHECK(h.hex() == it->second, "checksum mismatch (stored ", it->second, ", computed ",
                      h.hex(), ")");
        }
        return f;
    } catch (const io::SafeTensorsError& e) {  // "safetensors: '<path>': <problem>"
        if (e.truncated())  // "the file is truncated: expected N bytes (...), found M" says it all
            throw Error(detail::str(what, " '", path, "': ", e.problem()));
        throw Error(detail::str(what, " '", path, "': ", e.problem(),
                                " (the file is truncated, corrupt or not a qkv file)"));
    } catch (const Error& e) {  // the checksum: the header parsed, the tensor bytes changed
        throw Error(detail::str(what, " '", path, "': ", e.what(),
                                ": the file is corrupt (changed after it was written)"));
    }
}

Tensor to_tensor(const io::SafeTensorsFile& f, const io::SafeTensorInfo& e) {
    DType d;
    if (e.dtype == "F32") d = DType::f32;
    else if (e.dtype == "F64") d = DType::f64;
    else if (e.dtype == "I64") d = DType::i64;
    else if (e.dtype == "BOOL") d = DType::b8;
    else if (e.dtype == "BF16") d = DType::bf16;  // load_state_dict's copy_ widens it exactly
    else if (e.dtype == "F16") d = DType::f16;    // likewise
    else throw Error(detail::str("tensor '", e.name, "' has dtype ", e.dtype, ", expected F32, F64, I64, BOOL, BF16 or F16"));
    Tensor t = Tensor::empty(e.shape, d);
    auto b = f.bytes(e.name);
    if (!b.empty()) std::memcpy(t.raw_data(), b.data(), b.size());
    return t;
}

/// Entries whose name starts with prefix, with the prefix removed.
std::map<std::string, Tensor> with_prefix(const io::SafeTensorsFile& f, const std::string& prefix) {
    std::map<std::string, Tensor> out;
    for (const auto& e : f.entries())
        if (e.name.compare(0, prefix.size(), prefix) == 0) out[e.name.substr(prefix.size())] = to_tensor(f, e);
    return out;
}

uint64_t meta_u64(const std::map<std::string, std::string>& m, const std::string& k) {
    auto it = m.find(k);
    QKV_CHECK(it != m.end(), "metadata entry '", k, "' is missing");
    try {
        // Digits only: std::stoull also takes leading spaces and a sign, and wraps "-1" to 2^64 − 1.
        const std::string& s = it->second;
        QKV_CHECK(!s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; }),
                  "bad number");
        size_t pos = 0;
        const unsigned long long v = std::stoull(s, &pos);
        QKV_CHECK(pos == s.size(), "bad number");
        return uint64_t(v);
    } catch (const std::exception&) {
        throw Error(detail::str("metadata entry '", k, "' is not a number: '", it->second, "'"));
    }
}

constexpr const char* kRunningSumsKey = "qkv.running_sums";
constexpr const char* kDivergenceReferenceKey = "qkv.divergence_reference";

nlohmann::json sums_json(const RunningSums& s) {
    return {{"loss", s.loss}, {"seconds", s.seconds}, {"steps", s.steps}, {"tokens", s.tokens}};
}

/// j[key] as RunningSums; throws qkv::Error naming the metadata entry when it is malformed.
RunningSums sums_of(const nlohmann::json& j, const char* key) {
    try {
        const auto& o = j.at(key);
        RunningSums s;
        s.loss    = o.at("loss").get<double>();
        s.seconds = o.at("seconds").get<double>();
        // Integers only: a float such as 1e300 converted to int64_t is undefined behaviour.
        QKV_CHECK(o.at("steps").is_number_integer() && o.at("tokens").is_number_integer(), "not an integer count");
        s.steps   = o.at("steps").get<int64_t>();
        s.tokens  = o.at("tokens").get<int64_t>();
        QKV_CHECK(s.steps >= 0 && s.tokens >= 0, "negative count");
        return s;
    } catch (const std::exception&) {
        throw Error(detail::str("metadata entry '", kRunningSumsKey, "' has no valid \"", key,
                                "\" (an object of loss, seconds, steps, tokens)"));
    }
}

double meta_double(const std::map<std::string, std::string>& m, const std::string& k) {
    const std::string& v = m.at(k);
    try {
        size_t pos = 0;
        const double d = std::stod(v, &pos);
        QKV_CHECK(pos == v.size() && std::isfinite(d), "bad number");
        return d;
    } catch (const std::exception&) {
        throw Error(detail::str("metadata entry '", k, "' is not a number: '", v, "'"));
    }
}

}  // namespace

template <class Json>
Json parse_metadata_json(const std::string& path, const std::string& key, const std::string& text,
                         const std::string& what) {
    try {
        return detail::parse_json_unique_keys<Json>(text);
    } catch (const nlohmann::json::exception& e) {
        throw Error(detail::str(what, " '", path, "': metadata '", key, "' is not valid JSON (",
                                detail::json_error_text(e), ")"));
    } catch (const Error& e) {
        throw Error(detail::str(what, " '", path, "': metadata '", key, "': ", e.what()));
    }
}
template nlohmann::json parse_metadata_json<nlohmann::json>(const std::string&, const std::string&,
                                                            const std::string&, const std::string&);
template nlohmann::ordered_json parse_metadata_json<nlohmann::ordered_json>(const std::string&, const std::string&,
                                                                            const std::string&, const std::string&);

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const TrainingProgress& p, const std::map<std::string, std::string>& extra) {
    WriteList w;
    for (auto& [n, t] : ordered_state(model)) w.add("model." + n, t);
    for (auto& [n, t] : opt.state_dict()) w.add("optim." + n, t);
    std::map<std::string, std::string> meta = extra;
    meta["qkv.format"]        = kCheckpointFormat;
    meta["qkv.version"]       = std::to_string(kCheckpointVersion);
    meta["qkv.epoch"]         = std::to_string(p.epoch);
    meta["qkv.batch"]         = std::to_string(p.batch);
    meta["qkv.step"]          = std::to_string(p.step);
    meta["qkv.rng_seed"]      = std::to_string(p.rng_seed);
    meta["qkv.rng_offset"]    = std::to_string(p.rng_offset);
    meta["qkv.train_seconds"] = nlohmann::json(p.train_seconds).dump();  // shortest exact form
    if (!p.pending_records.empty()) meta["qkv.pending_records"] = p.pending_records;
    if (std::isfinite(p.divergence_reference))
        meta[kDivergenceReferenceKey] = nlohmann::json(p.divergence_reference).dump();  // exact
    meta[kRunningSumsKey] = nlohmann::json{{"epoch", sums_json(p.epoch_sums)},
                                           {"log", sums_json(p.log_sums)},
                                           {"window", sums_json(p.window_sums)}}
                                .dump();
    meta[kChecksumKey]        = w.checksum();
    io::write_safetensors(path, w.views, meta);
}

std::map<std::string, std::string> read_checkpoint_metadata(const std::string& path,
                                                            const std::string& what) {
    return open_checked(path, what.c_str()).metadata();
}

namespace {

/// The progress in a checkpoint's metadata (format tag and version checked).
TrainingProgress progress_of(const std::map<std::string, std::string>& m) {
    auto fmt = m.find("qkv.format");
    QKV_CHECK(fmt != m.end() && fmt->second == kCheckpointFormat,
              "not a qkv training checkpoint (metadata 'qkv.format' is ",
              fmt == m.end() ? std::string("missing") : "'" + fmt->second + "'", ")");
    const uint64_t ver = meta_u64(m, "qkv.version");
    QKV_CHECK(ver == uint64_t(kCheckpointVersion), "checkpoint format version ", ver,
              " is not supported (this build reads version ", kCheckpointVersion, ")");
    TrainingProgress p;
    p.epoch      = int64_t(meta_u64(m, "qkv.epoch"));
    p.batch      = int64_t(meta_u64(m, "qkv.batch"));
    p.step       = int64_t(meta_u64(m, "qkv.step"));
    p.rng_seed   = meta_u64(m, "qkv.rng_seed");
    p.rng_offset = meta_u64(m, "qkv.rng_offset");
    auto ts = m.find("qkv.train_seconds");
    p.train_seconds = ts == m.end() ? 0.0 : meta_double(m, "qkv.train_seconds");
    auto pr = m.find("qkv.pending_records");
    if (pr != m.end()) p.pending_records = pr->second;
    auto rs = m.find(kRunningSumsKey);
    p.has_running_sums = rs != m.end();
    if (p.has_running_sums) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(rs->second);
        } catch (const std::exception&) {
            throw Error(detail::str("metadata entry '", kRunningSumsKey, "' is not valid JSON"));
        }
        p.epoch_sums  = sums_of(j, "epoch");
        p.log_sums    = sums_of(j, "log");
        p.window_sums = sums_of(j, "window");
    }
    auto dr = m.find(kDivergenceReferenceKey);
    if (dr != m.end()) {
        try {
            p.divergence_reference = nlohmann::json::parse(dr->second).get<double>();
        } catch (const std::exception&) {
            throw Error(detail::str("metadata entry '", kDivergenceReferenceKey, "' is not a number: '", dr->second,
                                    "'"));
        }
    }
    return p;
}

}  // namespace

TrainingProgress read_checkpoint_progress(const std::string& path) {
    io::SafeTensorsFile f = open_checked(path, "checkpoint");
    try {
        return progress_of(f.metadata());
    } catch (const Error& e) {
        throw Error(detail::str("checkpoint '", path, "': ", e.what()));
    }
}

TrainingProgress load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt) {
    io::SafeTensorsFile f = open_checked(path, "checkpoint");
    try {
        TrainingProgress p = progress_of(f.metadata());
        model.load_state_dict(with_prefix(f, "model."), /*strict=*/true);
        check_finite_state(model);
        if (opt) opt->load_state_dict(with_prefix(f, "optim."));
        return p;
    } catch (const Error& e) {
        throw Error(detail::str("checkpoint '", path, "': ", e.what()));
    }
}

void save_model(const std::string& path, const nn::Module& model,
                const std::map<std::string, std::string>& metadata, DType storage) {
    QKV_CHECK(storage == DType::f32 || storage == DType::bf16, "save_model: storage must be float32 or bfloat16, got ",
              dtype_name(storage));
    WriteList w;
    for (auto& [n, t] : ordered_state(model)) {
        QKV_CHECK(t.dtype() == DType::f32, "save_model: '", n, "' is ", dtype_name(t.dtype()),
                  ", expected float32");
        w.add(n, storage == DType::bf16 ? t.detach().to(DType::bf16) : t);
    }
    std::map<std::string, std::string> meta = metadata;
    meta["format"]     = "pt";
    meta[kChecksumKey] = w.checksum();
    io::write_safetensors(path, w.views, meta);
}

void load_model(const std::string& path, nn::Module& model) {
    io::SafeTensorsFile f = open_checked(path, "model file");
    try {
        model.load_state_dict(with_prefix(f, ""), /*strict=*/true);
        check_finite_state(model);
    } catch (const Error& e) {
        throw Error(detail::str("model file '", path, "': ", e.what()));
    }
}

}  // namespace qkv::runtime
