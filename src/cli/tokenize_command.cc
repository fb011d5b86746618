#include "cli/tokenize_command.h"

#include <charconv>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/flags.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

constexpr char kUsage[] =
    "usage: deepinfer tokenize (--tokenizer FILE | --model DIR) (--text T | --file F | --decode 1,2,3)";

// Bad command lines, reported with the usage line and exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

struct TokenizeOptions {
  std::string tokenizer_path;
  std::optional<std::string> text;
  std::optional<std::string> file;
  std::optional<std::string> decode;
};

struct TokenizeFlags {
  std::optional<std::string> tokenizer, model, text, file, decode;
};

// Each flag once.
void SetOnce(std::optional<std::string>& slot, const char* flag, const std::string& value) {
  if (slot) throw UsageError(std::string(flag) + " given twice");
  slot = value;
}

const std::vector<Flag<TokenizeFlags>>& Flags() {
  static const std::vector<Flag<TokenizeFlags>> flags = {
      {"--tokenizer", "FILE", "a tokenizer.json",
       [](TokenizeFlags& f, const std::string& v) { SetOnce(f.tokenizer, "--tokenizer", v); }},
      {"--model", "DIR", "a model directory (its tokenizer.json)",
       [](TokenizeFlags& f, const std::string& v) { SetOnce(f.model, "--model", v); }},
      {"--text", "T", "text to encode", [](TokenizeFlags& f, const std::string& v) { SetOnce(f.text, "--text", v); }},
      {"--file", "F", "file whose bytes to encode",
       [](TokenizeFlags& f, const std::string& v) { SetOnce(f.file, "--file", v); }},
      {"--decode", "1,2,3", "token ids to decode",
       [](TokenizeFlags& f, const std::string& v) { SetOnce(f.decode, "--decode", v); }},
  };
  return flags;
}

TokenizeOptions ParseOptions(const std::vector<std::string>& args) {
  TokenizeFlags f;
  try {
    ParseFlags("tokenize", args, Flags(), f);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (f.tokenizer.has_value() == f.model.has_value()) throw UsageError("give exactly one of --tokenizer and --model");
  TokenizeOptions options;
  options.text = f.text;
  options.file = f.file;
  options.decode = f.decode;
  options.tokenizer_path = f.tokenizer ? *f.tokenizer : *f.model + "/tokenizer.json";
  const int inputs = options.text.has_value() + options.file.has_value() + options.decode.has_value();
  if (inputs != 1) throw UsageError("give exactly one of --text, --file and --decode");
  return options;
}

std::vector<int32_t> ParseIds(const std::string& list, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  std::istringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t begin = item.find_first_not_of(' ');
    const size_t end = item.find_last_not_of(' ');
    const std::string trimmed = begin == std::string::npos ? "" : item.substr(begin, end - begin + 1);
    int64_t id = -1;
    const auto [rest, status] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), id);
    if (trimmed.empty() || status != std::errc() || rest != trimmed.data() + trimmed.size()) {
      throw UsageError("--decode: \"" + item + "\" is not a token id (expected comma-separated integers)");
    }
    if (id < 0 || static_cast<uint64_t>(id) >= tokenizer.size()) {
      throw UsageError("--decode: id " + std::to_string(id) + " is outside the tokenizer (ids 0.." +
                       std::to_string(tokenizer.size() - 1) + ")");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string ReadInputFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MakeError("--file: cannot open \"", path, "\"");
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

int RunTokenizeCommand(const std::vector<std::string>& args) { return RunTokenizeCommand(args, std::cout, std::cerr); }

int RunTokenizeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (WantsHelp(args)) {
    out << kUsage << "\n";
    PrintFlagHelp(out, Flags());
    return 0;
  }
  try {
    const TokenizeOptions options = ParseOptions(args);
    const Tokenizer tokenizer = Tokenizer::FromFile(options.tokenizer_path);
    if (options.decode) {
      out << tokenizer.Decode(ParseIds(*options.decode, tokenizer)) << '\n';
      return 0;
    }
    const std::vector<int32_t> ids = tokenizer.Encode(options.text ? *options.text : ReadInputFile(*options.file));
    for (size_t i = 0; i < ids.size(); ++i) out << (i == 0 ? "" : " ") << ids[i];
    out << '\n';
    return 0;
  } catch (const UsageError& error) {
    err << "deepinfer tokenize: " << error.what() << '\n' << kUsage << '\n';
    return 2;
  } catch (const Error& error) {
    err << "deepinfer tokenize: " << error.what() << '\n';
    return 1;
  }
}

}  // namespace deepinfer
