// libFuzzer target: arbitrary text as model.safetensors.index.json. Parsing must end in a shard
// map or a deepinfer::Error; every shard name it yields must then be judged by the model
// directory's confinement without a crash: a name that climbs out or is absolute is never
// accepted, and nothing ever opens in the (empty) directory.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "../../fuzz_check.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "io/safetensors.h"

namespace {

using deepinfer::FuzzCheck;

// An empty private directory: a name can only be "present" by climbing out of it.
const deepinfer::ModelDirectory& EmptyDirectory() {
  static const deepinfer::ModelDirectory dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "shard_index_fuzz_XXXXXX").string();
    FuzzCheck(::mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
    return deepinfer::ModelDirectory(pattern);
  }();
  return dir;
}

bool ClimbsOut(std::string_view name) {
  if (name.starts_with('/')) return true;
  for (size_t begin = 0; begin <= name.size();) {
    const size_t end = std::min(name.find('/', begin), name.size());
    if (name.substr(begin, end - begin) == "..") return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  deepinfer::ShardIndex index;
  try {
    index = deepinfer::ParseShardIndex(text, "model.safetensors.index.json");
  } catch (const deepinfer::Error&) {
    return 0;
  }
  FuzzCheck(!index.empty(), "an empty index was accepted");
  for (const auto& [shard, tensors] : index) {
    FuzzCheck(!tensors.empty(), "a shard without tensors");
    bool present = false;
    try {
      present = EmptyDirectory().Has(shard);
    } catch (const deepinfer::Error&) {
      FuzzCheck(shard.empty() || ClimbsOut(shard) || shard.find('\0') != std::string::npos, "a plain name was refused");
      continue;
    }
    FuzzCheck(!ClimbsOut(shard) && !shard.empty(), "a name that leaves the directory was accepted");
    if (!present) continue;
    // Something unreadable at the name (e.g. one too long for the OS): opening it is an Error too.
    try {
      EmptyDirectory().Open(shard, "shard");
      FuzzCheck(false, "a file opened in the empty directory");
    } catch (const deepinfer::Error&) {
    }
  }
  return 0;
}
