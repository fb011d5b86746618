// Brute-force inputs for the automaton tests: every string over a small alphabet.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace deepinfer {

// Every string over `alphabet` of length <= max_length, shortest first.
inline std::vector<std::string> AllStrings(const std::string& alphabet, size_t max_length) {
  std::vector<std::string> out = {""};
  for (size_t begin = 0, length = 0; length < max_length; ++length) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
  return out;
}

}  // namespace deepinfer
