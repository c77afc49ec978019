// Vocabulary files (src_vocab.txt / tgt_vocab.txt of a model folder): data::Vocab::load.
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/data/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto v = qkv::data::Vocab::load(qkv::fuzz::write_scratch("vocab.txt", qkv::fuzz::as_text(data, size)));
        // A loaded vocabulary answers lookups of its own tokens with their index.
        for (int64_t i = 0; i < v.size(); ++i)
            if (v.token_to_idx(v.idx_to_token(i)) != i) __builtin_trap();
    } catch (const qkv::Error&) {
    }
    return 0;
}
