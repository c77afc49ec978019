#pragma once
// safetensors reader/writer (https://github.com/huggingface/safetensors, "Format"):
//   8 bytes  N, unsigned little-endian: size of the header
//   N bytes  JSON object, UTF-8, starting with '{' (may be padded with trailing spaces):
//            {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"key": "string value", ...}}
//   rest     the byte buffer; offsets are relative to its start, little-endian, row-major.
// The byte-level API (SafeTensorsFile, write_safetensors) knows nothing about Tensor; the Tensor
// adapters at the bottom (save_safetensors / load_safetensors) convert to and from qkv::Tensor.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/error.h"

#include "qkv/core/dtype.h"

namespace qkv {
class Tensor;
}

namespace qkv::io {

/// Largest header accepted, as in the reference implementation (100 MB).
constexpr uint64_t kSafeTensorsMaxHeader = 100'000'000;

/// One tensor entry of a safetensors header. begin/end are byte offsets into the data section.
struct SafeTensorInfo {
    std::string name;
    std::string dtype;  // spec names: BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 F8_E5M2 F8_E4M3
    std::vector<int64_t> shape;  // () for a 0-d tensor; dims may be 0
    size_t begin = 0, end = 0;
    int64_t numel() const;
};

/// What SafeTensorsFile throws: a qkv::Error whose message is "safetensors: '<path>': <problem>".
/// path() and problem() give the parts, so a caller that names the file itself ("checkpoint
/// '<path>': ...") can name it once.
class SafeTensorsError : public Error {
public:
    SafeTensorsError(const std::string& path, const std::string& problem, bool truncated = false);
    const std::string& path() const { return path_; }
    /// The message without "safetensors: '<path>': ", e.g. "header is not valid JSON: ...".
    const std::string& problem() const { return problem_; }
    /// True when the file is shorter than its header says; problem() is then "the file is
    /// truncated: expected N bytes (8-byte header length + H-byte header + D bytes of tensor
    /// data), found M" ("expected at least ..." when the header itself is cut).
    bool truncated() const { return truncated_; }

private:
    std::string path_, problem_;
    bool truncated_;
};

/// Bytes per element of a spec dtype name; 0 when the name is unknown.
size_t safetensors_itemsize(const std::string& dtype);

/// A safetensors file read fully into memory and validated on open. Every failure (reading, or a
/// check) throws SafeTensorsError "safetensors: '<path>': <problem>", e.g. "header length 2^40
/// exceeds the limit of 100000000 bytes", naming the path once. Checks: the file holds at least 8
/// bytes; N <= 100 MB and 8 + N <= file size; a file shorter than its header and tensors say is
/// reported once, as truncated (SafeTensorsError::truncated(), with the bytes expected and found); the header is a JSON object (valid UTF-8, first byte '{');
/// names are unique and non-empty; each entry has exactly dtype/shape/data_offsets of the right
/// JSON types; the dtype is known; dims are non-negative integers whose product times the item
/// size does not overflow; begin <= end <= data size and end - begin == numel * itemsize; entries
/// do not overlap and together cover the whole data section with no gap (the reference
/// implementation's "MetadataIncompleteBuffer" rule); __metadata__, when present, maps strings to
/// strings.
class SafeTensorsFile {
public:
    /// Reads and validates `path`; throws SafeTensorsError as above, also when the file cannot be
    /// opened ("cannot open: <strerror>"), is not a regular file, or a read fails.
    explicit SafeTensorsFile(const std::string& path);
    /// Validates an in-memory image (`origin` names it in error messages).
    static SafeTensorsFile from_bytes(std::vector<uint8_t> bytes, const std::string& origin);

    const std::string& path() const { return path_; }
    /// The "__metadata__" map (empty when absent).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    /// Tensor names in file order (ascending data offset; ties, i.e. empty tensors, by name).
    std::vector<std::string> names() const;
    /// All entries in file order.
    const std::vector<SafeTensorInfo>& entries() const { return entries_; }
    bool contains(const std::string& name) const { return index_.count(name) != 0; }
    /// Entry of `name`; throws SafeTensorsError listing a few names when absent.
    const SafeTensorInfo& info(const std::string& name) const;
    /// The raw little-endian bytes of `name` (end - begin bytes; valid while this object lives).
    std::span<const uint8_t> bytes(const std::string& name) const;

private:
    SafeTensorsFile() = default;
    void parse();

    std::string path_;
    std::vector<uint8_t> buf_;
    size_t data_start_ = 0;
    std::map<std::string, std::string> metadata_;
    std::vector<SafeTensorInfo> entries_;
    std::map<std::string, size_t> index_;
};

/// One tensor to write: raw little-endian row-major bytes (not copied; must outlive the call).
struct SafeTensorView {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    const void* data = nullptr;  // may be null only when nbytes == 0
    size_t nbytes    = 0;
};

/// Writes a safetensors file atomically (path + ".tmp.<pid>", fsync, rename; see
/// util/atomic_file.h). Entries are stored in the given order; the header is padded with spaces
/// to a multiple of 8 bytes so every tensor starts 8-byte aligned. Throws qkv::Error naming the
/// path when a name is empty, repeated or "__metadata__", a dtype is unknown, a dim is negative,
/// or nbytes != numel * itemsize.
void write_safetensors(const std::string& path, const std::vector<SafeTensorView>& entries,
                       const std::map<std::string, std::string>& metadata = {});

/// Serialises to memory (same format and checks as write_safetensors).
std::vector<uint8_t> serialize_safetensors(const std::vector<SafeTensorView>& entries,
                                           const std::map<std::string, std::string>& metadata = {});

// ---- Tensor adapters ----------------------------------------------------------------------------

/// Saves named tensors (any layout; written contiguous) with dtype f32 -> F32, f64 -> F64,
/// i64 -> I64, b8 -> BOOL, bf16 -> BF16, f16 -> F16 (the bit patterns as stored). Throws like
/// write_safetensors.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Loads every tensor of a file: F32, F64, I64, BOOL map to f32, f64, i64, b8; BF16 is widened
/// to f32 (exact; the default, what model loaders want) or, with bf16_as = DType::bf16, kept as
/// a bf16 tensor (bit exact); F16 likewise: widened to f32 (exact) or, with f16_as = DType::f16,
/// kept as a float16 tensor. Other dtypes throw qkv::Error naming the tensor and its dtype, as
/// does a bf16_as other than f32 or bf16 (f16_as other than f32 or f16); file problems throw
/// SafeTensorsError (a truncated file included). BOOL bytes other than 0 become 1.
std::map<std::string, Tensor> load_safetensors(const std::string& path, DType bf16_as = DType::f32,
                                               DType f16_as = DType::f32);

}  // namespace qkv::io
