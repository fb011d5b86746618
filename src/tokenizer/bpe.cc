#include "tokenizer/bpe.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>

#include "core/error.h"

namespace deepinfer {

struct BpeModel::WordCache {
  // Large enough for the distinct words of typical prompts and corpora; once full, new words
  // are computed without being stored, so memory stays bounded on adversarial input.
  static constexpr size_t kMaxEntries = 1 << 18;
  static constexpr size_t kMaxWordBytes = 256;

  std::shared_mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> ids_by_word;
};

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   const ByteLevelAlphabet& alphabet, const std::string& origin)
    : ignore_merges_(ignore_merges), alphabet_(&alphabet), cache_(std::make_unique<WordCache>()) {
  for (int byte = 0; byte < 256; ++byte) {
    const std::string character = alphabet.Encode(std::string_view(reinterpret_cast<const char*>(&byte), 1));
    const auto it = vocab.find(character);
    byte_token_id_[byte] = it == vocab.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto left_it = vocab.find(left);
    const auto right_it = vocab.find(right);
    const auto merged_it = vocab.find(left + right);
    if (left_it == vocab.end() || right_it == vocab.end() || merged_it == vocab.end()) {
      throw MakeError(origin, ": model.merges[", rank, "] (\"", left, " ", right,
                      "\"): expected both parts and their concatenation in model.vocab");
    }
    // A repeated pair takes its last rank: HF collects the list into a map, later entries winning.
    merges_.insert_or_assign(PairKey(left_it->second, right_it->second),
                             Merge{static_cast<int32_t>(rank), merged_it->second});
  }
  if (ignore_merges_) whole_word_ids_ = vocab;
}

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto it = whole_word_ids_.find(alphabet_->Encode(word));
    if (it != whole_word_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_token_id_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_->mutex);
    const auto it = cache_->ids_by_word.find(std::string(word));
    if (it != cache_->ids_by_word.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  MergeSymbols(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_->mutex);
    if (cache_->ids_by_word.size() < WordCache::kMaxEntries) {
      cache_->ids_by_word.try_emplace(std::string(word), out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    }
  }
}

void BpeModel::MergeSymbols(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over the word's bytes; a merge folds the right symbol
  // into the left one. Candidate pairs sit in a min-heap ordered by (rank, left position),
  // and entries made stale by an earlier merge are recognised by their recorded ids.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged_id;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : left > other.left; }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (const char byte : word) {
    const int32_t id = byte_token_id_[static_cast<uint8_t>(byte)];
    if (id < 0) continue;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::vector<Candidate> heap;
  const auto push_candidate = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.merged_id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_candidate(i, i + 1);

  constexpr int32_t kMergedAway = -2;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate candidate = heap.back();
    heap.pop_back();
    Symbol& left = symbols[candidate.left];
    const Symbol& right = symbols[candidate.right];
    if (left.prev == kMergedAway || right.prev == kMergedAway || left.id != candidate.left_id ||
        left.next != candidate.right || right.id != candidate.right_id) {
      continue;
    }
    left.id = candidate.merged_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = candidate.left;
    symbols[candidate.right].prev = kMergedAway;
    push_candidate(left.prev, candidate.left);
    push_candidate(candidate.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace deepinfer
