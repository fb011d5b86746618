#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace deepinfer {
namespace {

std::string OsError(int error) {
  std::string text = std::strerror(error);
  if (error == ELOOP) text += " (a symlink loop)";
  return text;
}

}  // namespace

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

FileHandle::FileHandle(FileHandle&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

const char* FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

FileHandle OpenRegularFile(const std::string& path) {
  struct stat before {};
  if (::stat(path.c_str(), &before) != 0) {
    const int error = errno;
    if (error == ENOENT) throw MakeError(path, ": no such file");
    throw MakeError(path, ": cannot open: ", OsError(error));
  }
  if (!S_ISREG(before.st_mode)) throw MakeError(path, ": not a regular file (", FileTypeName(before.st_mode), ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw MakeError(path, ": cannot open: ", OsError(errno));
  struct stat info {};
  const bool stat_ok = ::fstat(fd, &info) == 0;
  const int stat_error = errno;
  FileHandle file(fd, stat_ok ? static_cast<uint64_t>(info.st_size) : 0, path);  // closes fd on the throws below
  if (!stat_ok) throw MakeError(path, ": cannot stat: ", OsError(stat_error));
  if (!S_ISREG(info.st_mode)) throw MakeError(path, ": not a regular file (", FileTypeName(info.st_mode), ")");
  if (info.st_dev != before.st_dev || info.st_ino != before.st_ino) {
    throw MakeError(path, ": the file was replaced while it was being opened");
  }
  return file;
}

std::string ReadWholeFile(const FileHandle& file, size_t max_bytes) {
  if (file.size() > max_bytes) {
    throw MakeError(file.path(), ": ", file.size(), " bytes exceed the ", max_bytes, "-byte limit for this file");
  }
  std::string bytes(static_cast<size_t>(file.size()), '\0');
  size_t done = 0;
  for (;;) {
    if (done == bytes.size()) {
      // The file may have grown since it was opened: read on, but never past the limit.
      if (bytes.size() > max_bytes) {
        throw MakeError(file.path(), ": more than ", max_bytes, " bytes (the limit for this file)");
      }
      bytes.resize(std::min(max_bytes + 1, bytes.size() + 65536));
    }
    const ssize_t got = ::pread(file.fd(), bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw MakeError(file.path(), ": read failed: ", OsError(errno));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  bytes.resize(done);
  if (bytes.size() > max_bytes) {
    throw MakeError(file.path(), ": more than ", max_bytes, " bytes (the limit for this file)");
  }
  return bytes;
}

std::string ReadRegularFile(const std::string& path, size_t max_bytes) {
  return ReadWholeFile(OpenRegularFile(path), max_bytes);
}

}  // namespace deepinfer
