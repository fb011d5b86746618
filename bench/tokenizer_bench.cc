// Encode throughput on the tokenizer test corpus; compare with
// tools/golden/tokenizer/bench_hf.py, which times HF `tokenizers` on the same files.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

const std::string kCorpusDir = DEEPINFER_SOURCE_DIR "/tests/data/tokenizer/corpus";
const std::string kTokenizerPath = DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json";

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void EncodeText(benchmark::State& state, const std::string& text) {
  // A fresh tokenizer per benchmark so its word cache starts cold on the first iteration.
  const Tokenizer tokenizer = Tokenizer::FromFile(kTokenizerPath);
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tokenizer.Encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

// Registers one benchmark per corpus file plus one over the whole corpus.
void RegisterCorpusBenchmarks() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpusDir)) {
    if (entry.path().extension() != ".ids") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string all;
  for (const auto& file : files) {
    std::string text = ReadFile(file);
    all += text;
    benchmark::RegisterBenchmark(("Encode/" + file.filename().string()).c_str(), [text = std::move(text)](
                                                                                     benchmark::State& state) {
      EncodeText(state, text);
    })->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("Encode/corpus", [all = std::move(all)](benchmark::State& state) {
    EncodeText(state, all);
  })->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  deepinfer::RegisterCorpusBenchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
