// safetensors byte-level reader/writer: round trips of every dtype qkv uses, the committed
// fixture written by tools/make_safetensors_fixture.py, and a table of corrupt files that must
// each give a qkv::Error with a specific message (never a crash or an over-read).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/temp_dir.h"
#include "support/test_util.h"
#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"

namespace qkv::io {
namespace {

using qkv::test::TempDir;

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A file image: 8-byte length (the true header length unless `len` is given), header, data.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes,
                           std::optional<uint64_t> len = std::nullopt) {
    std::vector<uint8_t> b(8 + header.size() + data_bytes);
    const uint64_t n = len ? *len : header.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, header.data(), header.size());
    for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = uint8_t(i * 7 + 1);
    return b;
}

/// The error of parsing `bytes` as "bad.safetensors" (test::error_of).
std::string parse_error(const std::vector<uint8_t>& bytes) {
    return test::error_of([&] { SafeTensorsFile::from_bytes(bytes, "bad.safetensors"); });
}

TEST(SafeTensors, RoundTripEveryDtype_ZeroDimAndEmpty) {
    TempDir dir;
    const std::vector<float> f32 = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f};
    const std::vector<double> f64 = {3.141592653589793};
    const std::vector<int64_t> i64 = {-1, 0, int64_t(1) << 40};
    const std::vector<uint8_t> b8 = {1, 0, 0, 1, 1};
    const std::vector<uint16_t> bf16 = {0x3F80, 0xC020};  // 1.0, -2.5
    const auto bf = as_bytes(f32), bd = as_bytes(f64), bi = as_bytes(i64), bh = as_bytes(bf16);
    std::vector<SafeTensorView> in = {
        {"layer.weight", "F32", {2, 3}, bf.data(), bf.size()},
        {"scalar", "F64", {}, bd.data(), bd.size()},
        {"ids", "I64", {3}, bi.data(), bi.size()},
        {"mask", "BOOL", {5}, b8.data(), b8.size()},
        {"empty", "F32", {0, 4}, nullptr, 0},
        {"half", "BF16", {2}, bh.data(), bh.size()},
    };
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
    const std::string path = dir / "a.safetensors";
    write_safetensors(path, in, meta);

    const SafeTensorsFile f(path);
    EXPECT_EQ(f.metadata(), meta);
    EXPECT_EQ(f.names(), (std::vector<std::string>{"layer.weight", "scalar", "ids", "mask",
                                                   "empty", "half"}));
    for (const auto& v : in) {
        const SafeTensorInfo& info = f.info(v.name);
        EXPECT_EQ(info.dtype, v.dtype) << v.name;
        EXPECT_EQ(info.shape, v.shape) << v.name;
        const auto got = f.bytes(v.name);
        ASSERT_EQ(got.size(), v.nbytes) << v.name;
        if (v.nbytes) {
            EXPECT_EQ(std::memcmp(got.data(), v.data, v.nbytes), 0) << v.name;
        }
    }
    EXPECT_EQ(f.info("scalar").numel(), 1);
    EXPECT_EQ(f.info("empty").numel(), 0);
    // Header padded so the data section (and so every tensor of 8-byte-multiple size) is aligned.
    const auto raw = file_bytes(path);
    uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    EXPECT_EQ((8 + n) % 8, 0u);
    EXPECT_EQ(raw[8], '{');
    // The temporary is gone after the rename.
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
        ++files;
        EXPECT_EQ(e.path().filename(), "a.safetensors");
    }
    EXPECT_EQ(files, 1);
}

TEST(SafeTensors, NoTensorsNoMetadata) {
    const auto bytes = serialize_safetensors({});
    const auto f = SafeTensorsFile::from_bytes(bytes, "mem");
    EXPECT_TRUE(f.names().empty());
    EXPECT_TRUE(f.metadata().empty());
    EXPECT_EQ(bytes.size(), 16u);  // 8 + "{}" padded to 8
}

TEST(SafeTensors, InMemoryMatchesFile) {
    TempDir dir;
    const std::vector<float> x = {1, 2, 3};
    const auto b = as_bytes(x);
    const std::vector<SafeTensorView> in = {{"x", "F32", {3}, b.data(), b.size()}};
    write_safetensors(dir / "x.safetensors", in, {{"k", "v"}});
    EXPECT_EQ(file_bytes(dir / "x.safetensors"), serialize_safetensors(in, {{"k", "v"}}));
}

