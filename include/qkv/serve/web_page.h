#pragma once
// The page `qkv serve` answers GET / with: one self-contained HTML file (inline CSS and
// JavaScript, no external resources, no build step), labelled with the served model's languages.
// Type a sentence and its translation follows as you type (debounced POST /v1/translate);
// hovering or clicking a word of the translation shows
// its cross-attention over the source words as a heatmap for a chosen layer and head (or the
// mean over heads); the n-best list shows each hypothesis with its score. The query string
// ?q=TEXT&word=N&layer=L&head=H prefills the text and selects a word, layer and head, counted from
// 1 as the page's labels are (head=mean: the mean), so a headless browser can drive it
// (tests/cli/test_serve_page.sh); a value beyond the model or the translation is shown as an
// error. ?key=KEY fills the API key field.
#include <string>

#include "qkv/serve/request.h"

namespace qkv::serve {

/// The page's HTML (UTF-8), its title and headings naming the languages (language_name; a side
/// the model does not record reads "Source" / "Translation"). attention: whether the page asks
/// for cross-attention weights (Transformer models; a GRU/Bahdanau model refuses the request).
/// key_field: whether the API key field is shown (qkv serve --api-key; the page also shows it when
/// a request is answered 401 or 403). The key is sent in the X-API-Key header.
std::string index_html(const LanguagePair& languages, bool attention = true, bool key_field = false);

}  // namespace qkv::serve
