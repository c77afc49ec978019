// Out-of-line parts of the test helpers (the header holds the templates).
#include "support/test_util.h"
