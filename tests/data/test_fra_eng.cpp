// Locating, reading (zip and text) and parsing sentence pairs, on small files the tests write.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zip.h>

#include <fstream>
#include <iterator>

#include <cstdlib>
#include <filesystem>

#include "support/temp_dir.h"
#include "support/test_util.h"
#include "qkv/core/error.h"
#include "qkv/data/fra_eng.h"
#include "qkv/util/atomic_file.h"

namespace qkv::data {
namespace {

using qkv::test::error_of;
using qkv::test::TempDir;

const char* kSmall =
    "Go.\tVa !\n"
    "Hi.\tSalut !\n"
    "Run!\tCours\xE2\x80\xAF!\n"
    "Who?\tQui ?\n";

// Writes a zip holding `entries` (name, content) with libzip.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& entries) {
    int err = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
    ASSERT_NE(z, nullptr) << err;
    for (const auto& [name, content] : entries) {
        if (!name.empty() && name.back() == '/') {
            ASSERT_GE(zip_dir_add(z, name.c_str(), 0), 0);
            continue;
        }
        zip_source_t* src = zip_source_buffer(z, content.data(), content.size(), 0);
        ASSERT_NE(src, nullptr);
        ASSERT_GE(zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE), 0);
    }
    ASSERT_EQ(zip_close(z), 0);
}