TEST(SafeTensors, OverwriteIsAtomicReplacement) {
    TempDir dir;
    const std::vector<float> a = {1}, b = {2, 3};
    const auto ba = as_bytes(a), bb = as_bytes(b);
    write_safetensors(dir / "w.safetensors", {{"t", "F32", {1}, ba.data(), ba.size()}});
    write_safetensors(dir / "w.safetensors", {{"t", "F32", {2}, bb.data(), bb.size()}});
    EXPECT_EQ(SafeTensorsFile(dir / "w.safetensors").info("t").shape, (std::vector<int64_t>{2}));
}

TEST(SafeTensors, WriterRejectsBadEntries) {
    TempDir dir;
    const std::vector<float> x = {1, 2};
    const auto b = as_bytes(x);
    struct Case {
        std::vector<SafeTensorView> entries;
        std::string want;
    };
    const std::vector<Case> cases = {
        {{{"a", "F32", {2}, b.data(), b.size()}, {"a", "F32", {2}, b.data(), b.size()}},
         "duplicate tensor name 'a'"},
        {{{"", "F32", {2}, b.data(), b.size()}}, "empty tensor name"},
        {{{"__metadata__", "F32", {2}, b.data(), b.size()}}, "'__metadata__' is reserved"},
        {{{"a", "F31", {2}, b.data(), b.size()}}, "unknown dtype \"F31\""},
        {{{"a", "F32", {3}, b.data(), b.size()}}, "8 bytes given but F32 (3,) needs 12"},
        {{{"a", "F32", {-2}, b.data(), b.size()}}, "negative dimension"},
        {{{"a", "F32", {2}, nullptr, 8}}, "null data"},
        {{{"bad\xff", "F32", {2}, b.data(), b.size()}}, "not valid UTF-8"},
    };
    for (const auto& c : cases) {
        const std::string path = dir / "w.safetensors";
        try {
            write_safetensors(path, c.entries);
            ADD_FAILURE() << "no error, want: " << c.want;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
        EXPECT_FALSE(std::filesystem::exists(path));
    }
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // no stray temporaries
}

// Written by hand by tools/make_safetensors_fixture.py (struct + json, Python's own separators,
// JSON keys deliberately not in data order).
TEST(SafeTensors, ReadsPythonWrittenFixture) {
    const SafeTensorsFile f(std::string(QKV_FIXTURE_DIR) + "/safetensors/tiny.safetensors");
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.metadata().at("made_by"), "tools/make_safetensors_fixture.py");
    EXPECT_EQ(f.names(),
              (std::vector<std::string>{"weight", "ids", "scalar", "half", "mask", "empty"}));
    EXPECT_EQ(f.info("weight").shape, (std::vector<int64_t>{2, 3}));
    std::vector<float> w(6);
    std::memcpy(w.data(), f.bytes("weight").data(), 24);
    EXPECT_EQ(w, (std::vector<float>{0.f, 1.f, 2.f, 3.f, 4.5f, -1.f}));
    std::vector<int64_t> ids(3);
    std::memcpy(ids.data(), f.bytes("ids").data(), 24);
    EXPECT_EQ(ids, (std::vector<int64_t>{1, -2, 3}));
    double s = 0;
    ASSERT_EQ(f.info("scalar").shape.size(), 0u);
    std::memcpy(&s, f.bytes("scalar").data(), 8);
    EXPECT_EQ(s, 3.25);
    std::vector<uint16_t> h(2);
    std::memcpy(h.data(), f.bytes("half").data(), 4);
    EXPECT_EQ(h, (std::vector<uint16_t>{0x3F80, 0xC020}));
    const auto m = f.bytes("mask");
    EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), (std::vector<uint8_t>{1, 0, 0, 1}));
    EXPECT_EQ(f.info("empty").shape, (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(f.bytes("empty").size(), 0u);
}

TEST(SafeTensors, MissingNameListsSome) {
    const std::vector<float> x = {1};
    const auto b = as_bytes(x);
    const auto f = SafeTensorsFile::from_bytes(
        serialize_safetensors({{"alpha", "F32", {1}, b.data(), b.size()}}), "m.safetensors");
    try {
        f.info("beta");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "safetensors: 'm.safetensors': no tensor named 'beta' (has 1: alpha)");
    }
}

TEST(SafeTensors, MissingFile) {
    TempDir dir;
    const std::string path = dir / "nope.safetensors";
    try {
        SafeTensorsFile f(path);
        FAIL();
    } catch (const SafeTensorsError& e) {  // the path once, then the problem
        EXPECT_EQ(std::string(e.what()), "safetensors: '" + path + "': cannot open: No such file or directory");
        EXPECT_EQ(e.path(), path);
        EXPECT_EQ(e.problem(), "cannot open: No such file or directory");
    }
    try {
        SafeTensorsFile f(dir.path().string());
        FAIL();
    } catch (const SafeTensorsError& e) {
        EXPECT_EQ(std::string(e.what()), "safetensors: '" + dir.path().string() + "': not a regular file");
    }
}

