#pragma once
// A model folder path (qkv train --out) as the operating system will find it once the run has made
// it: train::run resolves its --out with it, and the qkv program checks the same folder up front.
// The folders themselves are made by the run (fs::create_directories), not here.
#include <filesystem>
#include <vector>

namespace qkv::train {

/// A run's --out folder as the OS will find it once fs::create_directories has made it, worked out
/// before anything is created: each existing component with its symbolic links followed, ".." the
/// parent of the folder reached so far ("new/.." is the folder new is made in; "L/.." for a link L
/// to a folder elsewhere is that folder's parent, not the link's), "." and empty components
/// skipped. Taken from the path as given, so undoing a failed run finds the folders it made even
/// when the path goes through one and back out ("new/../other" makes new and other).
struct OutFolder {
    /// Absolute, without symbolic links, "." or "..". A component that is a dangling link or a
    /// folder that may not be searched stops the resolution: `dir` is then the given path made
    /// absolute and lexically normal (the run cannot make the folder).
    std::filesystem::path dir;
    std::vector<std::filesystem::path> created;  // the folders making `dir` creates, in that order (resolved likewise)
    explicit OutFolder(const std::filesystem::path& given);
    /// Removes the folders the run created that are empty, innermost first.
    void remove_created_folders() const;
};

}  // namespace qkv::train
