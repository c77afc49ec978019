// SentencePiece .model files (src.model / tgt.model of a subword model folder):
// data::SubwordModel::from_bytes, then, for a model it accepts, its vocabulary and an
// encode/decode round trip of a few words (what translate does with it).
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/data/subword.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto m = qkv::data::SubwordModel::from_bytes(std::string(qkv::fuzz::as_text(data, size)));
        auto v = m.vocab();
        if (v.size() != m.size()) __builtin_trap();
        auto pieces = m.encode(std::vector<std::string>{"je", "suis", "chez", "moi", "."});
        (void)m.decode(pieces);
    } catch (const qkv::Error&) {
    }
    return 0;
}
