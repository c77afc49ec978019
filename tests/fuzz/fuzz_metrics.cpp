// metrics.jsonl on --resume: the input is the folder's metrics.jsonl; the checkpoint's pending
// records (a "val" and an "epoch" record at step 4, as a run killed while validating leaves them)
// are fixed. train::has_missing_records reads every line, as a resume does to decide whether to
// validate again (torn lines, edits and non-objects are not records).
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qkv::fuzz::write_scratch("metrics.jsonl", qkv::fuzz::as_text(data, size));
    qkv::train::TrainingProgress p;
    p.step = 4;
    p.pending_records = R"([{"kind":"val","step":4,"epoch_pos":1.0,"val_loss":4.5,"train_seconds":1.0},)"
                        R"({"kind":"epoch","step":4,"epoch":1,"train_loss":5.0,"partial":false}])";
    try {
        (void)qkv::train::has_missing_records(qkv::fuzz::scratch_dir().string(), p);
    } catch (const qkv::Error&) {
    }
    return 0;
}
