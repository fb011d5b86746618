#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "core/bounded_json.h"
#include "core/error.h"
#include "core/model_limits.h"
#include "core/regular_file.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

using Json = nlohmann::json;

// DeepSeek's tokenizer.json is 6.4 MB (the limit is 2.5x that); its deepest path
// (pre_tokenizer.pretokenizers[i].pattern) nests four levels.
constexpr JsonLimits kTokenizerLimits{16 << 20, 4 + 64};
// Ids are dense in real tokenizers; a file whose largest id is far beyond its token count would
// make the id tables huge for nothing, so the id space may be at most twice the tokens plus this.
constexpr int64_t kIdSlack = 1024;

enum class IdKind : uint8_t { kNone, kVocab, kAdded, kSpecial };

const Json& Field(const Json& object, const char* key, const std::string& where, const std::string& origin) {
  if (!object.is_object() || !object.contains(key)) {
    throw MakeError(origin, ": ", where, ": expected a field \"", key, "\"");
  }
  return object.at(key);
}

bool OptionalBool(const Json& object, const char* key, bool fallback) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

bool IsNullOrEmptyString(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

void RequireNoNormalizer(const Json& root, const std::string& origin) {
  const auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return;
  if (it->value("type", "") == "Sequence" && it->value("normalizers", Json::array()).empty()) return;
  throw MakeError(origin, ": normalizer: expected null or an empty Sequence, got type \"", it->value("type", "?"),
                  "\" (normalizers are not supported)");
}

// Reads the pre-tokenizer: regex Split steps (behavior Isolated) then ByteLevel without regex.
std::vector<RegexSplitSequence::Step> ReadPreTokenizer(const Json& root, const std::string& origin) {
  const Json& pre_tokenizer = Field(root, "pre_tokenizer", "tokenizer", origin);
  std::vector<Json> steps;
  if (pre_tokenizer.value("type", "") == "Sequence") {
    for (const Json& step : Field(pre_tokenizer, "pretokenizers", "pre_tokenizer", origin)) steps.push_back(step);
  } else {
    steps.push_back(pre_tokenizer);
  }
  std::vector<RegexSplitSequence::Step> splits;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Json& step = steps[i];
    const std::string where = "pre_tokenizer step " + std::to_string(i);
    const std::string type = step.value("type", "");
    const bool last = i + 1 == steps.size();
    if (type == "ByteLevel" && last) {
      if (OptionalBool(step, "add_prefix_space", false) || OptionalBool(step, "use_regex", true)) {
        throw MakeError(origin, ": ", where, ": expected ByteLevel with add_prefix_space=false and use_regex=false");
      }
      return splits;
    }
    if (type != "Split") {
      throw MakeError(origin, ": ", where, ": expected a Split step or a final ByteLevel step, got \"", type, "\"");
    }
    if (step.value("behavior", "") != "Isolated" || OptionalBool(step, "invert", false)) {
      throw MakeError(origin, ": ", where, ": expected behavior \"Isolated\" and invert=false");
    }
    const Json& pattern = Field(step, "pattern", where, origin);
    if (pattern.contains("Regex")) {
      splits.push_back({pattern.at("Regex").get<std::string>(), true});
    } else if (pattern.contains("String")) {
      splits.push_back({pattern.at("String").get<std::string>(), false});
    } else {
      throw MakeError(origin, ": ", where, ": pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
  }
  throw MakeError(origin, ": pre_tokenizer: expected the last step to be ByteLevel");
}

std::vector<std::pair<std::string, std::string>> ReadMerges(const Json& model, const std::string& origin) {
  std::vector<std::pair<std::string, std::string>> merges;
  const Json& list = Field(model, "merges", "model", origin);
  merges.reserve(list.size());
  for (size_t rank = 0; rank < list.size(); ++rank) {
    const Json& merge = list[rank];
    if (merge.is_array() && merge.size() == 2) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    const std::string text = merge.is_string() ? merge.get<std::string>() : std::string();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      throw MakeError(origin, ": model.merges[", rank, "]: expected \"left right\" or [left, right]");
    }
    merges.emplace_back(text.substr(0, space), text.substr(space + 1));
  }
  return merges;
}

void RequireSupportedModel(const Json& model, const std::string& origin) {
  if (model.value("type", "BPE") != "BPE") {
    throw MakeError(origin, ": model.type: expected \"BPE\", got \"", model.value("type", ""), "\"");
  }
  const auto null_or_absent = [&](const char* key) { return !model.contains(key) || model.at(key).is_null(); };
  if (!null_or_absent("dropout") || !null_or_absent("unk_token") || OptionalBool(model, "byte_fallback", false) ||
      !IsNullOrEmptyString(model, "continuing_subword_prefix") || !IsNullOrEmptyString(model, "end_of_word_suffix")) {
    throw MakeError(origin,
                    ": model: expected dropout, unk_token, continuing_subword_prefix and end_of_word_suffix unset and "
                    "byte_fallback=false (byte-level BPE)");
  }
}

}  // namespace

