// Parallel corpora of one's own (data/corpus.h): the bytes as a file read by read_corpus_file
// (plain, or gzip when they start with 1f 8b: truncated and damaged streams), as a TSV corpus, and
// split at the first 0xFF byte into a line-aligned file pair, under the parse options the CLI can
// ask for (first byte). Every pair kept is tokenised as training would.
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/data/corpus.h"
#include "qkv/data/tokenizer.h"

namespace {

void check(const qkv::data::ParallelCorpus& c) {
    if (c.src.size() != c.tgt.size() || c.line.size() != c.src.size() || c.src.empty()) __builtin_trap();
    for (int64_t i = 0; i < c.size(); ++i) {
        (void)qkv::data::tokenize_nmt(c.src[size_t(i)]);
        (void)qkv::data::tokenize_nmt(c.tgt[size_t(i)]);
    }
    (void)c.summary();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t flags = data[0];
    const std::string_view bytes = qkv::fuzz::as_text(data + 1, size - 1);
    qkv::data::ParseOptions opt;
    opt.strict             = flags & 1;
    opt.allow_extra_fields = flags & 2;
    opt.max_chars          = (flags & 4) ? 8 : 1000;
    opt.max_lines          = (flags & 8) ? 3 : -1;
    try {
        check(qkv::data::load_tsv_corpus(qkv::fuzz::write_scratch("corpus.tsv", bytes), opt));
    } catch (const qkv::Error&) {
    }
    const size_t cut = bytes.find('\xFF');
    if (cut != std::string_view::npos) {
        try {
            check(qkv::data::load_file_pair(qkv::fuzz::write_scratch("pair.src", bytes.substr(0, cut)),
                                            qkv::fuzz::write_scratch("pair.tgt", bytes.substr(cut + 1)), opt));
        } catch (const qkv::Error&) {
        }
    }
    return 0;
}
