// Builds the hostile inputs of the CLI regression tests (tests/CMakeLists.txt, cli.hostile.*)
// into the folder given as the only argument, at test time: model directories derived from the
// embedded default model tiny-a with one thing broken each, FIFOs, deep and huge JSON files.
// Large inputs (60,000-deep headers, a 10-million-entry list) are generated, never committed.
//
// Unchanged files are hard links to the source tree (copies where that fails); every changed
// file is unlinked first and written fresh, so the source is never written through a link.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kSource = fs::path(DEEPINFER_TEST_DATA_DIR) / "models" / "tiny-a";
constexpr const char* kShard1 = "model-00001-of-00002.safetensors";

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Unlinks first: `path` may be a hard link into the source tree.
void Replace(const fs::path& path, const std::string& bytes) {
  fs::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) throw std::runtime_error("cannot write " + path.string());
}

void Fifo(const fs::path& path) {
  fs::remove(path);
  if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed for " + path.string());
}

// A fresh copy of tiny-a (without golden/) at `dir`.
fs::path CopyModel(const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir / "inference");
  for (const char* name : {"config.json", "inference/config.json", "model.safetensors.index.json", kShard1,
                           "model-00002-of-00002.safetensors", "tokenizer.json"}) {
    std::error_code ec;
    fs::create_hard_link(kSource / name, dir / name, ec);
    if (ec) fs::copy_file(kSource / name, dir / name);
  }
  return dir;
}

// Text with `"PLACEHOLDER"` (a JSON string value) replaced by `raw`.
std::string Splice(const Json& json, const std::string& raw) {
  std::string text = json.dump(1);
  const std::string marker = "\"PLACEHOLDER\"";
  const size_t at = text.find(marker);
  if (at == std::string::npos) throw std::runtime_error("no placeholder");
  return text.replace(at, marker.size(), raw);
}

std::string Deep(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// config.json with text_config.<key> written as `raw` JSON text.
void EditConfig(const fs::path& out, const std::string& key, const std::string& raw) {
  const fs::path dir = CopyModel(out);
  Json config = Json::parse(Read(dir / "config.json"));
  config["text_config"][key] = "PLACEHOLDER";
  Replace(dir / "config.json", Splice(config, raw));
}

// Shard 1 with its header edited by `edit` (the header text, given the first tensor's name) and
// `gap` bytes inserted between the header and the data.
void EditShard(const fs::path& out, const std::function<std::string(Json&, const std::string&)>& edit, size_t gap = 0) {
  const fs::path dir = CopyModel(out);
  const std::string bytes = Read(dir / kShard1);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  Json header = Json::parse(bytes.substr(8, header_len));
  std::string first;
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      first = name;
      break;
    }
  }
  const std::string text = edit(header, first);
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  Replace(dir / kShard1, prefix + text + std::string(gap, '\0') + bytes.substr(8 + header_len));
}

// The index with tensor `tensor`'s shard replaced by `shard`.
void EditIndex(const fs::path& dir, const std::string& shard) {
  Json index = Json::parse(Read(dir / "model.safetensors.index.json"));
  index["weight_map"].begin().value() = shard;
  Replace(dir / "model.safetensors.index.json", index.dump(1));
}

std::string TinyTokenizer(const std::string& vocab, const std::string& added = "[]") {
  return R"({"added_tokens": )" + added + R"(, "model": {"vocab": )" + vocab +
         R"(, "merges": []}, "decoder": {"type": "ByteLevel"}, )"
         R"("pre_tokenizer": {"type": "ByteLevel", "use_regex": false}})";
}

