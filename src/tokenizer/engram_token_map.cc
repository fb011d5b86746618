#include "tokenizer/engram_token_map.h"

#include <utf8proc.h>

#include <cstdlib>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

// Stands in for a whitespace-only text so that the final strip keeps it as " ".
constexpr char32_t kLoneSpaceMarker = 0xE000;

std::string Utf8procMap(std::string_view text, int options) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &mapped, static_cast<utf8proc_option_t>(options));
  DI_CHECK(length >= 0, "utf8proc_map: ", utf8proc_errmsg(length));
  std::string result(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
  std::free(mapped);
  return result;
}

bool IsMark(char32_t code_point) {
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(code_point));
  return category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_MC || category == UTF8PROC_CATEGORY_ME;
}

// Rust's `char::to_lowercase`: the full (unconditional) mapping, which differs from the
// simple one only for U+0130, whose lowercase is "i" followed by U+0307.
void AppendLowercase(char32_t code_point, std::string& out) {
  if (code_point == 0x130) {
    AppendUtf8('i', out);
    AppendUtf8(0x307, out);
    return;
  }
  AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(code_point))), out);
}

bool IsCollapsedSpace(char32_t code_point) {
  return code_point == ' ' || code_point == '\t' || code_point == '\r' || code_point == '\n';
}

}  // namespace

std::string EngramNormalize(std::string_view text) {
  const std::string nfkc = Utf8procMap(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  const std::string nfd = Utf8procMap(nfkc, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);

  // StripAccents, Lowercase and the [ \t\r\n]+ -> " " replacement, in one pass.
  std::string folded;
  bool in_space_run = false;
  ForEachCodePoint(nfd, [&](char32_t code_point, size_t, size_t) {
    if (IsMark(code_point)) return;
    // Lowercasing never produces or removes the four collapsed characters, so collapsing
    // here matches running the replacement after lowercasing.
    if (IsCollapsedSpace(code_point)) {
      if (!in_space_run) folded.push_back(' ');
      in_space_run = true;
      return;
    }
    in_space_run = false;
    AppendLowercase(code_point, folded);
  });
  if (folded == " ") {
    std::string marker;
    AppendUtf8(kLoneSpaceMarker, marker);
    folded = marker;
  }

  // Strip Unicode whitespace on both sides, then turn every U+E000 into a space.
  size_t begin = 0;
  size_t end = 0;
  bool seen_content = false;
  ForEachCodePoint(folded, [&](char32_t code_point, size_t offset, size_t length) {
    if (IsUnicodeWhiteSpace(code_point)) return;
    if (!seen_content) begin = offset;
    seen_content = true;
    end = offset + length;
  });
  std::string result;
  ForEachCodePoint(std::string_view(folded).substr(begin, end - begin), [&](char32_t code_point, size_t, size_t) {
    AppendUtf8(code_point == kLoneSpaceMarker ? U' ' : code_point, result);
  });
  return result;
}

EngramTokenMap BuildEngramTokenMap(const Tokenizer& tokenizer) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  EngramTokenMap map;
  map.compressed_id.resize(tokenizer.size());
  std::unordered_map<std::string, int32_t> compressed_id_by_key;
  for (size_t token = 0; token < tokenizer.size(); ++token) {
    const int32_t id = static_cast<int32_t>(token);
    const std::string text = tokenizer.Decode(std::span<const int32_t>(&id, 1));
    std::string key;
    if (text.find(kReplacement) != std::string::npos) {
      key = tokenizer.IdToToken(id);
    } else {
      key = EngramNormalize(text);
      if (key.empty()) key = text;
    }
    const auto [it, inserted] =
        compressed_id_by_key.try_emplace(std::move(key), static_cast<int32_t>(compressed_id_by_key.size()));
    map.compressed_id[token] = it->second;
  }
  map.compressed_vocab_size = static_cast<int64_t>(compressed_id_by_key.size());
  return map;
}

}  // namespace deepinfer
