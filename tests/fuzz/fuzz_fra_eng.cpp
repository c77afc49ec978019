// Corpus lines "English<TAB>French" (fra-eng's fra.txt, any TSV given to --data):
// data::parse_parallel_text under the option combinations the CLI can ask for (first byte), then
// D2L's preprocessing and tokenisation of every pair kept. An input starting with "PK" is also
// read as a zip archive (fra-eng.zip) through data::load_fra_eng.
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/data/fra_eng.h"
#include "qkv/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t flags = data[0];
    std::string_view text = qkv::fuzz::as_text(data + 1, size - 1);
    qkv::data::ParseOptions opt;
    opt.strict = flags & 1;
    opt.allow_extra_fields = flags & 2;
    opt.max_chars = (flags & 4) ? 8 : 1000;
    opt.max_lines = (flags & 8) ? 3 : -1;
    try {
        auto c = qkv::data::parse_parallel_text(text, opt, "<fuzz>");
        if (c.src.size() != c.tgt.size() || c.line.size() != c.src.size()) __builtin_trap();
        for (int64_t i = 0; i < c.size(); ++i) {
            (void)qkv::data::tokenize_nmt(qkv::data::preprocess_nmt(c.src[size_t(i)]));
            (void)qkv::data::tokenize_nmt(qkv::data::preprocess_nmt(c.tgt[size_t(i)]));
        }
        (void)c.summary();
    } catch (const qkv::Error&) {
    }
    if (text.substr(0, 2) == "PK") {
        try {
            (void)qkv::data::load_fra_eng(qkv::fuzz::write_scratch("fra-eng.zip", text), opt);
        } catch (const qkv::Error&) {
        }
    }
    return 0;
}
