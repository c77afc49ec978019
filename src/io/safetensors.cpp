// safetensors byte-level reader and writer (io/safetensors.h). The reader validates everything
// before exposing a single byte, so a hostile file can only ever produce a qkv::Error.
#include "qkv/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "qkv/core/error.h"
#include "qkv/util/atomic_file.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace qkv::io {
namespace {

using json = nlohmann::json;

const std::map<std::string, size_t>& dtype_table() {
    static const std::map<std::string, size_t> t = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
        {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
        {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
    return t;
}

// numel * itemsize with overflow checks; false on overflow (limit: int64 max).
bool checked_nbytes(const std::vector<int64_t>& shape, size_t itemsize, uint64_t* out) {
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) return false;
        if (__builtin_mul_overflow(n, uint64_t(d), &n)) return false;
    }
    if (__builtin_mul_overflow(n, uint64_t(itemsize), &n)) return false;
    if (n > uint64_t(std::numeric_limits<int64_t>::max())) return false;
    *out = n;
    return true;
}

std::string shape_text(const std::vector<int64_t>& s) { return detail::str(s); }

std::vector<uint8_t> read_all(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw SafeTensorsError(path, detail::str("cannot open: ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw SafeTensorsError(path, "not a regular file");
    }
    std::vector<uint8_t> buf(size_t(st.st_size));
    size_t got = 0;
    while (got < buf.size()) {
        const ssize_t r = ::read(fd, buf.data() + got, buf.size() - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            const int err = r < 0 ? errno : 0;
            ::close(fd);
            throw SafeTensorsError(path, detail::str("reading failed after ", got, " of ", buf.size(), " bytes",
                                                     err ? std::string(": ") + std::strerror(err) : ""));
        }
        got += size_t(r);
    }
    ::close(fd);
    return buf;
}

}  // namespace

SafeTensorsError::SafeTensorsError(const std::string& path, const std::string& problem, bool truncated)
    : Error("safetensors: '" + path + "': " + problem), path_(path), problem_(problem), truncated_(truncated) {}

int64_t SafeTensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t safetensors_itemsize(const std::string& dtype) {
    const auto it = dtype_table().find(dtype);
    return it == dtype_table().end() ? 0 : it->second;
}

SafeTensorsFile::SafeTensorsFile(const std::string& path) {
    path_ = path;
    buf_  = read_all(path);
    parse();
}

SafeTensorsFile SafeTensorsFile::from_bytes(std::vector<uint8_t> bytes, const std::string& origin) {
    SafeTensorsFile f;
    f.path_ = origin;
    f.buf_  = std::move(bytes);
    f.parse();
    return f;
}

namespace {

template <class... Parts>
[[noreturn]] void fail_at(const std::string& path, const Parts&... parts) {
    throw SafeTensorsError(path, detail::str(parts...));
}

/// The header's JSON, rejecting duplicate keys (nlohmann keeps the last silently) and deep nesting.
json parse_header_json(const std::string& path, const char* hdr, uint64_t n) {
    std::string dup;
    std::vector<std::set<std::string>> keys;
    bool too_deep = false;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (depth > 4) too_deep = true;
        if (ev == json::parse_event_t::object_start) keys.emplace_back();
        if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
        if (ev == json::parse_event_t::key && !keys.empty() && dup.empty()) {
            const std::string& k = parsed.get_ref<const std::string&>();
            if (!keys.back().insert(k).second) dup = k;
        }
        return true;
    };
    json h;
    try {
        h = json::parse(hdr, hdr + n, cb);
    } catch (const json::exception& e) {
        fail_at(path, "header is not valid JSON: ", e.what());
    }
    if (too_deep) fail_at(path, "header nests deeper than a safetensors header can");
    if (!dup.empty()) fail_at(path, "duplicate key \"", dup, "\" in the header");
    if (!h.is_object()) fail_at(path, "header is not a JSON object");
    return h;
}

/// One tensor's header entry: its keys, dtype, shape and data offsets checked (an end past the
/// data section is left to the caller, which reports a truncated file).
SafeTensorInfo parse_entry(const std::string& path, const std::string& name, const json& v, size_t data_size) {
    const std::string tn = "tensor '" + name + "': ";
    auto fail = [&](const auto&... parts) { fail_at(path, tn, parts...); };
    if (name.empty()) fail_at(path, "empty tensor name");
    if (!v.is_object()) fail("entry is not an object");
    for (auto k = v.begin(); k != v.end(); ++k)
        if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
            fail("unexpected key \"", k.key(), "\"");
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail("missing or non-string dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) fail("missing or non-array shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
        fail("data_offsets must be an array of 2 integers");
    SafeTensorInfo info;
    info.name  = name;
    info.dtype = v["dtype"].get<std::string>();
    const size_t itemsize = safetensors_itemsize(info.dtype);
    if (itemsize == 0) fail("unknown dtype \"", info.dtype, "\"");
    for (const json& d : v["shape"]) {
        if (d.is_number_integer() && !d.is_number_unsigned()) fail("negative dimension ", d.get<int64_t>(), " in shape");
        if (!d.is_number_unsigned()) fail("shape entry ", d.dump(), " is not an integer");
        const uint64_t u = d.get<uint64_t>();
        if (u > uint64_t(std::numeric_limits<int64_t>::max())) fail("dimension ", u, " overflows int64");
        info.shape.push_back(int64_t(u));
    }
    uint64_t want = 0;
    if (!checked_nbytes(info.shape, itemsize, &want))
        fail("shape ", shape_text(info.shape), " x ", itemsize, " bytes overflows the addressable size");
    const json& off = v["data_offsets"];
    for (const json& o : off) {
        if (o.is_number_integer() && !o.is_number_unsigned()) fail("negative data offset ", o.get<int64_t>());
        if (!o.is_number_unsigned()) fail("data offset ", o.dump(), " is not an integer");
    }
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) fail("data_offsets [", b, ", ", e, "] are reversed");
    // An end past the data is a truncated file (reported once every entry is read, with the
    // size the largest end implies), unless no file could be that large.
    if (e > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("data_offsets [", b, ", ", e, "] exceed the data section of ", data_size, " bytes");
    if (e - b != want)
        fail("data_offsets [", b, ", ", e, "] hold ", e - b, " bytes but ", info.dtype, " ", shape_text(info.shape),
             " needs ", want);
    info.begin = size_t(b);
    info.end   = size_t(e);
    return info;
}

/// Sorts the entries by offset and checks they cover the data section exactly: no overlap, no
/// gap, no trailing bytes.
void check_coverage(const std::string& path, std::vector<SafeTensorInfo>& entries, size_t data_size,
                    size_t file_size) {
    std::sort(entries.begin(), entries.end(), [](const SafeTensorInfo& a, const SafeTensorInfo& b) {
        return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    size_t pos = 0;
    const SafeTensorInfo* prev = nullptr;
    for (const auto& e : entries) {
        if (e.begin < pos)
            fail_at(path, "tensor '", e.name, "' [", e.begin, ", ", e.end, ") overlaps tensor '", prev->name, "' [",
                    prev->begin, ", ", prev->end, ")");
        if (e.begin > pos)
            fail_at(path, "gap of ", e.begin - pos, " bytes before tensor '", e.name, "' at offset ", e.begin,
                    " (the data section must be covered exactly)");
        pos  = e.end;
        prev = &e;
    }
    if (pos != data_size)
        fail_at(path, "the data section has ", data_size - pos, " trailing bytes not covered by any tensor (file size ",
                file_size, ")");
}

}  // namespace

void SafeTensorsFile::parse() {
    auto fail = [&](const auto&... parts) -> void { throw SafeTensorsError(path_, detail::str(parts...)); };
    // A file shorter than its header says: one message, the bytes expected and found.
    auto truncated = [&](const auto&... expected) -> void {
        throw SafeTensorsError(path_, detail::str("the file is truncated: expected ", expected..., ", found ",
                                                  buf_.size()),
                               true);
    };
    if (buf_.size() < 8) truncated("at least 8 bytes (the 8-byte header length)");
    uint64_t n = 0;
    std::memcpy(&n, buf_.data(), 8);  // little-endian host (static_assert above)
    if (n > kSafeTensorsMaxHeader)
        fail("header length ", n, " exceeds the limit of ", kSafeTensorsMaxHeader, " bytes");
    if (n > buf_.size() - 8) truncated("at least ", 8 + n, " bytes (8-byte header length + ", n, "-byte header)");
    if (n < 2) fail("header length ", n, " is too small for a JSON object");
    const char* hdr = reinterpret_cast<const char*>(buf_.data() + 8);
    if (hdr[0] != '{') fail("header does not start with '{'");
    data_start_ = 8 + size_t(n);
    const size_t data_size = buf_.size() - data_start_;
    const json h = parse_header_json(path_, hdr, n);

    uint64_t data_end = 0;  // the largest data offset
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        const json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail("__metadata__ is not an object");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    fail("__metadata__[\"", m.key(), "\"] is not a string");
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        SafeTensorInfo info = parse_entry(path_, name, v, data_size);
        data_end = std::max<uint64_t>(data_end, info.end);
        entries_.push_back(std::move(info));
    }

    if (data_end > data_size)
        truncated(data_start_ + data_end, " bytes (8-byte header length + ", n, "-byte header + ", data_end,
                  " bytes of tensor data)");
    check_coverage(path_, entries_, data_size, buf_.size());
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

std::vector<std::string> SafeTensorsFile::names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_) out.push_back(e.name);
    return out;
}

const SafeTensorInfo& SafeTensorsFile::info(const std::string& name) const {
    const auto it = index_.find(name);
    if (it == index_.end()) {
        std::string some;
        for (size_t i = 0; i < entries_.size() && i < 5; ++i)
            some += (i ? ", " : "") + entries_[i].name;
        if (entries_.size() > 5) some += ", ...";
        throw SafeTensorsError(path_,
                               detail::str("no tensor named '", name, "' (has ", entries_.size(), ": ", some, ")"));
    }
    return entries_[it->second];
}

std::span<const uint8_t> SafeTensorsFile::bytes(const std::string& name) const {
    const SafeTensorInfo& e = info(name);
    return {buf_.data() + data_start_ + e.begin, e.end - e.begin};
}

// ---- writer ------------------------------------------------------------------------------------

namespace {

// Validates the entries and returns the header bytes, padded so that 8 + size is a multiple of 8.
std::string make_header(const std::vector<SafeTensorView>& entries,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& where) {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        h["__metadata__"] = std::move(m);
    }
    std::set<std::string> seen;
    uint64_t off = 0;
    for (const auto& e : entries) {
        QKV_CHECK(!e.name.empty(), where, "empty tensor name");
        QKV_CHECK(e.name != "__metadata__", where, "'__metadata__' is reserved, not a tensor name");
        QKV_CHECK(seen.insert(e.name).second, where, "duplicate tensor name '", e.name, "'");
        const size_t itemsize = safetensors_itemsize(e.dtype);
        QKV_CHECK(itemsize != 0, where, "tensor '", e.name, "': unknown dtype \"", e.dtype, "\"");
        for (int64_t d : e.shape)
            QKV_CHECK(d >= 0, where, "tensor '", e.name, "': negative dimension in shape ",
                      e.shape);
        uint64_t want = 0;
        QKV_CHECK(checked_nbytes(e.shape, itemsize, &want), where, "tensor '", e.name,
                  "': shape ", e.shape, " overflows");
        QKV_CHECK(want == e.nbytes, where, "tensor '", e.name, "': ", e.nbytes, " bytes given but ",
                  e.dtype, " ", e.shape, " needs ", want);
        QKV_CHECK(e.data != nullptr || e.nbytes == 0, where, "tensor '", e.name, "': null data");
        h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + want}}};
        off += want;
    }
    std::string s;
    try {
        s = h.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
    } catch (const nlohmann::ordered_json::exception& ex) {
        throw Error(where + "a name or metadata string is not valid UTF-8 (" + ex.what() + ")");
    }
    s.append((8 - (8 + s.size()) % 8) % 8, ' ');
    QKV_CHECK(s.size() <= kSafeTensorsMaxHeader, where, "header of ", s.size(),
              " bytes exceeds the limit");
    return s;
}

template <class Sink>
void emit(const std::string& header, const std::vector<SafeTensorView>& entries, Sink&& write) {
    const uint64_t n = header.size();
    write(&n, 8);
    write(header.data(), header.size());
    for (const auto& e : entries)
        if (e.nbytes) write(e.data, e.nbytes);
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<SafeTensorView>& entries,
                                           const std::map<std::string, std::string>& metadata) {
    const std::string header = make_header(entries, metadata, "serialize_safetensors: ");
    std::vector<uint8_t> out;
    emit(header, entries, [&](const void* p, size_t k) {
        const uint8_t* b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + k);
    });
    return out;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorView>& entries,
                       const std::map<std::string, std::string>& metadata) {
    const std::string header = make_header(entries, metadata, "write_safetensors: '" + path + "': ");
    util::write_file_atomic(path, [&](util::FileSink& sink) {
        emit(header, entries, [&](const void* p, size_t k) { sink.write(p, k); });
    });
}

}  // namespace qkv::io
