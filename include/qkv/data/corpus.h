#pragma once
// Parallel corpora besides fra-eng: a TSV file (source TAB target per line, optionally
// gzip-compressed) and a pair of line-aligned files (one sentence per line each, optionally
// gzip-compressed), read into the same ParallelCorpus the fra-eng reader gives (data/fra_eng.h).
// Text only: tokenising is data/tokenizer.h or data/subword.h.
#include <string>

#include "qkv/data/fra_eng.h"

namespace qkv::data {

/// How a training --data path is read.
enum class CorpusFormat {
    fra_eng,  // "" (QKV_DATA or the default), a folder, a .zip, or a file named fra.txt
    tsv,      // any other file: source TAB target per line (gzip detected by its magic bytes)
};

/// The format of a --data path by the rules above (no file is opened).
CorpusFormat corpus_format(const std::string& path);

/// Largest file (after decompression) the readers accept, in bytes: 4 GiB.
constexpr long long kMaxCorpusBytes = 4LL << 30;

/// The bytes of a file, decompressed when it starts with the gzip magic bytes 1f 8b (zlib;
/// concatenated members allowed). Throws qkv::Error naming the file when it is missing, a
/// folder, unreadable, a truncated or corrupt gzip stream ("truncated or corrupt gzip data after
/// N bytes, in line L of the decompressed text"), or larger than kMaxCorpusBytes.
std::string read_corpus_file(const std::string& path);

/// A TSV corpus: read_corpus_file + parse_parallel_text with the sides named "source" and
/// "target" (a third column is malformed unless opt.allow_extra_fields). Malformed lines are
/// skipped and reported in ParallelCorpus::summary() with their line numbers, or throw under
/// opt.strict. Throws qkv::Error when the file cannot be read or holds no pair.
ParallelCorpus load_tsv_corpus(const std::string& path, ParseOptions opt = {});

/// Two line-aligned files, line i of `src_path` translating line i of `tgt_path` (a trailing
/// '\r' is removed, as is a UTF-8 byte-order mark at the start of either file). A pair with a
/// malformed side (side_problem: invalid UTF-8, NUL, blank, longer than opt.max_chars) is
/// skipped and reported as "line N: <file>: <reason>", or throws under opt.strict. Throws
/// qkv::Error naming both files when their line counts differ ("'a.en' has 10 lines, 'b.fr' has
/// 8: line 9 of 'a.en' has no partner"), when a file cannot be read (read_corpus_file), or when
/// no pair remains. ParallelCorpus::origin is "a.en + b.fr".
ParallelCorpus load_file_pair(const std::string& src_path, const std::string& tgt_path,
                              const ParseOptions& opt = {});

}  // namespace qkv::data