void MakeAll(const fs::path& root) {
  fs::create_directories(root);

  // Safetensors headers: 60,000-deep shape / data_offsets (~120 KB), 8 bytes between header and data.
  for (const std::string field : {"shape", "data_offsets"}) {
    EditShard(root / ("deep_" + field), [&](Json& header, const std::string& first) {
      header[first][field] = "PLACEHOLDER";
      return Splice(header, Deep(60'000));
    });
  }
  EditShard(
      root / "gap8", [](Json& header, const std::string&) { return header.dump(); }, 8);

  // config.json values.
  EditConfig(root / "deep_eos", "eos_token_id", Deep(200'000));
  EditConfig(root / "config_1e400", "rope_theta", "1e400");
  EditConfig(root / "hc_mult", "hc_mult", "2147483647");
  EditConfig(root / "hidden_size", "hidden_size", "4611686018427387904");
  EditConfig(root / "engram_ngram", "engram_max_ngram_size", "2147483647");
  EditConfig(root / "engram_vocab", "engram_vocab_size", "4611686018427387904");
  EditConfig(root / "experts_1e6", "n_routed_experts", "1e6");
  EditConfig(root / "experts_2e9", "n_routed_experts", "2e9");
  EditConfig(root / "sinkhorn_1e9", "hc_sinkhorn_iters", "1e9");
  EditConfig(root / "sliding_window", "sliding_window", "2147483647");
  std::string ten_million = "[";
  for (int i = 0; i < 10'000'000; ++i) ten_million += "1,";
  ten_million.back() = ']';
  EditConfig(root / "compress_10m", "compress_ratios", ten_million);
  ten_million.clear();

  // Files that are not what their names say.
  Fifo(CopyModel(root / "cfg_fifo") / "config.json");
  fs::remove(CopyModel(root / "cfg_dir") / "config.json");
  fs::create_directory(root / "cfg_dir" / "config.json");
  fs::remove(CopyModel(root / "cfg_loop") / "config.json");
  fs::create_symlink("config.json", root / "cfg_loop" / "config.json");
  Fifo(CopyModel(root / "idx_fifo") / "model.safetensors.index.json");
  Fifo(CopyModel(root / "shard_fifo") / kShard1);
  Fifo(CopyModel(root / "tok_fifo") / "tokenizer.json");
  Fifo(root / "fifo.json");
  fs::create_directories(root / "a_directory");

  // The index and symlinks pointing outside the model directory; a dangling and a looping index.
  EditIndex(CopyModel(root / "idx_dotdot"), "../../../../../../../../etc/passwd");
  EditIndex(CopyModel(root / "idx_absolute"), "/etc/passwd");
  EditIndex(CopyModel(root / "idx_symlink"), "outside.safetensors");
  fs::create_symlink("/etc/passwd", root / "idx_symlink" / "outside.safetensors");
  fs::remove(CopyModel(root / "idx_dangling") / "model.safetensors.index.json");
  fs::create_symlink("nowhere.json", root / "idx_dangling" / "model.safetensors.index.json");
  fs::remove(CopyModel(root / "idx_loop") / "model.safetensors.index.json");
  fs::create_symlink("model.safetensors.index.json", root / "idx_loop" / "model.safetensors.index.json");
  fs::remove(CopyModel(root / "tok_outside") / "tokenizer.json");
  fs::create_symlink("/etc/passwd", root / "tok_outside" / "tokenizer.json");

  // Tokenizers with impossible ids.
  Replace(root / "tok_vocab_300m.json", TinyTokenizer(R"({"a": 0, "b": 300000000})"));
  Replace(root / "tok_vocab_2pow31m2.json", TinyTokenizer(R"({"a": 0, "b": 2147483646})"));
  Replace(root / "tok_added_int32max.json", TinyTokenizer(R"({"a": 0})", R"([{"id": 2147483647, "content": "x"}])"));
  Replace(CopyModel(root / "tok_vocab_model") / "tokenizer.json", TinyTokenizer(R"({"a": 0, "b": 300000000})"));

  // Chat requests.
  const std::string deep = Deep(200'000);
  Replace(root / "chat_deep_content.json", R"([{"role": "user", "content": )" + deep + "}]");
  Replace(root / "chat_deep_text.json", R"([{"role": "user", "content": [{"type": "text", "text": )" + deep + "}]}]");
  Replace(root / "chat_deep_tool.json", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": )"
                                        R"("function", "function": {"name": "f", "parameters": )" +
                                            deep + "}}]}");
  Replace(root / "chat_1e400.json", R"([{"role": "user", "content": "x", "reasoning_effort": 1e400}])");

  // A temp directory whose per-user default-model folder anyone may write to.
  const fs::path shared = root / "tmp_public" / ("deepinfer-" + std::to_string(::geteuid()));
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all);
  fs::remove_all(root / "make_model_out");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_hostile_inputs OUT_DIR\n");
    return 2;
  }
  try {
    MakeAll(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_hostile_inputs: %s\n", e.what());
    return 1;
  }
  return 0;
}
