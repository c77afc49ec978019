// TSV corpora (plain and gzip) and line-aligned file pairs (data/corpus.h), on files written here.
#include <algorithm>
#include <cstdio>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "qkv/core/error.h"
#include "qkv/data/corpus.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace qkv::data {
namespace {

using qkv::test::error_of;
using qkv::test::TempDir;

void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    ASSERT_TRUE(f.good()) << path;
}

std::string gzip_bytes(const std::string& text) {
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);  // +16: gzip wrapper
    std::string out(deflateBound(&zs, uLong(text.size())) + 32, '\0');
    zs.next_in   = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    zs.avail_in  = uInt(text.size());
    zs.next_out  = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = uInt(out.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

const std::string kTsv = "Bonjour .\tHello .\nMerci !\tThank you !\n\xE3\x81\x82\xE3\x82\x8A\xE3\x81\x8C\xE3\x81\xA8\xE3\x81\x86\tthanks\n";

TEST(Corpus, FormatByPath) {
    TempDir t;
    EXPECT_EQ(corpus_format(""), CorpusFormat::fra_eng);
    EXPECT_EQ(corpus_format("x/fra-eng.zip"), CorpusFormat::fra_eng);
    EXPECT_EQ(corpus_format("somewhere/fra.txt"), CorpusFormat::fra_eng);
    EXPECT_EQ(corpus_format(t.path().string()), CorpusFormat::fra_eng);  // a folder is searched for fra-eng
    EXPECT_EQ(corpus_format("de-en.tsv"), CorpusFormat::tsv);
    EXPECT_EQ(corpus_format("de-en.tsv.gz"), CorpusFormat::tsv);
    EXPECT_EQ(corpus_format("pairs.txt"), CorpusFormat::tsv);
}

TEST(Corpus, TsvPlainAndGzipGiveTheSamePairs) {
    TempDir t;
    write_text(t / "a.tsv", kTsv);
    write_text(t / "a.tsv.gz", gzip_bytes(kTsv));
    write_text(t / "noext", gzip_bytes(kTsv));  // gzip is found by its magic bytes, not the name
    const ParallelCorpus plain = load_tsv_corpus(t / "a.tsv");
    ASSERT_EQ(plain.size(), 3);
    EXPECT_EQ(plain.src[0], "Bonjour .");
    EXPECT_EQ(plain.tgt[1], "Thank you !");
    EXPECT_EQ(plain.src[2], "\xE3\x81\x82\xE3\x82\x8A\xE3\x81\x8C\xE3\x81\xA8\xE3\x81\x86");
    for (const char* f : {"a.tsv.gz", "noext"}) {
        const ParallelCorpus gz = load_tsv_corpus(t / f);
        EXPECT_EQ(gz.src, plain.src) << f;
        EXPECT_EQ(gz.tgt, plain.tgt) << f;
        EXPECT_EQ(gz.line, plain.line) << f;
    }
    EXPECT_EQ(read_corpus_file(t / "a.tsv.gz"), kTsv);
}

TEST(Corpus, TruncatedOrCorruptGzipIsRefusedNamingTheFile) {
    TempDir t;
    std::string big;
    for (int i = 0; i < 2000; ++i) big += "sentence " + std::to_string(i) + " .\tphrase " + std::to_string(i * 7) + " .\n";
    const std::string gz = gzip_bytes(big);
    write_text(t / "cut.gz", gz.substr(0, gz.size() / 2));
    const std::string cut = error_of([&] { read_corpus_file(t / "cut.gz"); });
    EXPECT_NE(cut.find(t / "cut.gz"), std::string::npos) << cut;
    EXPECT_NE(cut.find("truncated or corrupt gzip"), std::string::npos) << cut;
    // ... and where: N whole decompressed bytes, the line the cut falls in.
    long long n = -1, line = -1;
    const size_t at = cut.find("data after ");
    ASSERT_NE(at, std::string::npos) << cut;
    ASSERT_EQ(std::sscanf(cut.c_str() + at, "data after %lld bytes, in line %lld", &n, &line), 2) << cut;
    ASSERT_GT(n, 0);
    ASSERT_LT(n, (long long)big.size());
    EXPECT_EQ(line, 1 + std::count(big.begin(), big.begin() + n, '\n')) << cut;
    // The stream's last 8 bytes (CRC-32, length) only: the data is whole, its check is not.
    write_text(t / "nocrc.gz", gz.substr(0, gz.size() - 8));
    EXPECT_NE(error_of([&] { read_corpus_file(t / "nocrc.gz"); }).find("truncated or corrupt gzip"), std::string::npos);
    std::string bad = gz;
    bad[bad.size() / 2] = char(bad[bad.size() / 2] ^ 0x5a);
    write_text(t / "bad.gz", bad);
    EXPECT_NE(error_of([&] { read_corpus_file(t / "bad.gz"); }).find("truncated or corrupt gzip"), std::string::npos);
}

TEST(Corpus, MissingFileAndFolderAreNamed) {
    TempDir t;
    EXPECT_NE(error_of([&] { load_tsv_corpus(t / "none.tsv"); }).find("'" + (t / "none.tsv") + "' does not exist"),
              std::string::npos);
    EXPECT_NE(error_of([&] { read_corpus_file(t.path().string()); }).find("is a folder"), std::string::npos);
}

TEST(Corpus, TsvMalformedLinesAreReportedWithTheirLineAndSides) {
    TempDir t;
    write_text(t / "m.tsv", "a .\tb .\nno tab here\nc .\t \nd .\te .\tthird\nf\xFF .\tg .\nh .\ti .\n");
    const ParallelCorpus c = load_tsv_corpus(t / "m.tsv");
    EXPECT_EQ(c.size(), 2);
    EXPECT_EQ(c.malformed, 4);
    const std::string s = c.summary();
    EXPECT_NE(s.find("line 2: no TAB"), std::string::npos) << s;
    EXPECT_NE(s.find("line 3: empty target side"), std::string::npos) << s;
    EXPECT_NE(s.find("line 4: 3 TAB-separated fields"), std::string::npos) << s;
    EXPECT_NE(s.find("line 5: invalid UTF-8"), std::string::npos) << s;
    ParseOptions strict;
    strict.strict = true;
    const std::string e = error_of([&] { load_tsv_corpus(t / "m.tsv", strict); });
    EXPECT_NE(e.find(t / "m.tsv"), std::string::npos) << e;
    EXPECT_NE(e.find("line 2: no TAB"), std::string::npos) << e;
}

TEST(Corpus, FilePairReadsLineAlignedFiles) {
    TempDir t;
    write_text(t / "a.de", "\xEF\xBB\xBFHallo .\r\nDanke !\r\n");  // BOM and CRLF
    write_text(t / "a.en.gz", gzip_bytes("Hello .\nThank you !\n"));
    const ParallelCorpus c = load_file_pair(t / "a.de", t / "a.en.gz");
    ASSERT_EQ(c.size(), 2);
    EXPECT_EQ(c.src[0], "Hallo .");
    EXPECT_EQ(c.src[1], "Danke !");
    EXPECT_EQ(c.tgt[1], "Thank you !");
    EXPECT_EQ(c.origin, (t / "a.de") + " + " + (t / "a.en.gz"));
    // A TAB inside a sentence is text here (no columns).
    write_text(t / "tab.src", "x\ty\n");
    write_text(t / "tab.tgt", "z\n");
    EXPECT_EQ(load_file_pair(t / "tab.src", t / "tab.tgt").src[0], "x\ty");
}

TEST(Corpus, FilePairLineCountMismatchNamesBothFilesAndTheLine) {
    TempDir t;
    write_text(t / "s.txt", "a\nb\nc\n");
    write_text(t / "t.txt", "x\ny\n");
    const std::string e = error_of([&] { load_file_pair(t / "s.txt", t / "t.txt"); });
    EXPECT_NE(e.find("'" + (t / "s.txt") + "' has 3 lines, '" + (t / "t.txt") + "' has 2"), std::string::npos) << e;
    EXPECT_NE(e.find("line 3 of '" + (t / "s.txt") + "' has no partner"), std::string::npos) << e;
    const std::string r = error_of([&] { load_file_pair(t / "t.txt", t / "s.txt"); });
    EXPECT_NE(r.find("line 3 of '" + (t / "s.txt") + "' has no partner"), std::string::npos) << r;
}

TEST(Corpus, FilePairMalformedSidesNameTheFileAndLine) {
    TempDir t;
    ParseOptions o;
    o.max_chars = 10;
    write_text(t / "s.txt", "ok\n  \nfine\ngood\nw\xC3\n");
    write_text(t / "t.txt", "ok\nx\nthis line is too long\nyes\nz\n");
    const ParallelCorpus c = load_file_pair(t / "s.txt", t / "t.txt", o);
    EXPECT_EQ(c.size(), 2);
    EXPECT_EQ(c.line, (std::vector<int64_t>{0, 3}));
    const std::string s = c.summary();
    EXPECT_NE(s.find("line 2: " + (t / "s.txt") + ": empty source side"), std::string::npos) << s;
    EXPECT_NE(s.find("line 3: " + (t / "t.txt") + ": the target side is longer than 10 characters"), std::string::npos)
        << s;
    EXPECT_NE(s.find("line 5: " + (t / "s.txt") + ": invalid UTF-8 (byte offset 1)"), std::string::npos) << s;
    o.strict = true;
    const std::string e = error_of([&] { load_file_pair(t / "s.txt", t / "t.txt", o); });
    EXPECT_NE(e.find("'" + (t / "s.txt") + "': line 2: empty source side"), std::string::npos) << e;
    write_text(t / "e1", "\n");
    write_text(t / "e2", "\n");
    EXPECT_NE(error_of([&] { load_file_pair(t / "e1", t / "e2"); }).find("no sentence pairs found"), std::string::npos);
}

}  // namespace
}  // namespace qkv::data
