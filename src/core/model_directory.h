// A model directory, treated as possibly hostile: the engine reads only regular files inside
// it, whatever names its index lists and wherever its symlinks point.
//
// A name is relative to the directory, without "." or ".." components; it resolves (symlinks
// followed, with realpath) to a file inside the directory's real path. One exception keeps the
// Hugging Face hub cache working: in a snapshot folder (<repo>/snapshots/<revision>) a symlink
// may also resolve into the same repository's <repo>/blobs, where the hub keeps the content.
//
// The checks assume the directory does not change while a file is being opened: a symlink
// swapped between the check and the open is caught when it changes which file is opened
// (OpenRegularFile compares the inode), but not a directory component swapped in the same
// instant.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/regular_file.h"

namespace deepinfer {

class ModelDirectory {
 public:
  // Throws Error when `dir` does not exist or is not a directory.
  explicit ModelDirectory(std::string dir);

  const std::string& path() const { return dir_; }
  // `<dir>/<name>`, for messages.
  std::string PathOf(std::string_view name) const;

  // Whether anything is at `name`, even a dangling symlink or a FIFO (so that a broken file is
  // reported as broken instead of being treated as absent). Throws for a name that is not a
  // plain relative name.
  bool Has(std::string_view name) const;

  // Opens the regular file at `name`; throws Error naming `<dir>/<name>` when the name is not a
  // plain relative name, nothing is there, a symlink dangles or loops or leads outside the
  // directory, or what is there is not a regular file. `what` says what the file is for
  // ("shard listed in model.safetensors.index.json"), for the message.
  FileHandle Open(std::string_view name, std::string_view what) const;
  // The same, or nullopt when nothing at all is at `name`.
  std::optional<FileHandle> OpenIfPresent(std::string_view name, std::string_view what) const;

  // The names of the directory's entries that end with `suffix`, sorted; directories are
  // left out.
  std::vector<std::string> List(std::string_view suffix) const;

 private:
  void CheckName(std::string_view name, std::string_view what) const;
  bool Inside(const std::string& real) const;

  std::string dir_;
  std::string real_;
  std::optional<std::string> blobs_real_;  // <repo>/blobs of a hub snapshot
};

}  // namespace deepinfer
