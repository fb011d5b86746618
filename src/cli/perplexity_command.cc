// deepinfer perplexity: the perplexity and bits per byte of a text file under a model, over windows
// of the model's context (llama.cpp's llama-perplexity, with HF's strided evaluation).
//
// The text is tokenized once. Window w covers tokens [w*stride, w*stride + context - 1), preceded by
// BOS; the first window scores all its tokens, every later one only the `stride` tokens it adds, so
// each token is scored exactly once with at least context - stride tokens before it (except in the
// first window). Windows run as concurrent Engine requests (continuous batching) that hand back
// their logits; each is reduced to log-probabilities as it arrives, so memory stays bounded.
#include "cli/perplexity_command.h"

#include <cmath>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <memory>

#include "backend/cpu_backend.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "cli/isa_flag.h"
#include "cli/model_loading.h"
#include "cli/weight_layout_flag.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "core/regular_file.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

struct PerplexityOptions {
  std::string model;
  std::string file;
  int64_t context = 512;
  int64_t stride = 0;  // 0: context / 2
  int threads = 0;
  std::optional<IsaLevel> isa;
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  int64_t max_running = 8;
};

const std::vector<Flag<PerplexityOptions>>& PerplexityFlags() {
  static const std::vector<Flag<PerplexityOptions>> flags = {
      {"--model", "DIR", "model directory (default: the embedded model)",
       [](PerplexityOptions& o, const std::string& v) { o.model = v; }},
      {"--file", "TEXT", "the text file to score (required)",
       [](PerplexityOptions& o, const std::string& v) { o.file = v; }},
      {"--context", "N", "window length in tokens, BOS included (default 512)",
       [](PerplexityOptions& o, const std::string& v) { o.context = ParseIntFlag("--context", v, 2, kMaxTokensFlag); }},
      {"--stride", "S", "tokens each later window adds and scores (default: context / 2)",
       [](PerplexityOptions& o, const std::string& v) { o.stride = ParseIntFlag("--stride", v, 1, kMaxTokensFlag); }},
      {"--threads", "N", "worker threads (default: all cores; at most 4 per hardware thread)",
       [](PerplexityOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<PerplexityOptions>(),
      KernelPlanFlag<PerplexityOptions>(),
      WeightLayoutFlag<PerplexityOptions>(),
      {"--max-running", "N", "windows evaluated concurrently (default 8)",
       [](PerplexityOptions& o, const std::string& v) { o.max_running = ParseIntFlag("--max-running", v, 1, 1024); }},
  };
  return flags;
}

// A text to score is read whole: 256 MiB (the whole KJV is 4.4 MB) bounds the memory it costs.
constexpr size_t kMaxTextBytes = size_t{256} << 20;

// log softmax(row)[target], in double.
double LogProb(const float* row, size_t vocab, int32_t target) {
  float max = row[0];
  for (size_t i = 1; i < vocab; ++i) max = std::max(max, row[i]);
  double sum = 0;
  for (size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return static_cast<double>(row[target]) - max - std::log(sum);
}

struct Window {
  int64_t begin;        // first text token
  int64_t end;          // one past the last text token
  int64_t first_score;  // first text token it scores
};

}  // namespace

int RunPerplexityCommand(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    std::cout << "usage: deepinfer perplexity --file TEXT [flags]\n";
    PrintFlagHelp(std::cout, PerplexityFlags());
    return 0;
  }
  PerplexityOptions o;
  ParseFlags("perplexity", args, PerplexityFlags(), o);
  if (o.file.empty()) throw MakeError("perplexity: --file TEXT is required");
  if (o.stride == 0) o.stride = std::max<int64_t>(1, o.context / 2);
  if (o.stride > o.context - 1) throw MakeError("--stride ", o.stride, " must be below --context ", o.context);

  const std::string text = ReadRegularFile(o.file, kMaxTextBytes);  // before the model loads: fail fast
  const IsaLevel isa = ChooseIsaFlag(o.isa);
  const Bf16Dot plan = ChooseKernelPlanFlag(o.kernel_plan, isa);
  const std::string model_dir = o.model.empty() ? MaterializeDefaultModel() : o.model;
  ModelOptions model_options;
  model_options.max_context = o.context;
  const std::unique_ptr<Model> model = Model::Load(model_dir, model_options);
  const std::optional<Tokenizer> loaded = Tokenizer::FromModelDirectory(ModelDirectory(model_dir));
  if (!loaded) throw MakeError(model_dir, ": perplexity needs tokenizer.json in the model directory");
  const Tokenizer& tokenizer = *loaded;
  const ModelConfig& config = model->config();

  const std::vector<int32_t> ids = tokenizer.Encode(text);
  if (ids.empty()) throw MakeError("perplexity: ", o.file, " holds no tokens");
  for (const int32_t id : ids) {
    if (id >= config.vocab_size) {
      throw MakeError("perplexity: ", o.file, " encodes to token id ", id, ", outside the model's vocabulary of ",
                      config.vocab_size, " (", model_dir, ": tokenizer.json does not fit the model)");
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t span = o.context - 1;  // text tokens per window, after BOS
  std::deque<Window> windows;
  for (int64_t begin = 0, scored = 0; scored < n; begin += o.stride) {
    const int64_t end = std::min(n, begin + span);
    windows.push_back({begin, end, scored});
    scored = end;
  }

  ThreadPool pool(o.threads);
  EngineOptions engine_options;
  engine_options.prefix_caching = false;
  engine_options.max_running = static_cast<int>(o.max_running);
  ApplyWeightLayout(*model, o.weight_layout, isa, plan);  // once the text is known to fit the model
  CpuBackend backend(pool, isa, plan);
  Engine engine(*model, ComputeContext{backend}, engine_options, &tokenizer);
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  struct Running {
    Window window;
    int64_t rows_seen = 0;  // logits rows received so far (row r predicts window token r)
  };
  std::map<RequestId, Running> running;
  double nll = 0;
  int64_t scored = 0;
  const size_t total_windows = windows.size();
  size_t done = 0;
  auto submit = [&] {
    while (!windows.empty() && static_cast<int64_t>(running.size()) < 2 * o.max_running) {
      const Window w = windows.front();
      windows.pop_front();
      RequestParams request;
      request.prompt.push_back(tokenizer.prompt_bos().value_or(static_cast<int32_t>(config.bos_token_id)));
      request.prompt.insert(request.prompt.end(), ids.begin() + w.begin, ids.begin() + w.end);
      request.stop.max_tokens = 1;
      request.return_logits = true;
      running.emplace(engine.Add(std::move(request)), Running{w});
    }
  };
  submit();
  while (!engine.idle()) {
    for (const RequestUpdate& update : engine.Step()) {
      auto it = running.find(update.id);
      if (it == running.end()) continue;
      if (update.finish == FinishReason::kError) throw MakeError("perplexity: ", update.error);
      Running& r = it->second;
      const int64_t prompt_rows = r.window.end - r.window.begin + 1;  // BOS + text
      for (size_t row = 0; row * vocab < update.logits.size(); ++row, ++r.rows_seen) {
        // Row k of the prompt predicts text token begin + k; the last prompt row predicts the
        // token after the window, which the next window scores.
        const int64_t target = r.window.begin + r.rows_seen;
        if (r.rows_seen >= prompt_rows - 1 || target < r.window.first_score) continue;
        nll -= LogProb(update.logits.data() + row * vocab, vocab, ids[target]);
        ++scored;
      }
      if (update.finished()) {
        running.erase(it);
        ++done;
        std::fprintf(stderr, "\rperplexity: %zu/%zu windows", done, total_windows);
      }
    }
    submit();
  }
  std::fprintf(stderr, "\n");
  if (scored != n) throw MakeError("perplexity: internal error, scored ", scored, " of ", n, " tokens");
  const double ppl = std::exp(nll / static_cast<double>(scored));
  const double bits_per_byte = nll / std::log(2.0) / static_cast<double>(text.size());
  std::printf("file %s: %zu bytes, %lld tokens, context %lld, stride %lld, %zu windows\n", o.file.c_str(), text.size(),
              static_cast<long long>(n), static_cast<long long>(o.context), static_cast<long long>(o.stride),
              total_windows);
  std::printf("perplexity %.4f  bits/byte %.4f  nll/token %.5f\n", ppl, bits_per_byte,
              nll / static_cast<double>(scored));
  return 0;
}

}  // namespace deepinfer
