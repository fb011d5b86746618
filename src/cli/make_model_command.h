// `deepinfer make-model`: writes a random DeepSeek-V4.1 checkpoint in the released layout
// (model/random_checkpoint.h: the presets, the layer schedule, the weights).
//
//   deepinfer make-model --preset v41-flash-slice --layers L --experts E --out DIR
//                        [--vocab V] [--engram-rows R] [--seed S] [--shard-gb G]
//                        [--threads N] [--tokenizer FILE]
//   deepinfer make-model --preset tiny --out DIR [same flags; --layers 8 --experts 8 by default]
//
// The tokenizer copied into the model is the project's (embedded in the binary) unless
// --tokenizer names another.
#pragma once

#include <string>
#include <vector>

#include "model/random_checkpoint.h"

namespace deepinfer {

// Parses the flags and applies the preset's defaults; throws Error on a missing or bad one.
RandomCheckpointOptions ParseMakeModelArgs(const std::vector<std::string>& args);

// The command: parse, make, print a summary. Returns 0; errors are thrown as Error.
int RunMakeModelCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