TEST(SafeTensors, TruncatedAtEveryPointIsAnError) {
    const std::vector<float> x = {1, 2, 3, 4};
    const auto b = as_bytes(x);
    const auto good = serialize_safetensors(
        {{"x", "F32", {4}, b.data(), b.size()}, {"y", "F32", {0}, nullptr, 0}}, {{"a", "b"}});
    uint64_t n = 0;
    std::memcpy(&n, good.data(), 8);
    // Every proper prefix fails with one message: what was expected, in bytes, and what was found.
    const std::string nb = std::to_string(n);
    for (size_t cut = 0; cut < good.size(); ++cut) {
        const std::vector<uint8_t> t(good.begin(), good.begin() + cut);
        const std::string msg = parse_error(t);
        const std::string want =
            cut < 8       ? "expected at least 8 bytes (the 8-byte header length)"
            : cut < 8 + n ? "expected at least " + std::to_string(8 + n) + " bytes (8-byte header length + " + nb +
                                "-byte header)"
                          : "expected " + std::to_string(good.size()) + " bytes (8-byte header length + " + nb +
                                "-byte header + 16 bytes of tensor data)";
        EXPECT_EQ(msg, "safetensors: 'bad.safetensors': the file is truncated: " + want + ", found " +
                           std::to_string(cut))
            << "cut at " << cut;
        try {
            SafeTensorsFile::from_bytes(t, "bad.safetensors");
        } catch (const SafeTensorsError& e) {
            EXPECT_TRUE(e.truncated()) << msg;
        }
    }
    EXPECT_EQ(parse_error(good), "(no error)");
}

