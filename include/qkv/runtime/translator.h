#pragma once
// One thread-safe translator over a model folder, for every front end (qkv translate, qkv eval,
// qkv serve, qkv.Translator): a pool of loaded copies of the model (a model runs one call at a
// time: decoding keeps per-call state in its caches), reloadable while it serves (qkv serve's
// SIGHUP: a damaged folder is refused and the old model keeps serving; calls that started on the
// old model finish with it), with the compute type applied to every copy.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "qkv/runtime/compute_type.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/translate.h"

namespace qkv::runtime {

/// A target scored by teacher forcing (Translator::score).
struct TokenScores {
    std::vector<std::string> tokens;  // the model's target units, then "<eos>"
    std::vector<double> log_probs;    // one per token
    double sum = 0;                   // their sum, in order
};

class Translator {
public:
    /// What loading does to each copy after load_model_dir: by default apply_compute_type; a front
    /// end that changes more (qkv translate's --pe-quirk, its own error messages) passes its own,
    /// which then applies the compute type itself.
    using Setup = std::function<void(ModelDir&)>;
    /// Nothing is loaded until load() or reload() succeeds.
    explicit Translator(std::string dir, ComputeType compute_type = ComputeType::fp32, Setup setup = {});
    Translator(const Translator&)            = delete;
    Translator& operator=(const Translator&) = delete;

    /// Loads the folder (load_model_dir, then apply_compute_type); on success it is the model
    /// every later borrow() gets. Loads are serialised. Throws qkv::Error from load_model_dir.
    void load();
    /// load(), then one short sentence translated under the compute type as an end-to-end check
    /// before the new model is swapped in. Returns "" on success; on failure the error message
    /// (for the log: it may name files), and the served model stays. Never throws for a bad folder.
    std::string reload();
    /// The newest loaded model, for its configuration and vocabularies (nullptr before the first
    /// load). Not for translating: a model runs one call at a time (borrow()).
    std::shared_ptr<const ModelDir> get() const;
    /// Successful loads so far (1 after the first).
    int64_t generation() const;
    const std::string& dir() const { return dir_; }
    ComputeType compute_type() const { return compute_type_; }
    /// The matrix-product precision translations run under (thread-local: the calls below set
    /// it; a caller of borrow() sets it with MatmulPrecisionGuard).
    MatmulPrecision precision() const { return matmul_precision(compute_type_); }

    /// A copy of the newest model lent to one caller; given back when destroyed (kept for later
    /// calls unless a newer model was loaded meanwhile).
    class Lease {
    public:
        ModelDir& operator*() const { return *m_; }
        ModelDir* operator->() const { return m_.get(); }
        Lease(Lease&& o) noexcept : owner_(o.owner_), m_(std::move(o.m_)), generation_(o.generation_) {}
        Lease(const Lease&)            = delete;
        Lease& operator=(const Lease&) = delete;
        Lease& operator=(Lease&&)      = delete;
        ~Lease();

    private:
        friend class Translator;
        Lease(Translator* owner, std::shared_ptr<ModelDir> m, int64_t generation)
            : owner_(owner), m_(std::move(m)), generation_(generation) {}
        Translator* owner_;
        std::shared_ptr<ModelDir> m_;
        int64_t generation_;
    };
    /// A copy for the calling thread alone: a free one, or one more loaded from the folder when
    /// every copy is lent. Throws qkv::Error "no model loaded" before the first load.
    Lease borrow();
    /// Copies of the newest model loaded so far (lent or free).
    int64_t copies() const;
    /// Calls of translate, score and attention computing now (each on its own copy). A front end
    /// that releases a lock around them (Python's GIL) can observe concurrency with it: a Python
    /// thread that reads a non-zero value ran while another thread was translating.
    int active_calls() const { return active_.load(); }

    /// translate_nbest with a borrowed copy, under precision().
    std::vector<std::vector<Translation>> translate(const std::vector<std::vector<std::string>>& src,
                                                    const TranslateOptions& opt);
    /// Teacher-forced log-probabilities of each target (words, as tokenize_sentences gives them;
    /// a subword model encodes them into pieces) given its source (words), <eos> scored last.
    /// Throws qkv::Error when the counts differ.
    std::vector<TokenScores> score(const std::vector<std::vector<std::string>>& sources,
                                   const std::vector<std::vector<std::string>>& targets);
    /// greedy_attention for each source (words); a blank source (no words) gives an empty map.
    std::vector<AttentionMap> attention(const std::vector<std::vector<std::string>>& sources, int64_t max_len,
                                        bool no_unk);

private:
    /// Counts a call in active_ for its lifetime.
    struct ActiveCall {
        explicit ActiveCall(std::atomic<int>& n) : n_(n) { ++n_; }
        ~ActiveCall() { --n_; }
        ActiveCall(const ActiveCall&)            = delete;
        ActiveCall& operator=(const ActiveCall&) = delete;
        std::atomic<int>& n_;
    };
    std::shared_ptr<ModelDir> load_copy() const;
    void give_back(std::shared_ptr<ModelDir> m, int64_t generation);

    std::string dir_;
    ComputeType compute_type_;
    Setup setup_;
    mutable std::mutex mu_;  // the fields below
    std::mutex load_mu_;     // serialises loads
    std::shared_ptr<ModelDir> newest_;
    std::vector<std::shared_ptr<ModelDir>> free_;
    int64_t generation_ = 0;
    int64_t copies_ = 0;
    std::atomic<int> active_{0};
};

}  // namespace qkv::runtime
