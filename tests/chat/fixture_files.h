// Lists and reads the golden chat fixtures written by tools/golden/chat/make_fixtures.py.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace deepinfer::testing {

inline std::filesystem::path ChatDataDir() { return std::filesystem::path(DEEPINFER_TEST_DATA_DIR) / "chat"; }

// Sorted so test names and order are stable.
inline std::vector<std::string> FixtureNames(const std::string& subdir) {
  std::vector<std::string> names;
  const auto dir = ChatDataDir() / subdir;
  if (!std::filesystem::is_directory(dir)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Key order matters (tool schemas render in insertion order), hence ordered_json.
inline nlohmann::ordered_json ReadJson(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return nlohmann::ordered_json::parse(text.str());
}

}  // namespace deepinfer::testing