TEST(SafeTensors, CorruptFilesGiveClearErrors) {
    struct Case {
        const char* what;
        std::vector<uint8_t> bytes;
        std::string want;  // substring of the message
    };
    const std::string x8 = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    const std::vector<Case> cases = {
        {"header length 2^40", image("{}", 0, uint64_t(1) << 40),
         "header length 1099511627776 exceeds the limit of 100000000 bytes"},
        {"header length past end", image("{}", 10, 500),
         "the file is truncated: expected at least 508 bytes (8-byte header length + 500-byte header), found 20"},
        {"header max uint64", image("{}", 0, ~uint64_t(0)), "exceeds the limit"},
        {"not an object", image("[1,2]", 0), "header does not start with '{'"},
        {"bad JSON", image(R"({"x": {"dtype": )", 0), "header is not valid JSON"},
        {"trailing garbage", image(R"({} x)", 0), "header is not valid JSON"},
        {"invalid UTF-8", image("{\"\xc3\x28\":1}", 0), "header is not valid JSON"},
        {"offsets out of range",
         image(R"({"x":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})", 16),
         "the file is truncated: expected 466 bytes (8-byte header length + 58-byte header + 400 bytes of tensor "
         "data), found 82"},
        {"overlap",
         image("{" + x8 + R"(,"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
         "tensor 'y' [4, 12) overlaps tensor 'x' [0, 8)"},
        {"gap", image("{" + x8 + R"(,"y":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", 20),
         "gap of 4 bytes before tensor 'y' at offset 12"},
        {"trailing data", image("{" + x8 + "}", 9),
         "the data section has 1 trailing bytes not covered by any tensor"},
        {"wrong size for dtype x shape",
         image(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
         "tensor 'x': data_offsets [0, 8] hold 8 bytes but F32 (3,) needs 12"},
        {"wrong size for BOOL",
         image(R"({"x":{"dtype":"BOOL","shape":[2,2],"data_offsets":[0,8]}})", 8),
         "hold 8 bytes but BOOL (2, 2) needs 4"},
        {"unknown dtype", image(R"({"x":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8),
         "tensor 'x': unknown dtype \"F33\""},
        {"negative dim", image(R"({"x":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8),
         "tensor 'x': negative dimension -1 in shape"},
        {"fractional dim", image(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
         "tensor 'x': shape entry 2.5 is not an integer"},
        {"shape overflow",
         image(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
         "tensor 'x': shape (4294967296, 4294967296) x 4 bytes overflows"},
        {"nbytes overflow int64",
         image(R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", 8),
         "overflows the addressable size"},
        {"dim beyond int64",
         image(R"({"x":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", 8),
         "dimension 9223372036854775808 overflows int64"},
        {"huge offset (float)",
         image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,1e30]}})", 8),
         "data offset 1e+30 is not an integer"},
        {"negative offset",
         image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
         "negative data offset -8"},
        {"reversed offsets",
         image(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
         "data_offsets [8, 0] are reversed"},
        {"three offsets",
         image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", 8),
         "data_offsets must be an array of 2 integers"},
        {"missing dtype", image(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", 8),
         "tensor 'x': missing or non-string dtype"},
        {"shape not array", image(R"({"x":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8),
         "missing or non-array shape"},
        {"extra key",
         image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"z":1}})", 8),
         "unexpected key \"z\""},
        {"entry not object", image(R"({"x":[1]})", 0), "tensor 'x': entry is not an object"},
        {"duplicate name", image("{" + x8 + "," + x8 + "}", 8), "duplicate key \"x\""},
        {"empty name", image(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
         "empty tensor name"},
        {"metadata not object", image(R"({"__metadata__":[1]})", 0),
         "__metadata__ is not an object"},
        {"metadata value not string", image(R"({"__metadata__":{"step":3}})", 0),
         "__metadata__[\"step\"] is not a string"},
        {"deep nesting", image("{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}", 0),
         "nests deeper"},
        {"header length 1", image("{", 0), "too small for a JSON object"},
    };
    for (const auto& c : cases) {
        const std::string msg = parse_error(c.bytes);
        EXPECT_NE(msg.find(c.want), std::string::npos)
            << c.what << "\n  got:  " << msg << "\n  want: " << c.want;
        EXPECT_EQ(msg.rfind("safetensors: 'bad.safetensors': ", 0), 0u) << c.what << ": " << msg;
    }
}

TEST(SafeTensors, HeaderWithTrailingSpacesAndEmptyTensorsBetween) {
    // The spec allows trailing spaces; zero-size tensors may sit at any boundary.
    const auto b = image(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                         R"("y":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}}   )",
                         3);
    const auto f = SafeTensorsFile::from_bytes(b, "ok");
    EXPECT_EQ(f.names(), (std::vector<std::string>{"x", "e", "y"}));
    EXPECT_EQ(f.bytes("y")[0], b.back());
}

// Deterministic mutation fuzzing: flipping, truncating or growing any byte of a valid file either
// still parses (then reading every tensor's bytes stays in bounds: run under ASan to see it) or
// throws qkv::Error.
TEST(SafeTensors, MutatedFilesParseOrThrow) {
    const std::vector<float> x = {1, 2, 3, 4};
    const std::vector<int64_t> y = {5, 6};
    const auto bx = as_bytes(x), by = as_bytes(y);
    const auto good = serialize_safetensors(
        {{"x", "F32", {2, 2}, bx.data(), bx.size()}, {"y", "I64", {2}, by.data(), by.size()}},
        {{"k", "v"}});
    uint64_t s = 12345;
    auto next = [&] { return s = s * 6364136223846793005ULL + 1442695040888963407ULL; };
    int parsed = 0, rejected = 0;
    for (int trial = 0; trial < 5000; ++trial) {
        auto b = good;
        const int edits = 1 + int(next() >> 62);
        for (int e = 0; e < edits; ++e) {
            const size_t pos = size_t(next() >> 33) % b.size();
            switch (next() >> 62) {
                case 0: b[pos] = uint8_t(next() >> 56); break;
                case 1: b[pos] ^= uint8_t(1u << (next() >> 61)); break;
                case 2: b.resize(pos); break;
                default: b.insert(b.begin() + long(pos), uint8_t(next() >> 56)); break;
            }
            if (b.empty()) break;
        }
        try {
            const auto f = SafeTensorsFile::from_bytes(b, "fuzz");
            for (const auto& n : f.names()) {
                const auto sp = f.bytes(n);
                volatile uint8_t sink = 0;
                for (uint8_t v : sp) sink = sink ^ v;
            }
            ++parsed;
        } catch (const Error&) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 4000);  // almost every mutation breaks the length, JSON or offsets
    EXPECT_GT(parsed, 0);       // e.g. edits inside the data bytes
}

TEST(SafeTensors, ItemSizes) {
    EXPECT_EQ(safetensors_itemsize("BOOL"), 1u);
    EXPECT_EQ(safetensors_itemsize("BF16"), 2u);
    EXPECT_EQ(safetensors_itemsize("F32"), 4u);
    EXPECT_EQ(safetensors_itemsize("I64"), 8u);
    EXPECT_EQ(safetensors_itemsize("F64"), 8u);
    EXPECT_EQ(safetensors_itemsize("f32"), 0u);
}

}  // namespace
}  // namespace qkv::io
