// `deepinfer tokenize`: encode text to ids or decode ids to text with the model's tokenizer.
//   deepinfer tokenize (--tokenizer FILE | --model DIR) (--text T | --file F | --decode 1,2,3)
// Encoding prints the ids space-separated on one line (no special tokens are added); decoding
// prints the text followed by a newline.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace deepinfer {

// `args` are the arguments after the word "tokenize". Returns the process exit code: 0 on
// success, 2 for bad usage, 1 when the tokenizer or input cannot be read.
int RunTokenizeCommand(const std::vector<std::string>& args);
int RunTokenizeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace deepinfer
