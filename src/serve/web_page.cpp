// Placeholder replaced below.
#include "qkv/serve/web_page.h"
namespace qkv::serve {
std::string_view index_html() { return "<!doctype html><title>qkv</title>"; }
}  // namespace qkv::serve
