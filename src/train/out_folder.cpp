// A model folder path as the OS will find it (train/out_folder.h).
#include "qkv/train/out_folder.h"

#include <algorithm>

namespace qkv::train {

namespace fs = std::filesystem;

OutFolder::OutFolder(const fs::path& given) {
    std::error_code ec;
    const fs::path abs = fs::absolute(given, ec);
    fs::path cur = abs.root_path();
    for (const fs::path& part : abs.relative_path()) {
        if (part.empty() || part == ".") continue;
        if (part == "..") {  // `cur` has no links left: its parent is the one the OS goes to
            cur = cur.parent_path();
            continue;
        }
        cur /= part;
        if (std::find(created.begin(), created.end(), cur) != created.end()) continue;  // made on the way
        if (!fs::exists(fs::symlink_status(cur, ec))) {
            created.push_back(cur);
            continue;
        }
        fs::path real = fs::canonical(cur, ec);
        if (ec) {  // a dangling link or a folder it may not search: the run cannot make the folder
            dir = abs.lexically_normal();
            return;
        }
        cur = std::move(real);
    }
    dir = cur;
}

void OutFolder::remove_created_folders() const {
    std::error_code ec;
    for (auto it = created.rbegin(); it != created.rend(); ++it)
        if (fs::is_directory(fs::symlink_status(*it, ec)) && fs::is_empty(*it, ec)) fs::remove(*it, ec);
}

}  // namespace qkv::train
