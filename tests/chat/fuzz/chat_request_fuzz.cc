// libFuzzer target: arbitrary text as a chat request (a --messages file or an HTTP body).
// Parsing and rendering must end in a prompt or one deepinfer::Error, never a crash, a stack
// overflow on deep nesting, or an exception of another type. The same body's structured-output
// fields (response_format, structured_outputs, guided_*, a forced tool_choice) must compile into a
// constraint or one Error, and the constraint's matcher must accept every token its mask allows.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "../../fuzz_check.h"
#include "chat/chat_encoding.h"
#include "chat/structured_output.h"
#include "core/bounded_json.h"
#include "core/error.h"
#include "structured/constraint.h"
#include "structured/token_vocabulary.h"

using deepinfer::FuzzCheck;

namespace {

// Every single byte, a few multi-byte JSON pieces, and an end-of-sentence id (no text).
std::shared_ptr<const deepinfer::TokenVocabulary> Vocabulary() {
  static const auto vocabulary = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    for (const char* piece :
         {"{\"", "\":", "\",\"", "\"}", "true", "false", "null", "12", "-0.5e3", "ab", "  ", "\n"}) {
      bytes.emplace_back(piece);
    }
    std::vector<bool> text(bytes.size(), true);
    bytes.emplace_back("");
    text.push_back(false);
    return deepinfer::TokenVocabulary::FromTokens(std::move(bytes), std::move(text));
  }();
  return vocabulary;
}

// A few tokens of a walk through the constraint, each chosen from its mask by the input's bytes.
void WalkConstraint(std::shared_ptr<const deepinfer::Constraint> constraint, std::string_view choices) {
  const int32_t vocab = static_cast<int32_t>(Vocabulary()->size());
  deepinfer::ConstraintMatcher matcher(std::move(constraint), {vocab - 1});
  std::vector<uint64_t> mask((static_cast<size_t>(vocab) + 63) / 64);
  for (size_t step = 0; step < 24 && !matcher.finished(); ++step) {
    if (!matcher.FillNextTokenMask(mask)) break;
    const int32_t start = choices.empty() ? 0 : static_cast<uint8_t>(choices[step % choices.size()]) * 7 % vocab;
    int32_t token = -1;
    for (int32_t i = 0; i < vocab && token < 0; ++i) {
      const int32_t t = (start + i) % vocab;
      if (mask[t / 64] >> (t % 64) & 1) token = t;
    }
    FuzzCheck(token >= 0, "FillNextTokenMask said a token is allowed and set none");
    FuzzCheck(matcher.IsAllowed(token), "IsAllowed refused a token of the mask");
    FuzzCheck(matcher.Accept(token), "Accept refused a token of the mask");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto single_line = [](const deepinfer::Error& e) {
    FuzzCheck(std::string_view(e.what()).find('\n') == std::string_view::npos, "a multi-line error");
  };
  try {
    const deepinfer::ChatRequest request = deepinfer::ParseChatRequestText(text, "request.json");
    const std::string prompt = deepinfer::RenderChatPrompt(request.messages, request.options);
    FuzzCheck(!prompt.empty(), "an empty prompt");
  } catch (const deepinfer::Error& e) {
    single_line(e);
  }
  try {
    const nlohmann::ordered_json body =
        deepinfer::ParseOrderedJsonBounded(text, "request.json", deepinfer::kChatJsonLimits);
    if (auto constraint = deepinfer::CompileStructuredOutput(body, Vocabulary())) {
      WalkConstraint(std::move(constraint), text);
    }
  } catch (const deepinfer::Error& e) {
    single_line(e);
  }
  return 0;
}
