// Process resource figures (peak RSS) for the CLI's summaries and the benchmarks.
#include <sys/resource.h>

#include "qkv/util/timer.h"

namespace qkv::util {

int64_t peak_rss_bytes() {
    struct rusage ru {};
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return int64_t(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace qkv::util
