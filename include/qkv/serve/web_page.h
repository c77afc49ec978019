#pragma once
// The page `qkv serve` answers GET / with: one self-contained HTML file (inline CSS and
// JavaScript, no external resources, no build step). Type English and the French translation
// follows as you type (debounced POST /v1/translate); hovering or clicking a French word shows
// its cross-attention over the source words as a heatmap for a chosen layer and head (or the
// mean over heads); the n-best list shows each hypothesis with its score. The query string
// ?q=TEXT&word=N&layer=L&head=H prefills the text and selects a word, so a headless browser can
// drive it (tests/cli/test_serve_page.sh).
#include <string_view>

namespace qkv::serve {

/// The page's HTML (UTF-8).
std::string_view index_html();

}  // namespace qkv::serve
