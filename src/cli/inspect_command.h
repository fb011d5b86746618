// `deepinfer inspect`.
#pragma once

#include <string>
#include <vector>

namespace deepinfer {

// deepinfer inspect [--model DIR]: config summary, layer roles, tensor table, and the checkpoint
// checked against the tensor inventory (model/weights.h). Returns 1 when a tensor is wrong.
int RunInspectCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
