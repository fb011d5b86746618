#include "cli/default_model.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/embedded_file.h"
#include "core/error.h"
#include "core/regular_file.h"

// DEEPINFER_DEFAULT_MODEL_DIR is set by CMake to the model folder in the source tree,
// DEEPINFER_DEFAULT_MODEL_SHA256 to a SHA-256 of its files, and cli/default_model_files.inc lists
// them (src/cli/CMakeLists.txt).
#define DEEPINFER_EMBED(symbol, file) DEEPINFER_EMBED_FILE(symbol, DEEPINFER_DEFAULT_MODEL_DIR "/" file)

#define DEEPINFER_DEFAULT_MODEL_FILE(index, name) DEEPINFER_EMBED(di_default_##index, name)
#include "cli/default_model_files.inc"
#undef DEEPINFER_DEFAULT_MODEL_FILE
// DEEPINFER_PROJECT_TOKENIZER: data/tokenizer/tokenizer.json, DEEPINFER_PROJECT_TOKENIZER_SHA256 its hash.
DEEPINFER_EMBED_FILE(di_project_tokenizer, DEEPINFER_PROJECT_TOKENIZER)

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

struct EmbeddedFile {
  const char* name;
  std::string_view bytes;
};

std::vector<EmbeddedFile> DefaultModelFiles() {
  auto view = [](const char* begin, const char* end) { return std::string_view(begin, end - begin); };
  return {
#define DEEPINFER_DEFAULT_MODEL_FILE(index, name) {name, view(di_default_##index##_begin, di_default_##index##_end)},
#include "cli/default_model_files.inc"
#undef DEEPINFER_DEFAULT_MODEL_FILE
  };
}

// The per-user folder: created 0700, or accepted only when it is a real directory of this user
// that nobody else can write to or list.
fs::path PrivateFolder(const fs::path& temp) {
  const uid_t uid = ::geteuid();
  const fs::path folder = temp / ("deepinfer-" + std::to_string(uid));
  if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
    throw MakeError(folder.string(), ": cannot create the default model's folder: ", std::strerror(errno));
  }
  struct stat info {};
  if (::lstat(folder.c_str(), &info) != 0) {
    throw MakeError(folder.string(), ": cannot inspect the default model's folder: ", std::strerror(errno));
  }
  if (!S_ISDIR(info.st_mode) || info.st_uid != uid || (info.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    throw MakeError(folder.string(), ": not a private folder of this user (", FileTypeName(info.st_mode),
                    ", owner uid ", info.st_uid, ", mode ", mode, "; expected a directory owned by uid ", uid,
                    " with mode 0700): another user could have planted files in it; remove it or set TMPDIR");
  }
  return folder;
}

// Whether `dir` holds exactly the embedded files (contents compared byte for byte).
bool Intact(const fs::path& dir, const std::vector<EmbeddedFile>& files) {
  for (const EmbeddedFile& f : files) {
    const std::string path = (dir / f.name).string();
    struct stat link {};
    if (::lstat(path.c_str(), &link) != 0 || !S_ISREG(link.st_mode)) return false;
    try {
      if (ReadRegularFile(path, f.bytes.size()) != f.bytes) return false;
    } catch (const Error&) {
      return false;  // wrong size or unreadable
    }
  }
  return true;
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw MakeError(path.string(), ": cannot write the file");
}

// Unpacks `files` once into `<temp>/deepinfer-<uid>/<name>-<hash>` (see MaterializeDefaultModel).
std::string MaterializeEmbeddedFolder(const fs::path& temp, const std::string& name, std::string_view sha256,
                                      const std::vector<EmbeddedFile>& files) {
  const fs::path folder = PrivateFolder(temp);
  const fs::path target = folder / (name + "-" + std::string(sha256.substr(0, 16)));
  if (Intact(target, files)) return target.string();
  // Unpack into a fresh private folder, then rename it into place, so that a concurrent run never
  // sees a half-written folder; a damaged earlier copy is replaced.
  std::error_code ec;
  fs::remove_all(target, ec);
  std::string scratch = (folder / "unpack-XXXXXX").string();
  if (::mkdtemp(scratch.data()) == nullptr) {
    throw MakeError(scratch, ": cannot create a folder to unpack the ", name, ": ", std::strerror(errno));
  }
  for (const EmbeddedFile& f : files) WriteFile(fs::path(scratch) / f.name, f.bytes);
  fs::rename(scratch, target, ec);
  if (ec) {  // another run installed it first
    fs::remove_all(scratch, ec);
    if (!Intact(target, files)) {
      throw MakeError("cannot install the ", name, " at ", target.string(), "; remove it and retry");
    }
  }
  return target.string();
}

}  // namespace

std::string ModelDirOrDefault(const std::string& model) { return model.empty() ? MaterializeDefaultModel() : model; }

std::string MaterializeDefaultModel() { return MaterializeDefaultModel(fs::temp_directory_path()); }

std::string MaterializeDefaultModel(const fs::path& temp) {
  return MaterializeEmbeddedFolder(temp, "default-model", DEEPINFER_DEFAULT_MODEL_SHA256, DefaultModelFiles());
}

std::string MaterializeProjectTokenizer() { return MaterializeProjectTokenizer(fs::temp_directory_path()); }

std::string MaterializeProjectTokenizer(const fs::path& temp) {
  const std::vector<EmbeddedFile> files = {
      {"tokenizer.json",
       std::string_view(di_project_tokenizer_begin, di_project_tokenizer_end - di_project_tokenizer_begin)}};
  return (fs::path(MaterializeEmbeddedFolder(temp, "project-tokenizer", DEEPINFER_PROJECT_TOKENIZER_SHA256, files)) /
          "tokenizer.json")
      .string();
}

}  // namespace deepinfer
