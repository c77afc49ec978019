#pragma once
// D2L's text normalisation and word tokenisation for the English–French data (D2L §10.5
// "Machine Translation and the Dataset"; d2l_spec.md §2; quality_anchor.md §2.1 steps 2–3).
#include <string>
#include <string_view>
#include <vector>

namespace qkv::data {

/// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);

/// Byte offset (0-based) where the first ill-formed sequence of `s` starts, or
/// std::string_view::npos when `s` is well-formed UTF-8 (is_valid_utf8's rules).
size_t invalid_utf8_offset(std::string_view s);

/// Number of code points in valid UTF-8 `s`.
int64_t utf8_length(std::string_view s);

/// D2L preprocessing of one sentence: U+202F and U+00A0 become ' '; Unicode lower case; then a
/// ' ' is inserted before each of , . ! ? whose previous character exists and is not ' ' (the
/// anchor's regex (?<=[^ ])([,.!?]) -> ' \1', judged on the lower-cased text, so "wait..." gives
/// "wait . . ."). Lower case is utf8proc's simple case mapping plus U+0130 -> "i̇" as Python's
/// str.lower(); Python's context-dependent final sigma (Σ -> ς at a word end) is not reproduced
/// (no such text in fra.txt). Throws qkv::Error on invalid UTF-8.
std::string preprocess_nmt(std::string_view text);

/// Splits on single ' ' (Python's s.split(' ')); with drop_empty, empty tokens are removed (D2L
/// EN and the anchor); without, "a  b" gives {"a", "", "b"} (D2L ZH).
std::vector<std::string> split_tokens(std::string_view text, bool drop_empty = true);

/// preprocess_nmt then split_tokens(drop_empty = true): "Go." -> {"go", "."}.
std::vector<std::string> tokenize_nmt(std::string_view text);

}  // namespace qkv::data
