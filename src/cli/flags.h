// One flag registry per command: each flag is declared once with its value placeholder, help
// and setter, and the same list drives parsing, `--help` and errors.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace deepinfer {

template <typename Options>
struct Flag {
  const char* name;
  const char* value_name;  // nullptr for a switch
  const char* help;
  std::function<void(Options&, const std::string&)> set;
};

// The help of every command's --model flag.
inline constexpr const char* kModelFlagHelp = "model directory (default: the embedded default model, kjv-tiny)";

// The largest token count a flag takes (--max-tokens, --max-context, --input-len, ...): 2^24, the
// context limit of the config ranges, so that no count overflows the arithmetic it feeds.
inline constexpr int64_t kMaxTokensFlag = int64_t{1} << 24;

// Integer values in [min_value, max_value], with the flag named in errors. The whole text must be
// a decimal integer, and the range is checked on the parsed 64-bit value, so nothing wraps when
// the caller narrows it (--threads 4294967297 is an error, not 1).
int64_t ParseIntFlag(const std::string& flag, const std::string& value, int64_t min_value, int64_t max_value);
double ParseRealFlag(const std::string& flag, const std::string& value);
// "1,2,3" -> {1, 2, 3}; at least one entry, each in [min_value, max_value].
std::vector<int64_t> ParseIntListFlag(const std::string& flag, const std::string& text, int64_t min_value,
                                      int64_t max_value);
// Any value of T (Validate-style checks with their own messages follow).
template <typename T>
T ParseIntFlagAs(const std::string& flag, const std::string& value) {
  return static_cast<T>(ParseIntFlag(flag, value, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}
// --threads: 0 (one per hardware thread) up to ThreadPool::MaxThreads(), 4 per hardware thread.
int ParseThreadsFlag(const std::string& flag, const std::string& value);
// --seed: any non-negative 64-bit integer.
uint64_t ParseSeedFlag(const std::string& flag, const std::string& value);

void PrintFlagLines(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& lines);

template <typename Options>
void PrintFlagHelp(std::ostream& out, const std::vector<Flag<Options>>& flags) {
  std::vector<std::pair<std::string, std::string>> lines;
  for (const Flag<Options>& f : flags) {
    lines.emplace_back(std::string(f.name) + (f.value_name ? std::string(" ") + f.value_name : ""), f.help);
  }
  PrintFlagLines(out, lines);
}

template <typename Options>
void ParseFlags(const char* command, const std::vector<std::string>& args, const std::vector<Flag<Options>>& flags,
                Options& options) {
  for (size_t i = 0; i < args.size(); ++i) {
    const Flag<Options>* flag = nullptr;
    for (const Flag<Options>& f : flags) {
      if (args[i] == f.name) flag = &f;
    }
    if (flag == nullptr) {
      throw MakeError(command, ": unknown argument '", args[i], "' (see deepinfer ", command, " --help)");
    }
    if (flag->value_name != nullptr) {
      if (i + 1 >= args.size()) throw MakeError(flag->name, ": missing value ", flag->value_name);
      flag->set(options, args[++i]);
    } else {
      flag->set(options, "");
    }
  }
}

bool WantsHelp(const std::vector<std::string>& args);

}  // namespace deepinfer
