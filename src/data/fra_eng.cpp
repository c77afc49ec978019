// Locating, reading (zip or text) and parsing the fra-eng pairs (data/fra_eng.h).
#include "qkv/data/fra_eng.h"

#include <zip.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/data/tokenizer.h"
#include "qkv/util/atomic_file.h"

namespace qkv::data {
namespace fs = std::filesystem;

namespace {

constexpr const char* kZipEntry = "fra-eng/fra.txt";

bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// A side made only of spaces and the two non-breaking spaces D2L maps to spaces.
bool is_blank(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (s[i] == ' ') {
            ++i;
        } else if (s.compare(i, 2, "\xC2\xA0") == 0) {
            i += 2;
        } else if (s.compare(i, 3, "\xE2\x80\xAF") == 0) {
            i += 3;
        } else {
            return false;
        }
    }
    return true;
}

std::string not_found(const std::string& tried, const std::string& why) {
    return detail::str("fra-eng data not found: looked for ", tried, " (", why,
                       "). Download ", kFraEngUrl,
                       " and pass the .zip (or fra.txt, or a folder holding either) with --data "
                       "PATH or the environment variable QKV_DATA. The data is ",
                       kFraEngAttribution, ".");
}

}  // namespace

std::string locate_fra_eng(const std::string& explicit_path) {
    std::string path, why;
    if (!explicit_path.empty()) {
        path = explicit_path;
        why  = "given path";
    } else if (const char* env = std::getenv("QKV_DATA"); env && *env) {
        path = env;
        why  = "from QKV_DATA";
    } else {
        path = kFraEngDefaultPath;
        why  = "the default; no path given and QKV_DATA unset";
    }
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        std::string tried;
        for (const char* name : {"fra-eng.zip", "fra-eng/fra.txt", "fra.txt"}) {
            const std::string p = (fs::path(path) / name).string();
            if (fs::is_regular_file(p, ec)) return p;
            tried += (tried.empty() ? "" : ", ") + p;
        }
        throw Error(not_found(tried + " in folder " + path, why));
    }
    if (fs::is_regular_file(path, ec)) return path;
    throw Error(not_found(path, why));
}

std::string read_fra_eng_text(const std::string& path) {
    if (!ends_with(path, ".zip")) return util::read_file(path);
    int err = 0;
    std::unique_ptr<zip_t, decltype(&zip_discard)> za(zip_open(path.c_str(), ZIP_RDONLY, &err),
                                                     &zip_discard);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, err);
        const std::string msg = zip_error_strerror(&ze);
        zip_error_fini(&ze);
        throw Error(detail::str("cannot open the zip archive '", path, "': ", msg));
    }
    const zip_int64_t idx = zip_name_locate(za.get(), kZipEntry, 0);
    if (idx < 0) {
        std::string names;
        const zip_int64_t n = zip_get_num_entries(za.get(), 0);
        for (zip_int64_t i = 0; i < n; ++i) {
            const char* name = zip_get_name(za.get(), zip_uint64_t(i), 0);
            if (!name || std::string(name).rfind("__MACOSX/", 0) == 0) continue;
            names += (names.empty() ? "" : ", ") + std::string(name);
        }
        throw Error(detail::str("'", path, "' has no entry '", kZipEntry,
                                "' (entries: ", names.empty() ? "none" : names, ")"));
    }
    zip_stat_t st;
    zip_stat_init(&st);
    QKV_CHECK(zip_stat_index(za.get(), zip_uint64_t(idx), 0, &st) == 0 &&
                  (st.valid & ZIP_STAT_SIZE),
              "cannot stat '", kZipEntry, "' in '", path, "'");
    QKV_CHECK(st.size < (zip_uint64_t(1) << 32), "'", kZipEntry, "' in '",
              path, "' claims ", st.size, " bytes; refusing more than 4 GiB");
    std::unique_ptr<zip_file_t, decltype(&zip_fclose)> zf(
        zip_fopen_index(za.get(), zip_uint64_t(idx), 0), &zip_fclose);
    QKV_CHECK(zf != nullptr, "cannot open '", kZipEntry, "' in '", path,
              "': ", zip_strerror(za.get()));
    // Grown as the data arrives, not allocated at the size the entry claims: a 391-byte archive
    // whose entry claimed 4,177,527,110 bytes made qkv allocate them (tests/fuzz/fuzz_fra_eng).
    std::string text;
    char chunk[1 << 16];
    while (text.size() < st.size) {
        const zip_int64_t r =
            zip_fread(zf.get(), chunk, std::min<zip_uint64_t>(sizeof chunk, st.size - text.size()));
        QKV_CHECK(r > 0, "reading '", kZipEntry, "' in '", path,
                  "' failed after ", text.size(), " of ", st.size, " bytes: ",
                  r < 0 ? std::string(zip_file_strerror(zf.get())) : std::string("the data ends early"));
        text.append(chunk, size_t(r));
    }
    // libzip checks the entry's CRC-32 only when a read reaches the end of the data: without this
    // last read a damaged stored (uncompressed) entry was accepted.
    char past_end = 0;
    const zip_int64_t tail = zip_fread(zf.get(), &past_end, 1);
    QKV_CHECK(tail == 0, "'", kZipEntry, "' in '", path, "' is damaged: ",
              tail < 0 ? std::string(zip_file_strerror(zf.get())) : std::string("longer than its recorded size"),
              " (download the archive again)");
    return text;
}

