#include "cli/default_model.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/embedded_file.h"
#include "core/error.h"

// DEEPINFER_DEFAULT_MODEL_DIR is set by CMake to the model folder in the source tree.
#define DEEPINFER_EMBED(symbol, file) DEEPINFER_EMBED_FILE(symbol, DEEPINFER_DEFAULT_MODEL_DIR "/" file)

DEEPINFER_EMBED(di_default_config, "config.json")
DEEPINFER_EMBED(di_default_index, "model.safetensors.index.json")
DEEPINFER_EMBED(di_default_shard1, "model-00001-of-00002.safetensors")
DEEPINFER_EMBED(di_default_shard2, "model-00002-of-00002.safetensors")
DEEPINFER_EMBED(di_default_tokenizer, "tokenizer.json")

namespace deepinfer {
namespace {

struct EmbeddedFile {
  const char* name;
  std::string_view bytes;
};

std::vector<EmbeddedFile> Files() {
  auto view = [](const char* begin, const char* end) { return std::string_view(begin, end - begin); };
  return {
      {"config.json", view(di_default_config_begin, di_default_config_end)},
      {"model.safetensors.index.json", view(di_default_index_begin, di_default_index_end)},
      {"model-00001-of-00002.safetensors", view(di_default_shard1_begin, di_default_shard1_end)},
      {"model-00002-of-00002.safetensors", view(di_default_shard2_begin, di_default_shard2_end)},
      {"tokenizer.json", view(di_default_tokenizer_begin, di_default_tokenizer_end)},
  };
}

uint64_t Fnv1a(uint64_t hash, std::string_view bytes) {
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

bool Complete(const std::filesystem::path& dir, const std::vector<EmbeddedFile>& files) {
  std::error_code ec;
  for (const EmbeddedFile& f : files) {
    if (std::filesystem::file_size(dir / f.name, ec) != f.bytes.size() || ec) return false;
  }
  return true;
}

}  // namespace

std::string ModelDirOrDefault(const std::string& model) { return model.empty() ? MaterializeDefaultModel() : model; }

std::string MaterializeDefaultModel() {
  const std::vector<EmbeddedFile> files = Files();
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const EmbeddedFile& f : files) hash = Fnv1a(Fnv1a(hash, f.name), f.bytes);
  char name[64];
  std::snprintf(name, sizeof(name), "deepinfer-default-model-%016llx", static_cast<unsigned long long>(hash));
  const std::filesystem::path root = std::filesystem::temp_directory_path();
  const std::filesystem::path target = root / name;
  if (Complete(target, files)) return target.string();

  // Write into a private folder, then rename it into place, so concurrent runs never see
  // a half-written model.
  std::string scratch = (root / (std::string(name) + ".XXXXXX")).string();
  if (::mkdtemp(scratch.data()) == nullptr) throw MakeError("cannot create a temporary folder under ", root.string());
  for (const EmbeddedFile& f : files) {
    std::ofstream out(std::filesystem::path(scratch) / f.name, std::ios::binary);
    out.write(f.bytes.data(), static_cast<std::streamsize>(f.bytes.size()));
    if (!out) throw MakeError("cannot write the default model into ", scratch);
  }
  std::error_code ec;
  std::filesystem::rename(scratch, target, ec);
  if (ec) {  // another run won the race, or a stale partial folder is in the way
    std::filesystem::remove_all(scratch, ec);
    if (!Complete(target, files)) {
      std::filesystem::remove_all(target, ec);
      throw MakeError("cannot install the default model at ", target.string(), "; remove it and retry");
    }
  }
  return target.string();
}

}  // namespace deepinfer
