// TSV and line-aligned file-pair corpora, plain or gzip-compressed (data/corpus.h).
#include "qkv/data/corpus.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::data {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_regular_file(const std::string& path) {
    std::error_code ec;
    QKV_CHECK(fs::exists(path, ec), "corpus file '", path, "' does not exist");
    QKV_CHECK(!fs::is_directory(path, ec), "corpus file '", path, "' is a folder, not a file");
}

std::string read_gzip(const std::string& path) {
    std::unique_ptr<gzFile_s, decltype(&gzclose)> gz(gzopen(path.c_str(), "rb"), &gzclose);
    QKV_CHECK(gz != nullptr, "cannot open '", path, "'");
    std::string text;
    std::vector<char> chunk(1 << 16);
    for (;;) {
        const int r = gzread(gz.get(), chunk.data(), unsigned(chunk.size()));
        if (r > 0) text.append(chunk.data(), size_t(r));  // the whole bytes before an error count
        int err = Z_OK;
        const char* msg = gzerror(gz.get(), &err);
        // zlib reports a stream cut short as Z_BUF_ERROR ("unexpected end of file") and damaged
        // data as Z_DATA_ERROR, with or without bytes in this read.
        QKV_CHECK(r >= 0 && (err == Z_OK || err == Z_STREAM_END), "'", path,
                  "': truncated or corrupt gzip data after ", text.size(), " bytes, in line ",
                  1 + std::count(text.begin(), text.end(), '\n'), " of the decompressed text (",
                  msg ? msg : "zlib error", ")");
        if (r == 0) break;
        QKV_CHECK((long long)text.size() <= kMaxCorpusBytes, "'", path, "' decompresses to more than ",
                  kMaxCorpusBytes, " bytes; refusing it");
    }
    return text;
}

/// The lines of `text` split on '\n' (a trailing '\r' removed; no line after a final '\n'), a
/// UTF-8 byte-order mark dropped from the first.
std::vector<std::string_view> split_lines(std::string_view text) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    std::vector<std::string_view> lines;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.push_back(line);
        start = end + 1;
    }
    return lines;
}

}  // namespace

CorpusFormat corpus_format(const std::string& path) {
    if (path.empty() || ends_with(path, ".zip") || fs::path(path).filename() == "fra.txt") return CorpusFormat::fra_eng;
    std::error_code ec;
    if (fs::is_directory(path, ec)) return CorpusFormat::fra_eng;
    return CorpusFormat::tsv;
}

std::string read_corpus_file(const std::string& path) {
    check_regular_file(path);
    std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    QKV_CHECK(f != nullptr, "cannot open '", path, "'");
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, f.get());
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) return read_gzip(path);
    std::string text(reinterpret_cast<const char*>(magic), got);
    std::vector<char> chunk(1 << 16);
    size_t r = 0;
    while ((r = std::fread(chunk.data(), 1, chunk.size(), f.get())) > 0) {
        text.append(chunk.data(), r);
        QKV_CHECK((long long)text.size() <= kMaxCorpusBytes, "'", path, "' is larger than ", kMaxCorpusBytes,
                  " bytes; refusing it");
    }
    QKV_CHECK(!std::ferror(f.get()), "reading '", path, "' failed after ", text.size(), " bytes");
    return text;
}

ParallelCorpus load_tsv_corpus(const std::string& path, ParseOptions opt) {
    opt.src_side = "source";
    opt.tgt_side = "target";
    return parse_parallel_text(read_corpus_file(path), opt, path);
}

ParallelCorpus load_file_pair(const std::string& src_path, const std::string& tgt_path, const ParseOptions& opt) {
    const std::string src_text = read_corpus_file(src_path);
    const std::string tgt_text = read_corpus_file(tgt_path);
    const auto src = split_lines(src_text), tgt = split_lines(tgt_text);
    if (src.size() != tgt.size()) {
        const bool src_longer = src.size() > tgt.size();
        throw Error(detail::str("'", src_path, "' has ", src.size(), " lines, '", tgt_path, "' has ", tgt.size(),
                                ": line ", std::min(src.size(), tgt.size()) + 1, " of '",
                                src_longer ? src_path : tgt_path,
                                "' has no partner (the two files must be line-aligned: line i of one translates "
                                "line i of the other)"));
    }
    ParallelCorpus c;
    c.origin = src_path + " + " + tgt_path;
    const size_t n = opt.max_lines < 0 ? src.size() : std::min(src.size(), size_t(opt.max_lines));
    for (size_t i = 0; i < n; ++i) {
        std::string reason = side_problem(src[i], "source", opt);
        const std::string* file = &src_path;
        if (reason.empty()) {
            reason = side_problem(tgt[i], "target", opt);
            file   = &tgt_path;
        }
        if (!reason.empty()) {
            QKV_CHECK(!opt.strict, "'", *file, "': line ", i + 1, ": ", reason);
            ++c.malformed;
            if (int64_t(c.first_malformed.size()) < opt.report_first)
                c.first_malformed.push_back({int64_t(i) + 1, *file + ": " + reason});
            continue;
        }
        c.src.emplace_back(src[i]);
        c.tgt.emplace_back(tgt[i]);
        c.line.push_back(int64_t(i));
    }
    c.lines_read = int64_t(n);
    QKV_CHECK(!c.src.empty(), c.origin, ": no sentence pairs found (", c.lines_read,
              c.lines_read == 1 ? " line read)" : " lines read)", c.malformed ? ". " + c.summary() : "");
    return c;
}

}  // namespace qkv::data