TEST(FraEng, ZipAndTextGiveIdenticalPairs) {
    TempDir dir;
    // Content must stay alive until zip_close: keep the strings in the vector.
    const std::vector<std::pair<std::string, std::string>> entries = {
        {"fra-eng/", ""},
        {"__MACOSX/._fra-eng", "junk"},
        {"fra-eng/_about.txt", "about"},
        {"__MACOSX/fra-eng/._fra.txt", "\x00\x05\x16\x07 not text"},
        {"fra-eng/fra.txt", kSmall}};
    write_zip(dir / "fra-eng.zip", entries);
    util::write_file_atomic(dir / "fra.txt", kSmall);
    const ParallelCorpus a = load_fra_eng(dir / "fra-eng.zip");
    const ParallelCorpus b = load_fra_eng(dir / "fra.txt");
    EXPECT_EQ(a.src, b.src);
    EXPECT_EQ(a.tgt, b.tgt);
    EXPECT_EQ(a.line, b.line);
    EXPECT_EQ(a.src, (std::vector<std::string>{"Go.", "Hi.", "Run!", "Who?"}));
    EXPECT_EQ(a.tgt[2], "Cours\xE2\x80\xAF!");  // raw: preprocessing is a later step
    EXPECT_EQ(a.line, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(a.lines_read, 4);
    EXPECT_EQ(a.malformed, 0);
    EXPECT_EQ(a.origin, dir / "fra-eng.zip" + ":fra-eng/fra.txt");
    EXPECT_EQ(a.summary(), a.origin + ": 4 pairs from 4 lines");
}

TEST(FraEng, ZipWithoutTheEntryListsWhatItHas) {
    TempDir dir;
    const std::vector<std::pair<std::string, std::string>> entries = {
        {"__MACOSX/._x", "junk"}, {"data/fra.txt", kSmall}, {"readme.md", "hi"}};
    write_zip(dir / "other.zip", entries);
    EXPECT_EQ(error_of([&] { read_fra_eng_text(dir / "other.zip"); }),
              "'" + dir / "other.zip" +
                  "' has no entry 'fra-eng/fra.txt' (entries: data/fra.txt, readme.md)");
    util::write_file_atomic(dir / "broken.zip", "PK not really");
    EXPECT_NE(error_of([&] { read_fra_eng_text(dir / "broken.zip"); }).find("cannot open the zip archive '" + dir / "broken.zip" + "'"),
              std::string::npos);
}

TEST(FraEng, DamagedStoredZipEntryIsRefused) {
    // A stored (uncompressed) entry has no deflate stream to fail: only its CRC-32 shows damage.
    TempDir dir;
    const std::string path = dir / "stored.zip";
    {
        int err = 0;
        zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
        ASSERT_NE(z, nullptr) << err;
        const std::string content = kSmall;
        zip_source_t* src = zip_source_buffer(z, content.data(), content.size(), 0);
        ASSERT_NE(src, nullptr);
        const zip_int64_t idx = zip_file_add(z, "fra-eng/fra.txt", src, ZIP_FL_OVERWRITE);
        ASSERT_GE(idx, 0);
        ASSERT_EQ(zip_set_file_compression(z, zip_uint64_t(idx), ZIP_CM_STORE, 0), 0);
        ASSERT_EQ(zip_close(z), 0);
    }
    EXPECT_EQ(read_fra_eng_text(path), kSmall);  // intact: read as is
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t at = bytes.find("Salut");
    ASSERT_NE(at, std::string::npos);
    bytes[at] = 'Z';  // one byte of the stored text changed, sizes and headers intact
    util::write_file_atomic(path, bytes);
    const std::string msg = error_of([&] { read_fra_eng_text(path); });
    EXPECT_NE(msg.find("'fra-eng/fra.txt' in '" + path + "' is damaged"), std::string::npos) << msg;
}

// Found by tests/fuzz/fuzz_fra_eng: a 391-byte archive whose entry claims 4,177,527,110 bytes was
// read into a string allocated (and zero-filled) at that size first. The peak RSS shows it.
TEST(FraEng, ZipEntryClaimingGigabytesIsNotAllocatedAtItsClaim) {
    const std::string path = std::string(QKV_FIXTURE_DIR) + "/zip_entry_claims_4gib.zip";
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    const std::string msg = error_of([&] { read_fra_eng_text(path); });
    getrusage(RUSAGE_SELF, &after);
    EXPECT_NE(msg.find("reading 'fra-eng/fra.txt' in '" + path + "' failed after"), std::string::npos) << msg;
    EXPECT_NE(msg.find("of 4177527110 bytes"), std::string::npos) << msg;
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "peak RSS grew by " << after.ru_maxrss - before.ru_maxrss
                                                            << " KiB";
}

TEST(FraEng, MalformedLinesReportedWithLineNumbers) {
    const std::string text =
        "Go.\tVa !\n"           // 1 ok
        "no tab here\n"         // 2
        "A.\tB.\tCC-BY #1\n"    // 3: 3 fields
        "\n"                    // 4: empty
        " \tVide.\n"            // 5: empty English
        "Hi.\t\xC2\xA0\n"       // 6: blank French (NBSP only)
        "Bad \xff.\tMal.\n"     // 7: invalid UTF-8
        "Ok.\tD'accord.\r\n"    // 8 ok (CR dropped)
        "Long.\t" + std::string(1001, 'x') + "\n"  // 9: too long
        "Last.\tDernier.";      // 10 ok, no final newline
    const ParallelCorpus c = parse_parallel_text(text, {}, "t.txt");
    EXPECT_EQ(c.src, (std::vector<std::string>{"Go.", "Ok.", "Last."}));
    EXPECT_EQ(c.tgt, (std::vector<std::string>{"Va !", "D'accord.", "Dernier."}));
    EXPECT_EQ(c.line, (std::vector<int64_t>{0, 7, 9}));
    EXPECT_EQ(c.lines_read, 10);
    EXPECT_EQ(c.malformed, 7);
    ASSERT_EQ(c.first_malformed.size(), 5u);
    EXPECT_EQ(c.summary(),
              "t.txt: 3 pairs from 10 lines; 7 malformed lines skipped (line 2: no TAB; line 3: "
              "3 TAB-separated fields (want 2); line 4: empty line; line 5: empty English side; "
              "line 6: empty French side; ...)");
    ParseOptions more;
    more.report_first = 10;
    const ParallelCorpus d = parse_parallel_text(text, more, "t.txt");
    ASSERT_EQ(d.first_malformed.size(), 7u);
    EXPECT_EQ(d.first_malformed[5].line, 7);
    EXPECT_EQ(d.first_malformed[5].reason, "invalid UTF-8");
    EXPECT_EQ(d.first_malformed[6].line, 9);
    EXPECT_EQ(d.first_malformed[6].reason, "a side is longer than 1000 characters");

    ParseOptions strict;
    strict.strict = true;
    EXPECT_EQ(error_of([&] { parse_parallel_text(text, strict, "t.txt"); }),
              "t.txt: line 2: no TAB");

    ParseOptions extra;
    extra.allow_extra_fields = true;
    const ParallelCorpus e = parse_parallel_text(text, extra, "t.txt");
    EXPECT_EQ(e.src, (std::vector<std::string>{"Go.", "A.", "Ok.", "Last."}));
    EXPECT_EQ(e.tgt[1], "B.");
}

TEST(FraEng, NulByteIsMalformed) {
    // A NUL is well-formed UTF-8 (U+0000) but no text: tokenised, the word holding it is <unk>.
    using namespace std::string_literals;
    const std::string text = "Go.\tVa !\nI\0 lost.\tJ'ai perdu.\nHi.\tSa\0lut !\nWho?\tQui ?\n"s;
    const ParallelCorpus c = parse_parallel_text(text, {}, "t.txt");
    EXPECT_EQ(c.src, (std::vector<std::string>{"Go.", "Who?"}));
    EXPECT_EQ(c.line, (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(c.malformed, 2);
    EXPECT_EQ(c.summary(), "t.txt: 2 pairs from 4 lines; 2 malformed lines skipped (line 2: NUL byte (byte "
                           "offset 1); line 3: NUL byte (byte offset 6))");
    ParseOptions strict;
    strict.strict = true;
    EXPECT_EQ(error_of([&] { parse_parallel_text(text, strict, "t.txt"); }),
              "t.txt: line 2: NUL byte (byte offset 1)");
}

TEST(FraEng, MaxLinesAndEmptyInput) {
    ParseOptions o;
    o.max_lines = 2;
    const ParallelCorpus c = parse_parallel_text(kSmall, o);
    EXPECT_EQ(c.size(), 2);
    EXPECT_EQ(c.lines_read, 2);
    EXPECT_EQ(error_of([] { parse_parallel_text("", {}, "empty.txt"); }),
              "empty.txt: no sentence pairs found (0 lines read)");  // no ". " with nothing after it
    EXPECT_EQ(parse_parallel_text("Go.\tVa !\n", {}, "one.txt").summary(), "one.txt: 1 pair from 1 line");
    EXPECT_NE(error_of([] { parse_parallel_text("x\ny\n", {}, "bad.txt"); })
                  .find("2 malformed lines skipped (line 1: no TAB; line 2: no TAB)"),
              std::string::npos);
}

TEST(FraEng, LocateByFlagEnvFolderAndDefault) {
    TempDir dir;
    util::write_file_atomic(dir / "fra.txt", kSmall);
    EXPECT_EQ(locate_fra_eng(dir / "fra.txt"), dir / "fra.txt");
    EXPECT_EQ(locate_fra_eng(dir.path().string()), dir / "fra.txt");  // folder search
    std::filesystem::create_directories(dir / "fra-eng");
    util::write_file_atomic(dir / "fra-eng/fra.txt", kSmall);
    EXPECT_EQ(locate_fra_eng(dir.path().string()), dir / "fra-eng/fra.txt");

    const char* old = std::getenv("QKV_DATA");
    const std::string saved = old ? old : "";
    ::setenv("QKV_DATA", (dir / "fra.txt").c_str(), 1);
    EXPECT_EQ(locate_fra_eng(), dir / "fra.txt");
    EXPECT_EQ(locate_fra_eng(dir / "fra-eng/fra.txt"), dir / "fra-eng/fra.txt");  // flag wins
    ::setenv("QKV_DATA", (dir / "missing.zip").c_str(), 1);
    const std::string env_msg = error_of([] { locate_fra_eng(); });
    EXPECT_NE(env_msg.find(dir / "missing.zip" + " (from QKV_DATA)"), std::string::npos) << env_msg;

    ::unsetenv("QKV_DATA");
    const std::string flag_msg = error_of([&] { locate_fra_eng(dir / "nope.zip"); });
    EXPECT_NE(flag_msg.find("fra-eng data not found: looked for " + dir / "nope.zip" +
                            " (given path)"),
              std::string::npos)
        << flag_msg;
    EXPECT_NE(flag_msg.find("http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"),
              std::string::npos);
    EXPECT_NE(flag_msg.find("www.manythings.org/anki"), std::string::npos);
    EXPECT_NE(flag_msg.find("tatoeba.org"), std::string::npos);
    EXPECT_NE(flag_msg.find("CC BY 2.0"), std::string::npos);

    // The default is relative to the working directory: from an empty folder it is absent.
    const auto cwd = std::filesystem::current_path();
    std::filesystem::create_directories(dir / "a/b");
    std::filesystem::current_path(dir / "a/b");
    const std::string def_msg = error_of([] { locate_fra_eng(); });
    std::filesystem::current_path(cwd);
    EXPECT_NE(def_msg.find("../shared/data/fra-eng.zip (the default; no path given and QKV_DATA "
                           "unset)"),
              std::string::npos)
        << def_msg;
    if (old) ::setenv("QKV_DATA", saved.c_str(), 1);
}

}  // namespace
}  // namespace qkv::data
