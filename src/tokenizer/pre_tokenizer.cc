#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "core/error.h"
#include "tokenizer/regex_translate.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

std::string Pcre2Message(int error_code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(error_code, buffer.data(), buffer.size());
  return std::string(reinterpret_cast<const char*>(buffer.data()));
}

}  // namespace

class RegexSplitSequence::CompiledPattern {
 public:
  CompiledPattern(const Step& step, const std::string& origin) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // PCRE2 refuses PCRE2_UCP next to PCRE2_LITERAL (a literal has no character classes anyway).
    const uint32_t options = PCRE2_UTF | (step.is_regex ? PCRE2_UCP : PCRE2_LITERAL);
    std::string pattern = step.pattern;
    if (step.is_regex) {
      try {
        pattern = TranslateOnigurumaPattern(step.pattern);
      } catch (const Error& error) {
        throw MakeError(origin, ": pre_tokenizer Split pattern: ", error.what());
      }
    }
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                          &error_offset, nullptr);
    if (code_ == nullptr) {
      throw MakeError(origin, ": pre_tokenizer Split pattern \"", Printable(step.pattern, 100),
                      "\" does not compile at offset ", error_offset, ": ", Pcre2Message(error_code));
    }
    // JIT is only a speed-up; without it (unsupported CPU) pcre2_match interprets the pattern.
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  }
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;
  ~CompiledPattern() { pcre2_code_free(code_); }

  const pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_;
};

// Per-call matching state: PCRE2 match data and, only if a match outgrows PCRE2's default
// 32 KiB JIT stack (very long whitespace runs), a larger stack.
class RegexSplitSequence::Matcher {
 public:
  Matcher() : match_data_(pcre2_match_data_create(1, nullptr)) { DI_CHECK(match_data_ != nullptr); }
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;
  ~Matcher() {
    pcre2_match_data_free(match_data_);
    if (context_ != nullptr) pcre2_match_context_free(context_);
    if (jit_stack_ != nullptr) pcre2_jit_stack_free(jit_stack_);
  }

  // Finds the first match in `text` at or after `start`; false when there is none.
  bool Find(const pcre2_code* code, std::string_view text, size_t start, size_t& match_begin, size_t& match_end) {
    int result = Match(code, text, start);
    if (result == PCRE2_ERROR_JIT_STACKLIMIT && jit_stack_ == nullptr) {
      constexpr size_t kLargeJitStackBytes = 64 << 20;
      jit_stack_ = pcre2_jit_stack_create(32 << 10, kLargeJitStackBytes, nullptr);
      context_ = pcre2_match_context_create(nullptr);
      DI_CHECK(jit_stack_ != nullptr && context_ != nullptr);
      pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
      result = Match(code, text, start);
    }
    if (result == PCRE2_ERROR_NOMATCH) return false;
    if (result < 0) {
      throw MakeError("tokenizer pre-tokenization failed on a ", text.size(), "-byte piece: ", Pcre2Message(result));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data_);
    match_begin = ovector[0];
    match_end = ovector[1];
    return true;
  }

 private:
  int Match(const pcre2_code* code, std::string_view text, size_t start) {
    // The text was validated once up front; re-checking per call would be quadratic.
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, PCRE2_NO_UTF_CHECK,
                       match_data_, context_);
  }

  pcre2_match_data* match_data_;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* jit_stack_ = nullptr;
};

RegexSplitSequence::RegexSplitSequence(const std::vector<Step>& steps, const std::string& origin) {
  for (const Step& step : steps) patterns_.push_back(std::make_unique<CompiledPattern>(step, origin));
}

RegexSplitSequence::RegexSplitSequence(RegexSplitSequence&&) noexcept = default;
RegexSplitSequence& RegexSplitSequence::operator=(RegexSplitSequence&&) noexcept = default;
RegexSplitSequence::~RegexSplitSequence() = default;

void RegexSplitSequence::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  Matcher matcher;
  SplitFromStep(0, text, matcher, pieces);
}

void RegexSplitSequence::SplitFromStep(size_t step, std::string_view text, Matcher& matcher,
                                       std::vector<std::string_view>& pieces) const {
  if (step == patterns_.size()) {
    pieces.push_back(text);
    return;
  }
  const pcre2_code* code = patterns_[step]->code();
  size_t gap_begin = 0;
  size_t search_from = 0;
  size_t match_begin = 0;
  size_t match_end = 0;
  while (search_from < text.size() && matcher.Find(code, text, search_from, match_begin, match_end)) {
    if (match_end == match_begin) {
      // HF drops empty splits; step over one code point so the scan always advances.
      if (match_begin >= text.size()) break;
      search_from = match_begin + DecodeUtf8Step(text.substr(match_begin)).length;
      continue;
    }
    if (match_begin > gap_begin)
      SplitFromStep(step + 1, text.substr(gap_begin, match_begin - gap_begin), matcher, pieces);
    SplitFromStep(step + 1, text.substr(match_begin, match_end - match_begin), matcher, pieces);
    gap_begin = search_from = match_end;
  }
  if (gap_begin < text.size()) SplitFromStep(step + 1, text.substr(gap_begin), matcher, pieces);
}

}  // namespace deepinfer
