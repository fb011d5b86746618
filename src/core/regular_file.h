// Opening files that a hostile directory or command line may name: a FIFO must not block the
// open, a device (/dev/zero) or a directory must not be read as if it were a file, and a file
// is never read past a stated size limit.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace deepinfer {

// An open read-only descriptor of a regular file, closed on destruction.
class FileHandle {
 public:
  FileHandle(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  ~FileHandle();
  FileHandle(FileHandle&& other) noexcept;
  FileHandle& operator=(FileHandle&& other) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open time
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// Opens `path` read-only. The type is checked with stat() first and again with fstat() on the
// descriptor (opened O_NONBLOCK, so even a FIFO swapped in between cannot block), so only a
// regular file is ever opened for reading. Throws Error("<path>: ...") naming what is there
// instead: nothing, a directory, a FIFO, a device, a socket, a symlink loop.
FileHandle OpenRegularFile(const std::string& path);

// The whole content of `file` / `path`; Error when it holds more than `max_bytes`.
std::string ReadWholeFile(const FileHandle& file, size_t max_bytes);
std::string ReadRegularFile(const std::string& path, size_t max_bytes);

// "a directory", "a FIFO", "a character device", ...: what a non-regular st_mode is, for messages.
const char* FileTypeName(mode_t mode);

}  // namespace deepinfer
