// checkpoint.safetensors on --resume: train::read_checkpoint_progress reads a checkpoint's
// metadata (format, version, progress, running sums, pending records) without its tensors, then
// train::has_missing_records compares the pending records with the folder's metrics.jsonl (a
// fixed, valid one here; fuzz_metrics varies it).
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = qkv::fuzz::write_scratch("checkpoint.safetensors", qkv::fuzz::as_text(data, size));
    static const bool metrics_written = [] {
        qkv::fuzz::write_scratch("metrics.jsonl",
                                 "{\"kind\":\"step\",\"step\":2,\"loss\":5.1}\n{\"kind\":\"val\",\"step\":4,\"val_loss\":4.0}\n");
        return true;
    }();
    (void)metrics_written;
    try {
        auto p = qkv::train::read_checkpoint_progress(path);
        (void)qkv::train::has_missing_records(qkv::fuzz::scratch_dir().string(), p);
        (void)qkv::train::read_checkpoint_metadata(path);
    } catch (const qkv::Error&) {
    }
    return 0;
}
