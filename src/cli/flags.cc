#include "cli/flags.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>

#include "core/thread_pool.h"

namespace deepinfer {

int64_t ParseIntFlag(const std::string& flag, const std::string& value, int64_t min_value, int64_t max_value) {
  int64_t parsed = 0;
  const char* end = value.data() + value.size();
  const auto [rest, status] = std::from_chars(value.data(), end, parsed);
  if (value.empty() || rest != end || (status != std::errc() && status != std::errc::result_out_of_range)) {
    throw MakeError(flag, ": expected an integer, got '", Printable(value, 60), "'");
  }
  if (status == std::errc::result_out_of_range) {
    throw MakeError(flag, ": ", Printable(value, 60), " is out of range (expected ", min_value, "..", max_value, ")");
  }
  if (parsed < min_value) throw MakeError(flag, ": must be at least ", min_value, ", got ", parsed);
  if (parsed > max_value) throw MakeError(flag, ": ", parsed, " exceeds the maximum of ", max_value);
  return parsed;
}

double ParseRealFlag(const std::string& flag, const std::string& value) {
  size_t used = 0;
  double parsed = 0;
  try {
    parsed = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (value.empty() || used != value.size() || !std::isfinite(parsed)) {
    throw MakeError(flag, ": expected a number, got '", value, "'");
  }
  return parsed;
}

std::vector<int64_t> ParseIntListFlag(const std::string& flag, const std::string& text, int64_t min_value,
                                      int64_t max_value) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(ParseIntFlag(flag, item, min_value, max_value));
  if (values.empty()) throw MakeError(flag, ": no values given");
  return values;
}

int ParseThreadsFlag(const std::string& flag, const std::string& value) {
  const int64_t threads = ParseIntFlag(flag, value, 0, std::numeric_limits<int64_t>::max());
  if (threads > ThreadPool::MaxThreads()) {
    throw MakeError(flag, ": ", threads, " is more than ", ThreadPool::kMaxThreadsPerHardwareThread,
                    " threads per hardware thread (at most ", ThreadPool::MaxThreads(), " on this machine)");
  }
  return static_cast<int>(threads);
}

uint64_t ParseSeedFlag(const std::string& flag, const std::string& value) {
  return static_cast<uint64_t>(ParseIntFlag(flag, value, 0, std::numeric_limits<int64_t>::max()));
}

void PrintFlagLines(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& lines) {
  for (const auto& [left, help] : lines) {
    const std::string indented = "  " + left;
    // At least two spaces before the help, so the flag and its value stay apart from it.
    out << indented << std::string(indented.size() < 26 ? 28 - indented.size() : 2, ' ') << help << "\n";
  }
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace deepinfer