std::string ParallelCorpus::summary() const {
    std::string s = detail::str(origin, ": ", size(), size() == 1 ? " pair" : " pairs", " from ", lines_read,
                                    lines_read == 1 ? " line" : " lines");
    if (malformed > 0) {
        s += detail::str("; ", malformed, " malformed line", malformed == 1 ? "" : "s",
                         " skipped (");
        for (size_t i = 0; i < first_malformed.size(); ++i)
            s += detail::str(i ? "; " : "", "line ", first_malformed[i].line, ": ",
                             first_malformed[i].reason);
        if (malformed > int64_t(first_malformed.size())) s += "; ...";
        s += ")";
    }
    return s;
}

ParallelCorpus parse_parallel_text(std::string_view text, const ParseOptions& opt,
                                   const std::string& origin) {
    ParallelCorpus c;
    c.origin = origin;
    size_t start = 0;
    int64_t lineno = 0;
    while (start < text.size() && (opt.max_lines < 0 || lineno < opt.max_lines)) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(start, end - start);
        start = end + 1;
        const int64_t index = lineno++;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

        std::string reason;
        std::string_view en, fr;
        const size_t tab = line.find('\t');
        if (tab == std::string_view::npos) {
            reason = line.empty() ? "empty line" : "no TAB";
        } else {
            en = line.substr(0, tab);
            fr = line.substr(tab + 1);
            const size_t tab2 = fr.find('\t');
            if (tab2 != std::string_view::npos) {
                if (opt.allow_extra_fields) {
                    fr = fr.substr(0, tab2);
                } else {
                    int64_t fields = 2;
                    for (char ch : fr.substr(tab2)) fields += ch == '\t';
                    reason = detail::str(fields, " TAB-separated fields (want 2)");
                }
            }
        }
        if (reason.empty()) {
            if (!is_valid_utf8(line))
                reason = "invalid UTF-8";
            else if (const size_t nul = line.find('\0'); nul != std::string_view::npos)
                reason = detail::str("NUL byte (byte offset ", nul, ")");  // tokenised, it is <unk>
            else if (is_blank(en))
                reason = "empty " + opt.src_side + " side";
            else if (is_blank(fr))
                reason = "empty " + opt.tgt_side + " side";
            else if (utf8_length(en) > opt.max_chars || utf8_length(fr) > opt.max_chars)
                reason = detail::str("a side is longer than ", opt.max_chars, " characters");
        }
        if (!reason.empty()) {
            QKV_CHECK(!opt.strict, origin, ": line ", index + 1, ": ", reason);
            ++c.malformed;
            if (int64_t(c.first_malformed.size()) < opt.report_first)
                c.first_malformed.push_back({index + 1, reason});
            continue;
        }
        c.src.emplace_back(en);
        c.tgt.emplace_back(fr);
        c.line.push_back(index);
    }
    c.lines_read = lineno;
    QKV_CHECK(!c.src.empty(), origin, ": no sentence pairs found (", c.lines_read,
              c.lines_read == 1 ? " line read)" : " lines read)", c.malformed ? ". " + c.summary() : "");
    return c;
}

std::string side_problem(std::string_view text, const std::string& side, const ParseOptions& opt) {
    if (const size_t bad = invalid_utf8_offset(text); bad != std::string_view::npos)
        return detail::str("invalid UTF-8 (byte offset ", bad, ")");
    if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
        return detail::str("NUL byte (byte offset ", nul, ")");
    if (is_blank(text)) return "empty " + side + " side";
    if (utf8_length(text) > opt.max_chars)
        return detail::str("the ", side, " side is longer than ", opt.max_chars, " characters");
    return "";
}

ParallelCorpus load_fra_eng(const std::string& path, const ParseOptions& opt) {
    const std::string origin = ends_with(path, ".zip") ? path + ":" + kZipEntry : path;
    return parse_parallel_text(read_fra_eng_text(path), opt, origin);
}

}  // namespace qkv::data
