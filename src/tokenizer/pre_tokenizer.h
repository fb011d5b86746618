// The regex part of an HF pre-tokenizer: a sequence of `Split` steps with behavior "Isolated",
// each cutting every piece from the previous step into its matches and the gaps between them.
// Patterns run under PCRE2 in UTF + UCP mode; each piece is matched on its own, so lookarounds
// see the piece's ends, exactly as HF applies each step to each split separately.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class RegexSplitSequence {
 public:
  struct Step {
    std::string pattern;
    bool is_regex;  // false: `pattern` is a literal string
  };

  RegexSplitSequence(const std::vector<Step>& steps, const std::string& origin);
  RegexSplitSequence(RegexSplitSequence&&) noexcept;
  RegexSplitSequence& operator=(RegexSplitSequence&&) noexcept;
  ~RegexSplitSequence();

  // Appends the non-empty pieces of `text` (valid UTF-8) in order; they tile `text`.
  void Split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  class CompiledPattern;
  class Matcher;
  void SplitFromStep(size_t step, std::string_view text, Matcher& matcher, std::vector<std::string_view>& pieces) const;

  std::vector<std::unique_ptr<CompiledPattern>> patterns_;
};

}  // namespace deepinfer
