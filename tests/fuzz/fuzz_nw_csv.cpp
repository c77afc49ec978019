// The Nadaraya-Watson "x,y" CSV (qkv nw --data): models::read_xy_csv.
#include "fuzz_util.h"
#include "qkv/core/tensor.h"
#include "qkv/models/nadaraya_watson.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto [x, y] = qkv::models::read_xy_csv(qkv::fuzz::write_scratch("xy.csv", qkv::fuzz::as_text(data, size)));
        if (x.numel() != y.numel() || x.numel() < 2) __builtin_trap();
    } catch (const qkv::Error&) {
    }
    return 0;
}
