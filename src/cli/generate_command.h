// `deepinfer generate`.
#pragma once

#include <string>
#include <vector>

namespace deepinfer {

// deepinfer generate [--model DIR] (--prompt-ids 1,2,3 | --prompt TEXT [--chat]) --max-tokens N
//                    [--temperature T] [--seed S] [--threads N] [--isa LEVEL] [--max-context N]
//                    [--dump-logits FILE.npy] [--show-ids] [--ignore-eos]
int RunGenerateCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
