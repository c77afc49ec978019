#pragma once
// Atomic file writes: the content goes to a temporary file next to the target, which is fsynced
// and renamed over it, so readers see the old file or the whole new one, never a torn write.
// Used by checkpoints (io/safetensors.h), vocabularies (data/vocab.h) and plots (util/plot.h).
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::util {

/// Byte sink handed to the callback of write_file_atomic. write() throws qkv::Error naming the
/// target and its temporary file when the OS reports an error (disk full, I/O error).
class FileSink {
public:
    virtual ~FileSink() = default;
    virtual void write(const void* data, size_t n) = 0;
    void write(std::string_view s) { write(s.data(), s.size()); }
    /// Bytes written so far.
    virtual size_t bytes_written() const = 0;
};

/// Writes `path` atomically: `fill` writes the content into `path + ".tmp.<pid>"` (same folder,
/// so the rename stays on one file system); then the temporary is fsynced, renamed over `path`,
/// and the folder is fsynced. If `fill` throws or any step fails, the temporary is removed,
/// `path` is left as it was, and the error propagates. OS failures throw qkv::Error in the user's
/// terms: "cannot write 'PATH': cannot create its temporary file 'PATH.tmp.<pid>': Permission
/// denied" (likewise for writing, flushing, closing and renaming it), with errno's text.
///
/// Targets that are not regular files are written through, never replaced: a symlink is followed
/// (the link stays; the file it leads to, existing or not, is replaced atomically as above); a
/// character device, FIFO or socket (/dev/null, a named pipe: a FIFO waits for its reader) is
/// opened and written in place; /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N write to
/// that open descriptor after flushing std::cout, std::cerr and C stdio. Those writes cannot be
/// atomic. Throws qkv::Error for an empty path, a symlink loop (40 hops) or a descriptor that is
/// not open for writing.
void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill);

/// Checks, before slow work whose result goes to `path`, that write_file_atomic(path, ...) will be
/// able to create its temporary file: creates it and removes it again (the target itself is not
/// touched). Throws the qkv::Error write_file_atomic would ("cannot write 'PATH': cannot create its
/// temporary file 'PATH.tmp.<pid>': Permission denied"). For targets written in place (see
/// write_file_atomic) it checks write permission instead (a FIFO is not opened: that would wait
/// for its reader), or that the descriptor is open for writing.
void check_can_write(const std::string& path);

/// Whether write_file_atomic(path, ...) appends to a stream rather than writing a file: an open
/// descriptor by any spelling (/dev/stdout, a link to it) or a character device (/dev/null, a
/// terminal). Two outputs may share such a target; writing one file twice would lose the first.
/// A FIFO is not one (each write waits for its own reader). Throws as write_file_atomic would for
/// an empty path or a symlink loop.
bool is_stream_output(const std::string& path);

/// The temporary file write_file_atomic(path, ...) fills before the rename: path + ".tmp.<pid>".
std::string atomic_temp_path(const std::string& path);

/// The temporaries of atomic writes of `path` that never finished, in name order: path +
/// ".tmp.<digits>" where no live process other than this one has that pid (a live one is still
/// writing its own). A symlinked `path` lists those of the file it leads to; a device, FIFO or
/// descriptor has none. Lists only; no folder: none.
std::vector<std::string> stale_temp_paths(const std::string& path);

/// Removes the temporary files of atomic writes of `path` that never finished (named
/// path + ".tmp.<digits>" where no live process has that pid: one killed while it wrote) and
/// returns their paths, in name order. Throws qkv::Error naming the file when one cannot be removed.
std::vector<std::string> remove_stale_temp_files(const std::string& path);

/// Publishes the folder `tmp` (filled, on the file system of `out`) as `out` with one rename(2):
/// `out` must be absent or an empty folder, which the rename replaces atomically. Returns false,
/// leaving both as they are, when `out` is a folder that is not empty (filled by another process
/// since it was checked: the rename is the only check free of that race). Throws qkv::Error naming
/// `out` for any other failure (not a folder, permission denied).
bool rename_folder_into_place(const std::string& tmp, const std::string& out);

/// Same, with the whole content given as bytes.
void write_file_atomic(const std::string& path, std::string_view contents);

/// Reads a whole file into a string; throws qkv::Error naming the path when it cannot be opened
/// or read.
std::string read_file(const std::string& path);

}  // namespace qkv::util
