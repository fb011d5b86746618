#include "cli/tokenize_command.h"

#include <charconv>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/flags.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "core/regular_file.h"
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

// --file: text to encode, read whole (a regular file, not a device or a FIFO).
constexpr size_t kMaxInputFileBytes = 64 << 20;

struct TokenizeOptions {
  std::optional<std::string> tokenizer_path;
  std::optional<std::string> model_dir;
  std::optional<std::string> text;
  std::optional<std::string> file;
  std::optional<std::string> decode;
};

// Each flag once.
void SetOnce(std::optional<std::string>& slot, const char* flag, const std::string& value) {
  if (slot) throw UsageError(std::string(flag) + " given twice");
  slot = value;
}

const std::vector<Flag<TokenizeOptions>>& Flags() {
  static const std::vector<Flag<TokenizeOptions>> flags = {
      {"--tokenizer", "FILE", "a tokenizer.json",
       [](TokenizeOptions& f, const std::string& v) { SetOnce(f.tokenizer_path, "--tokenizer", v); }},
      {"--model", "DIR", "a model directory (its tokenizer.json)",
       [](TokenizeOptions& f, const std::string& v) { SetOnce(f.model_dir, "--model", v); }},
      {"--text", "T", "text to encode", [](TokenizeOptions& f, const std::string& v) { SetOnce(f.text, "--text", v); }},
      {"--file", "F", "file whose bytes to encode",
       [](TokenizeOptions& f, const std::string& v) { SetOnce(f.file, "--file", v); }},
      {"--decode", "1,2,3", "token ids to decode",
       [](TokenizeOptions& f, const std::string& v) { SetOnce(f.decode, "--decode", v); }},
  };
  return flags;
}

TokenizeOptions ParseOptions(const std::vector<std::string>& args) {
  TokenizeOptions options;
  try {
    ParseFlags("tokenize", args, Flags(), options);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (options.tokenizer_path.has_value() == options.model_dir.has_value()) {
    throw UsageError("give exactly one of --tokenizer and --model");
  }
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
  try {
    return ReadRegularFile(path, kMaxInputFileBytes);
  } catch (const Error& e) {
    throw MakeError("--file: ", e.what());
  }
}

Tokenizer LoadTokenizer(const TokenizeOptions& options) {
  if (options.tokenizer_path) return Tokenizer::FromFile(*options.tokenizer_path);
  return Tokenizer::FromFile(ModelDirectory(*options.model_dir).Open("tokenizer.json", "the tokenizer"));
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
    // The input first: a bad --file is reported before the tokenizer takes its second to load.
    const std::string input = options.file ? ReadInputFile(*options.file) : options.text.value_or("");
    const Tokenizer tokenizer = LoadTokenizer(options);
    if (options.decode) {
      out << tokenizer.Decode(ParseIds(*options.decode, tokenizer)) << '\n';
      return 0;
    }
    const std::vector<int32_t> ids = tokenizer.Encode(input);
    for (size_t i = 0; i < ids.size(); ++i) out << (i == 0 ? "" : " ") << ids[i];
    out << '\n';
    return 0;
  } catch (const UsageError& error) {
    err << "deepinfer tokenize: " << error.what() << '\n' << kUsage << '\n';
    return 2;
  } catch (const Error& error) {
    err << "deepinfer tokenize: error: " << error.what() << '\n';
    return 1;
  }
}

}  // namespace deepinfer
