// config.json of a model folder (RunConfig): train::load_model_dir_config reads and validates it;
// a configuration it accepts must survive to_json -> run_config_from_json unchanged.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/train/model_dir.h"
#include "qkv/train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qkv::fuzz::write_scratch("config.json", qkv::fuzz::as_text(data, size));
    try {
        auto cfg = qkv::train::load_model_dir_config(qkv::fuzz::scratch_dir().string());
        auto j = qkv::train::to_json(cfg);
        if (qkv::train::to_json(qkv::train::run_config_from_json(j)) != j) __builtin_trap();
    } catch (const qkv::Error&) {
    }
    return 0;
}
