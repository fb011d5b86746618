// The embedded default model: tiny V4.1 checkpoint "tiny-a" (tests/data/models/tiny-a, the
// golden model that covers every layer role) compiled into the binary, so `deepinfer
// generate` runs with no download and no --model.
#pragma once

#include <string>

namespace deepinfer {

// Writes the embedded files once into a content-addressed folder under the system temp
// directory (reused by later runs) and returns its path, ready for Model::Load.
std::string MaterializeDefaultModel();

// `--model DIR` as the commands take it: DIR, or the embedded default when empty.
std::string ModelDirOrDefault(const std::string& model);

}  // namespace deepinfer
