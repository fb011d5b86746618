#pragma once

#include <string>
#include <vector>

namespace deepinfer {

// `deepinfer perplexity --file TEXT [--model DIR] [--context N] [--stride S]`.
int RunPerplexityCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
