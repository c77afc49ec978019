// safetensors files: header length, header JSON (names, dtypes, shapes, data_offsets,
// __metadata__) and the data section, through SafeTensorsFile::from_bytes (io/safetensors.h); a
// file that validates is also read back by load_safetensors (the Tensor adapter) from disk.
#include "fuzz_util.h"
#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    try {
        auto f = qkv::io::SafeTensorsFile::from_bytes(std::move(bytes), "<fuzz>");
        size_t total = 0;
        for (const auto& e : f.entries()) {
            auto b = f.bytes(e.name);
            if (b.size() != e.end - e.begin) __builtin_trap();  // the span is what the header says
            total += b.size();
        }
        (void)total;
    } catch (const qkv::Error&) {
        return 0;
    }
    try {
        auto tensors = qkv::io::load_safetensors(qkv::fuzz::write_scratch("t.safetensors", qkv::fuzz::as_text(data, size)));
        for (auto& [name, t] : tensors) (void)t.numel();
    } catch (const qkv::Error&) {
        // a dtype the adapter does not load (e.g. U16): refused with a message
    }
    return 0;
}
