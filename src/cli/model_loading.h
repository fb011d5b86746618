// Loading a model for the commands that then answer people (serve, chat, generate): the
// normal Model::Load (headers, validation, bindings; weights stay memory-mapped), then one
// read of every weight page with a progress bar, so the first request does not stall on the
// disk. Skipped when the weights exceed half of the machine's memory (they would evict each
// other; the mapping then streams them as before).
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace deepinfer {

std::unique_ptr<Model> LoadModelAndPageIn(const std::string& model_dir, const ModelOptions& options = {});

}  // namespace deepinfer
