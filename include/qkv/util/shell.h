#pragma once
// Commands printed for the user to copy (qkv train's "continue with: qkv train --resume --out X").
#include <string>

namespace qkv::util {

/// `s` as one word for a POSIX shell, for commands printed to be copied: unchanged when it is
/// non-empty and holds only letters, digits and _ . / : = @ % + , -; otherwise inside single quotes,
/// each ' written as '\'' (e.g. "my run" -> 'my run', "it's" -> 'it'\''s').
std::string shell_quote(const std::string& s);

}  // namespace qkv::util
