#include "tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

// Rust regex `\w` (what HF uses for `single_word`), approximated with general categories:
// letters, marks, decimal digits, connector punctuation, letter numbers and the joiners.
bool IsWordChar(char32_t code_point) {
  if (code_point == 0x200C || code_point == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(code_point))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:  // clang-format off
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:  // clang-format on
      return true;
    default:
      return false;
  }
}

char32_t LastCodePoint(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return DecodeUtf8Step(text.substr(start)).code_point;
}

// Start of the run of whitespace that ends `text`.
size_t TrailingWhiteSpaceStart(std::string_view text) {
  size_t start = text.size();
  while (start > 0) {
    size_t previous = start - 1;
    while (previous > 0 && (static_cast<uint8_t>(text[previous]) & 0xC0) == 0x80) --previous;
    if (!IsUnicodeWhiteSpace(DecodeUtf8Step(text.substr(previous)).code_point)) break;
    start = previous;
  }
  return start;
}

size_t LeadingWhiteSpaceLength(std::string_view text) {
  size_t length = 0;
  while (length < text.size()) {
    const Utf8Step step = DecodeUtf8Step(text.substr(length));
    if (!IsUnicodeWhiteSpace(step.code_point)) break;
    length += step.length;
  }
  return length;
}

}  // namespace

void AddedTokenMatcher::Trie::Insert(std::string_view content, int32_t token_index) {
  int32_t node = 0;
  for (const char character : content) {
    const auto byte = static_cast<uint8_t>(character);
    int32_t next = Child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(byte, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  // The first token with a given content wins, like HF's pattern order.
  if (nodes_[node].token_index < 0) nodes_[node].token_index = token_index;
}

int32_t AddedTokenMatcher::Trie::Child(int32_t node, uint8_t byte) const {
  for (const auto& [child_byte, child] : nodes_[node].children) {
    if (child_byte == byte) return child;
  }
  return -1;
}

int32_t AddedTokenMatcher::Trie::LongestAt(std::string_view text, size_t start, size_t& length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = start; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token_index >= 0) {
      best = nodes_[node].token_index;
      length = i + 1 - start;
    }
  }
  return best;
}

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;  // HF ignores empty added tokens
    (tokens_[i].normalized ? normalized_trie_ : raw_trie_).Insert(tokens_[i].content, static_cast<int32_t>(i));
  }
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Segment> raw_pass;
  SplitWith(raw_trie_, text, raw_pass);
  std::vector<Segment> segments;
  for (const Segment& segment : raw_pass) {
    if (segment.added_token_id >= 0) {
      segments.push_back(segment);
    } else {
      SplitWith(normalized_trie_, segment.text, segments);
    }
  }
  return segments;
}

void AddedTokenMatcher::SplitWith(const Trie& trie, std::string_view text, std::vector<Segment>& out) const {
  size_t emitted_until = 0;
  size_t position = 0;
  while (position < text.size()) {
    size_t length = 0;
    const int32_t index = trie.LongestAt(text, position, length);
    if (index < 0) {
      ++position;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = position;
    size_t stop = position + length;
    // Matches never overlap: whether or not this one is kept, scanning resumes after it.
    position = stop;
    if (token.single_word) {
      const bool word_before = start > 0 && IsWordChar(LastCodePoint(text.substr(0, start)));
      const bool word_after = stop < text.size() && IsWordChar(DecodeUtf8Step(text.substr(stop)).code_point);
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(TrailingWhiteSpaceStart(text.substr(0, start)), emitted_until);
    if (token.rstrip) stop += LeadingWhiteSpaceLength(text.substr(stop));
    if (start > emitted_until) out.push_back({text.substr(emitted_until, start - emitted_until), -1});
    out.push_back({text.substr(start, stop - start), token.id});
    emitted_until = position = stop;
  }
  if (emitted_until < text.size()) out.push_back({text.substr(emitted_until), -1});
}

}  // namespace deepinfer
