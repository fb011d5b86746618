#include "cli/flags.h"

#include <cmath>
#include <ostream>
#include <sstream>

namespace deepinfer {

int64_t ParseIntFlag(const std::string& flag, const std::string& value, int64_t min_value) {
  size_t used = 0;
  int64_t parsed = 0;
  try {
    parsed = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (value.empty() || used != value.size()) throw MakeError(flag, ": expected an integer, got '", value, "'");
  if (parsed < min_value) throw MakeError(flag, ": must be at least ", min_value, ", got ", parsed);
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

std::vector<int64_t> ParseIntListFlag(const std::string& flag, const std::string& text, int64_t min_value) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(ParseIntFlag(flag, item, min_value));
  if (values.empty()) throw MakeError(flag, ": no values given");
  return values;
}

void PrintFlagLines(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& lines) {
  for (const auto& [left, help] : lines) {
    const std::string indented = "  " + left;
    out << indented << std::string(indented.size() < 28 ? 28 - indented.size() : 1, ' ') << help << "\n";
  }
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace deepinfer
