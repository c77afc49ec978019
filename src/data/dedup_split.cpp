// The source-disjoint held-out split (data/dedup_split.h).
#include "qkv/data/dedup_split.h"

#include <algorithm>
#include <unordered_map>

#include "qkv/core/error.h"
#include "qkv/data/split.h"
#include "qkv/data/text.h"
#include "qkv/data/tokenizer.h"

namespace qkv::data {

SourceDisjointSplit source_disjoint_split(const std::vector<std::string>& sources, int64_t n_valid,
                                          int64_t n_test, uint64_t seed) {
    QKV_CHECK(n_valid >= 0 && n_test >= 0, "source_disjoint_split: n_valid and n_test must be >= 0, got ",
              n_valid, " and ", n_test);
    std::unordered_map<std::string, int64_t> group_of;
    std::vector<std::vector<int64_t>> groups;  // pair indices per source, file order
    for (size_t i = 0; i < sources.size(); ++i) {
        std::string key = is_valid_utf8(sources[i]) ? normalize_nmt_nfkc(sources[i]) : sources[i];
        const auto [it, added] = group_of.emplace(std::move(key), int64_t(groups.size()));
        if (added) groups.emplace_back();
        groups[size_t(it->second)].push_back(int64_t(i));
    }
    const int64_t g = int64_t(groups.size());
    QKV_CHECK(g >= n_valid + n_test + 1, "source_disjoint_split: ", g, " distinct sources in ", sources.size(),
              " pairs; need more than n_valid + n_test = ", n_valid + n_test);
    SourceDisjointSplit r;
    r.distinct_sources = g;
    const std::vector<int64_t> order = shuffled_indices(g, seed);
    std::vector<char> held(size_t(g), 0);
    for (int64_t k = 0; k < n_test + n_valid; ++k) {
        const int64_t grp = order[size_t(g - 1 - k)];  // from the end: test first, then valid
        held[size_t(grp)] = 1;
        (k < n_test ? r.test : r.valid).push_back(groups[size_t(grp)].front());
        r.unused += int64_t(groups[size_t(grp)].size()) - 1;
    }
    // test and valid in the order of `order` (as shuffled_split lists its slices)
    std::reverse(r.test.begin(), r.test.end());
    std::reverse(r.valid.begin(), r.valid.end());
    for (int64_t grp = 0; grp < g; ++grp)
        if (!held[size_t(grp)]) r.train.insert(r.train.end(), groups[size_t(grp)].begin(), groups[size_t(grp)].end());
    std::sort(r.train.begin(), r.train.end());
    return r;
}

}  // namespace qkv::data