struct Tokenizer::Impl {
  ByteLevelAlphabet alphabet;
  std::unordered_map<std::string, int32_t> id_by_token;
  std::vector<std::string> token_by_id;
  std::vector<IdKind> kind_by_id;
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<RegexSplitSequence> splitter;
  std::unique_ptr<AddedTokenMatcher> added_tokens;
  std::optional<int32_t> prompt_bos;  // tokenizer_config.json's add_bos_token / bos_token

  // The tables are sized to the largest id first.
  void SetToken(int32_t id, const std::string& token, IdKind kind) {
    token_by_id[id] = token;
    kind_by_id[id] = kind;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::FromFile(const std::string& path) { return FromFile(OpenRegularFile(path)); }

Tokenizer Tokenizer::FromFile(const FileHandle& file) {
  return FromJsonText(ReadWholeFile(file, kTokenizerLimits.max_bytes), file.path());
}

Tokenizer Tokenizer::FromJsonText(std::string_view json, const std::string& origin) {
  const Json root = ParseJsonBounded(json, origin, kTokenizerLimits);
  auto impl = std::make_unique<Impl>();
  try {
    RequireNoNormalizer(root, origin);
    const Json& model = Field(root, "model", "tokenizer", origin);
    RequireSupportedModel(model, origin);
    const Json& decoder = Field(root, "decoder", "tokenizer", origin);
    if (decoder.value("type", "") != "ByteLevel") {
      throw MakeError(origin, ": decoder: expected type \"ByteLevel\", got \"", decoder.value("type", ""), "\"");
    }
    // Ids are checked before anything is sized by them.
    const auto read_id = [&](const Json& value, const std::string& where) -> int32_t {
      if (!value.is_number_integer()) throw MakeError(origin, ": ", where, ": id must be an integer");
      const bool negative = !value.is_number_unsigned() && value.get<int64_t>() < 0;
      if (negative || value.get<uint64_t>() >= static_cast<uint64_t>(kMaxVocabSize)) {
        throw MakeError(origin, ": ", where, ": id ", BoundedDump(value, 40), " is outside [0, ", kMaxVocabSize,
                        ") (the largest supported vocabulary)");
      }
      return static_cast<int32_t>(value.get<int64_t>());
    };
    std::unordered_map<std::string, int32_t> vocab;
    int64_t max_id = -1;
    const Json& vocab_json = Field(model, "vocab", "model", origin);
    if (!vocab_json.is_object()) throw MakeError(origin, ": model.vocab: expected an object of token -> id");
    for (const auto& [token, id_json] : vocab_json.items()) {
      const int32_t id = read_id(id_json, "model.vocab[\"" + Printable(token, 60) + "\"]");
      vocab.emplace(token, id);
      max_id = std::max<int64_t>(max_id, id);
    }

    std::vector<AddedToken> added_tokens;
    const auto added_it = root.find("added_tokens");
    for (const Json& entry : added_it == root.end() ? Json::array() : *added_it) {
      const std::string where = "added_tokens entry";
      AddedToken token{read_id(Field(entry, "id", where, origin), where),
                       Field(entry, "content", where, origin).get<std::string>(),
                       OptionalBool(entry, "special", false),
                       OptionalBool(entry, "single_word", false),
                       OptionalBool(entry, "lstrip", false),
                       OptionalBool(entry, "rstrip", false),
                       OptionalBool(entry, "normalized", !OptionalBool(entry, "special", false))};
      max_id = std::max<int64_t>(max_id, token.id);
      added_tokens.push_back(std::move(token));
    }
    const int64_t tokens = static_cast<int64_t>(vocab.size() + added_tokens.size());
    if (max_id + 1 > 2 * tokens + kIdSlack) {
      throw MakeError(origin, ": ids reach ", max_id, " but only ", tokens,
                      " tokens are defined; the id space may be at most twice the number of tokens plus ", kIdSlack);
    }
    impl->token_by_id.resize(static_cast<size_t>(max_id + 1));
    impl->kind_by_id.resize(static_cast<size_t>(max_id + 1), IdKind::kNone);
    for (const auto& [token, id_json] : vocab_json.items()) impl->SetToken(vocab.at(token), token, IdKind::kVocab);
    impl->id_by_token = vocab;
    for (const AddedToken& token : added_tokens) {
      impl->SetToken(token.id, token.content, token.special ? IdKind::kSpecial : IdKind::kAdded);
      impl->id_by_token[token.content] = token.id;
    }
    impl->bpe = std::make_unique<BpeModel>(vocab, ReadMerges(model, origin),
                                           OptionalBool(model, "ignore_merges", false), impl->alphabet, origin);
    impl->splitter = std::make_unique<RegexSplitSequence>(ReadPreTokenizer(root, origin), origin);
    impl->added_tokens = std::make_unique<AddedTokenMatcher>(added_tokens);
  } catch (const Json::exception& error) {
    throw MakeError(origin, ": unexpected tokenizer.json structure: ", Printable(error.what(), 300));
  }
  return Tokenizer(std::move(impl));
}

namespace {

// tokenizer_config.json is a few kB; its deepest field (added_tokens_decoder.<id>.content) nests
// three levels.
constexpr JsonLimits kTokenizerConfigLimits{1 << 20, 3 + 64};

// The BOS a text prompt starts with under `config`: `add_bos_token` true names `bos_token` (a
// string, or an AddedToken object with "content"), which must be a token of `tokenizer`.
std::optional<int32_t> ReadPromptBos(const Json& config, const Tokenizer& tokenizer, const std::string& origin) {
  if (!config.is_object()) throw MakeError(origin, ": expected a JSON object");
  const auto add = config.find("add_bos_token");
  if (add == config.end() || add->is_null()) return std::nullopt;
  if (!add->is_boolean())
    throw MakeError(origin, ": \"add_bos_token\" must be true or false, got ", BoundedDump(*add, 60));
  if (!add->get<bool>()) return std::nullopt;
  const auto bos = config.find("bos_token");
  const Json* content = bos == config.end() ? nullptr : &*bos;
  if (content && content->is_object()) {
    const auto it = content->find("content");
    content = it == content->end() ? nullptr : &*it;
  }
  if (!content || !content->is_string()) {
    throw MakeError(origin,
                    ": \"add_bos_token\" is true but \"bos_token\" is not a token string (or an object with "
                    "a string \"content\")");
  }
  const std::optional<int32_t> id = tokenizer.TokenToId(content->get<std::string>());
  if (!id) {
    throw MakeError(origin, ": \"bos_token\" ", Printable(content->get<std::string>(), 60),
                    " is not a token of tokenizer.json");
  }
  return id;
}

}  // namespace

std::optional<Tokenizer> Tokenizer::FromModelDirectory(const ModelDirectory& dir) {
  const std::optional<FileHandle> file = dir.OpenIfPresent("tokenizer.json", "the tokenizer");
  if (!file) return std::nullopt;
  Tokenizer tokenizer = FromFile(*file);
  if (const std::optional<FileHandle> config = dir.OpenIfPresent("tokenizer_config.json", "the tokenizer config")) {
    const Json root = ParseJsonBounded(ReadWholeFile(*config, kTokenizerConfigLimits.max_bytes), config->path(),
                                       kTokenizerConfigLimits);
    tokenizer.impl_->prompt_bos = ReadPromptBos(root, tokenizer, config->path());
  }
  return tokenizer;
}

size_t Tokenizer::size() const { return impl_->token_by_id.size(); }

std::vector<int32_t> Tokenizer::EncodeTextPrompt(std::string_view text) const {
  std::vector<int32_t> ids;
  if (impl_->prompt_bos) ids.push_back(*impl_->prompt_bos);
  const std::vector<int32_t> body = Encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::optional<int32_t> Tokenizer::prompt_bos() const { return impl_->prompt_bos; }

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = Utf8Lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<std::string_view> words;
  for (const AddedTokenMatcher::Segment& segment : impl_->added_tokens->Split(text)) {
    if (segment.added_token_id >= 0) {
      ids.push_back(segment.added_token_id);
      continue;
    }
    words.clear();
    impl_->splitter->Split(segment.text, words);
    for (const std::string_view word : words) impl_->bpe->EncodeWord(word, ids);
  }
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->token_by_id.size()) continue;
    const IdKind kind = impl_->kind_by_id[id];
    if (kind == IdKind::kNone || (skip_special_tokens && kind == IdKind::kSpecial)) continue;
    impl_->alphabet.AppendTokenBytes(impl_->token_by_id[id], bytes);
  }
  return Utf8Lossy(bytes);
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  std::string bytes;
  if (id < 0 || static_cast<size_t>(id) >= impl_->token_by_id.size() || impl_->kind_by_id[id] == IdKind::kNone) {
    return bytes;
  }
  impl_->alphabet.AppendTokenBytes(impl_->token_by_id[id], bytes);
  return bytes;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  const auto it = impl_->id_by_token.find(std::string(token));
  if (it == impl_->id_by_token.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->token_by_id.size() || impl_->kind_by_id[id] == IdKind::kNone) {
    throw MakeError("token id ", id, " is not in the tokenizer (size ", size(), ")");
  }
  return impl_->token_by_id[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->kind_by_id.size() && impl_->kind_by_id[id] == IdKind::kSpecial;
}

}  // namespace deepinfer
