#include "core/model_directory.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> RealPath(const std::string& path, int* error) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) {
    *error = errno;
    return std::nullopt;
  }
  std::string out = resolved;
  std::free(resolved);
  return out;
}

std::string Suffix(std::string_view what) { return what.empty() ? std::string() : detail::Concat(" (", what, ")"); }

}  // namespace

ModelDirectory::ModelDirectory(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  int error = 0;
  const std::optional<std::string> real = RealPath(dir_, &error);
  if (!real) {
    if (error == ENOENT) throw MakeError(dir_, ": no such directory");
    throw MakeError(dir_, ": cannot resolve: ", std::strerror(error), error == ELOOP ? " (a symlink loop)" : "");
  }
  struct stat info {};
  if (::stat(real->c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw MakeError(dir_, ": not a directory (", FileTypeName(info.st_mode), ")");
  }
  real_ = *real;
  const fs::path snapshot(real_);
  if (snapshot.parent_path().filename() == "snapshots") {
    const std::optional<std::string> blobs =
        RealPath((snapshot.parent_path().parent_path() / "blobs").string(), &error);
    if (blobs && fs::is_directory(*blobs)) blobs_real_ = *blobs;
  }
}

std::string ModelDirectory::PathOf(std::string_view name) const {
  std::string out = dir_;
  if (out != "/") out += '/';
  out += name;
  return out;
}

void ModelDirectory::CheckName(std::string_view name, std::string_view what) const {
  const std::string shown = "'" + Printable(name) + "'";
  if (name.empty()) throw MakeError(dir_, ": empty file name", Suffix(what));
  if (name.find('\0') != std::string_view::npos) {
    throw MakeError(dir_, ": file name ", shown, " contains a NUL byte", Suffix(what));
  }
  if (name.front() == '/') {
    throw MakeError(dir_, ": file name ", shown, " is an absolute path; model files must be inside the model directory",
                    Suffix(what));
  }
  for (size_t begin = 0; begin <= name.size();) {
    const size_t end = std::min(name.find('/', begin), name.size());
    if (name.substr(begin, end - begin) == "..") {
      throw MakeError(dir_, ": file name ", shown,
                      " climbs out with '..'; model files must be inside the model directory", Suffix(what));
    }
    begin = end + 1;
  }
}

bool ModelDirectory::Inside(const std::string& real) const {
  auto under = [&](const std::string& root) { return real.size() > root.size() && real.starts_with(root + "/"); };
  return under(real_) || (real_ == "/" && real.size() > 1) || (blobs_real_ && under(*blobs_real_));
}

bool ModelDirectory::Has(std::string_view name) const {
  CheckName(name, "");
  struct stat info {};
  if (::lstat(PathOf(name).c_str(), &info) == 0) return true;
  return errno != ENOENT && errno != ENOTDIR;
}

std::optional<FileHandle> ModelDirectory::OpenIfPresent(std::string_view name, std::string_view what) const {
  if (!Has(name)) return std::nullopt;
  return Open(name, what);
}

FileHandle ModelDirectory::Open(std::string_view name, std::string_view what) const {
  CheckName(name, what);
  const std::string path = PathOf(name);
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw MakeError(path, ": no such file", Suffix(what));
    throw MakeError(path, ": cannot access: ", std::strerror(errno), Suffix(what));
  }
  int error = 0;
  const std::optional<std::string> real = RealPath(path, &error);
  if (!real) {
    if (error == ENOENT) throw MakeError(path, ": a dangling symlink", Suffix(what));
    if (error == ELOOP) throw MakeError(path, ": a symlink loop", Suffix(what));
    throw MakeError(path, ": cannot resolve: ", std::strerror(error), Suffix(what));
  }
  if (!Inside(*real)) {
    throw MakeError(path, ": resolves to ", Printable(*real), ", outside the model directory ", real_,
                    "; model files must be inside it", Suffix(what));
  }
  try {
    return OpenRegularFile(path);
  } catch (const Error& e) {
    throw MakeError(e.what(), Suffix(what));
  }
}

std::vector<std::string> ModelDirectory::List(std::string_view suffix) const {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.ends_with(suffix) && !it->is_directory(type_ec)) names.push_back(name);
  }
  if (ec) throw MakeError(dir_, ": cannot list directory: ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace deepinfer
