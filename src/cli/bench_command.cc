#include "cli/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "cli/isa_flag.h"
#include "cli/model_loading.h"
#include "cli/serving_bench.h"
#include "cli/weight_layout_flag.h"
#include "core/error.h"
#include "core/machine_limits.h"
#include "core/thread_pool.h"
#include "io/forward_flops.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/linear.h"
#include "model/model.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBandwidthBytes = size_t{1} << 30;  // 1 GiB: far beyond any cache
// Probe passes before the measured phases, and after each of them.
constexpr int kBandwidthFirstPasses = 3;
constexpr int kBandwidthBetweenPasses = 2;
constexpr double kPeakSeconds = 1.0;
constexpr int64_t kDecodePromptTokens = 8;  // the short prompt of each decode sequence

struct BenchOptions {
  std::string model;  // empty: the embedded default
  int threads = 0;
  std::optional<IsaLevel> isa;
  WeightLayout weight_layout = WeightLayout::kAuto;
  int64_t prefill_tokens = 512;
  int64_t decode_tokens = 16;
  std::vector<int64_t> batch_sizes = {1, 4, 16};
  int64_t warmup = 1;
  bool json = false;
};

std::vector<int64_t> ParseBatchSizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (const int64_t b : ParseIntListFlag("--batch-sizes", text, 1, 4096)) {
    if (std::find(sizes.begin(), sizes.end(), b) != sizes.end()) {
      throw MakeError("--batch-sizes: ", b, " is listed twice");
    }
    sizes.push_back(b);
  }
  return sizes;
}

const std::vector<Flag<BenchOptions>>& BenchFlags() {
  static const std::vector<Flag<BenchOptions>> flags = {
      {"--model", "DIR", kModelFlagHelp, [](BenchOptions& o, const std::string& v) { o.model = v; }},
      {"--threads", "N",
       "worker threads for the model and the machine limits (default: all cores; at most 4 per hardware thread)",
       [](BenchOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<BenchOptions>(),
      WeightLayoutFlag<BenchOptions>(),
      {"--prefill-tokens", "N", "prompt length of the prefill (TTFT) measurement (default 512)",
       [](BenchOptions& o, const std::string& v) {
         o.prefill_tokens = ParseIntFlag("--prefill-tokens", v, 1, kMaxTokensFlag);
       }},
      {"--decode-tokens", "M", "timed decode steps per batch size (default 16)",
       [](BenchOptions& o, const std::string& v) { o.decode_tokens = ParseIntFlag("--decode-tokens", v, 1, 1 << 20); }},
      {"--batch-sizes", "1,4,16", "decode batch sizes (default 1,4,16; batch 1 is always run)",
       [](BenchOptions& o, const std::string& v) { o.batch_sizes = ParseBatchSizes(v); }},
      {"--warmup", "K", "untimed forwards before each measurement (default 1)",
       [](BenchOptions& o, const std::string& v) { o.warmup = ParseIntFlag("--warmup", v, 0, 1000); }},
      {"--json", nullptr, "also print one JSON object with the results as the last line",
       [](BenchOptions& o, const std::string&) { o.json = true; }},
  };
  return flags;
}

void PrintBenchHelp(std::ostream& out) {
  out << "usage: deepinfer bench [flags]\n";
  PrintFlagHelp(out, BenchFlags());
  out << "serving engine modes: deepinfer bench --serving --help, deepinfer bench --context-sweep --help\n";
}

BenchOptions ParseBenchOptions(const std::vector<std::string>& args) {
  BenchOptions options;
  ParseFlags("bench", args, BenchFlags(), options);
  // Batch 1 feeds the top-level decode numbers.
  if (std::find(options.batch_sizes.begin(), options.batch_sizes.end(), 1) == options.batch_sizes.end()) {
    options.batch_sizes.insert(options.batch_sizes.begin(), 1);
  }
  return options;
}

// Deterministic, well-spread token ids in [0, vocab): a multiplicative hash of (stream, t).
int32_t BenchToken(int64_t stream, int64_t t, int64_t vocab) {
  const uint64_t x =
      (static_cast<uint64_t>(stream) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(t + 1) * 0xC2B2AE3D27D4EB4Full);
  return static_cast<int32_t>((x ^ (x >> 29)) % static_cast<uint64_t>(vocab));
}

int32_t Argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

double Seconds(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

struct DecodeResult {
  int64_t batch = 0;
  double step_seconds = 0.0;    // mean over the timed steps
  double bytes_per_step = 0.0;  // mean ForwardStats::weight_bytes over the timed steps
};

// B sequences with short distinct prompts, prefilled together; then `warmup` untimed and
// `steps` timed steps of one (greedy) token per sequence. Only the Forward call is timed.
DecodeResult RunDecode(const Model& model, const ComputeContext& ctx, int64_t batch, int64_t warmup, int64_t steps) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<SequenceState> states;
  std::vector<std::vector<int32_t>> prompts(batch);
  for (int64_t b = 0; b < batch; ++b) {
    states.push_back(model.NewSequence());
    for (int64_t t = 0; t < kDecodePromptTokens; ++t) prompts[b].push_back(BenchToken(1000 + b, t, vocab));
  }
  std::vector<ForwardItem> items(batch);
  for (int64_t b = 0; b < batch; ++b) items[b] = ForwardItem{&states[b], prompts[b]};
  std::vector<float> logits = model.Forward(items, ctx);
  std::vector<int32_t> next(batch);
  DecodeResult result;
  result.batch = batch;
  double total_seconds = 0.0, total_bytes = 0.0;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    for (int64_t b = 0; b < batch; ++b) {
      next[b] = Argmax(logits.data() + b * vocab, vocab);
      items[b] = ForwardItem{&states[b], std::span<const int32_t>(&next[b], 1)};
    }
    ForwardStats stats;
    const Clock::time_point start = Clock::now();
    logits = model.Forward(items, ctx, &stats);
    const Clock::time_point end = Clock::now();
    if (step >= warmup) {
      total_seconds += Seconds(start, end);
      total_bytes += static_cast<double>(stats.weight_bytes);
    }
  }
  result.step_seconds = total_seconds / static_cast<double>(steps);
  result.bytes_per_step = total_bytes / static_cast<double>(steps);
  return result;
}

// The instruction the prefill GEMM panels run on: vdpbf16ps only where the kernel plan puts the
// panels on it (Zen 4, twice the FMA rate); on Intel the panels use FMAs, which run there at twice
// the vdpbf16ps rate, so a vdpbf16ps peak would halve the denominator.
PeakKind PeakKindFor(IsaLevel isa) {
  switch (isa) {
    case IsaLevel::kAvx512:
      return ChooseBf16Dot() == Bf16Dot::kQuantized ? PeakKind::kAvx512Bf16Dot : PeakKind::kAvx512Fma;
    case IsaLevel::kAvx2:
      return PeakKind::kAvx2Fma;
    case IsaLevel::kScalar:
      return PeakKind::kScalarFp32;
  }
  return PeakKind::kScalarFp32;
}

// Progress goes to stderr so stdout holds only the table (and the JSON line).
void Progress(const std::string& what) { std::fprintf(stderr, "bench: %s...\n", what.c_str()); }

}  // namespace

int RunBenchCommand(const std::vector<std::string>& args) {
  if (IsServingBench(args)) return RunServingBench(args);  // serving_bench.h
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      PrintBenchHelp(std::cout);
      return 0;
    }
  }
  const BenchOptions o = ParseBenchOptions(args);
  const IsaLevel isa = ChooseIsaFlag(o.isa);
  const std::string model_dir = ModelDirOrDefault(o.model);
  const std::unique_ptr<Model> model = Model::Load(model_dir);
  const std::string weight_layout = ApplyWeightLayout(*model, o.weight_layout, isa);
  const ModelConfig& config = model->config();
  if (o.prefill_tokens > model->max_context()) {
    throw MakeError("bench: --prefill-tokens ", o.prefill_tokens, " exceeds the model's maximum context of ",
                    model->max_context(), " tokens");
  }
  const int64_t decode_length = kDecodePromptTokens + o.warmup + o.decode_tokens;
  if (decode_length > model->max_context()) {
    throw MakeError("bench: decode needs ", decode_length, " positions (", kDecodePromptTokens,
                    "-token prompt + --warmup + --decode-tokens) but the model's maximum context is ",
                    model->max_context());
  }
  ThreadPool pool(o.threads);
  CpuBackend backend(pool, isa);
  const ComputeContext ctx{backend};

  // The machine's limits, with the same threads; the bandwidth probe also runs between the
  // phases, and its median is the denominator.
  Progress("measuring DRAM read bandwidth (1 GiB)");
  ReadBandwidthProbe probe(pool, kBandwidthBytes);
  probe.Sample(kBandwidthFirstPasses);
  const PeakKind peak_kind = PeakKindFor(isa);
  Progress("measuring the FLOP peak");
  const double peak_flops = MeasurePeakFlops(pool, peak_kind, kPeakSeconds);

  // Prefill: one sequence, N tokens, one forward; warm-ups on throwaway sequences.
  Progress("prefill");
  std::vector<int32_t> prompt(o.prefill_tokens);
  for (int64_t t = 0; t < o.prefill_tokens; ++t) prompt[t] = BenchToken(1, t, config.vocab_size);
  for (int64_t k = 0; k < o.warmup; ++k) {
    SequenceState warm = model->NewSequence();
    const ForwardItem item{&warm, prompt};
    model->Forward({&item, 1}, ctx);
  }
  SequenceState state = model->NewSequence();
  const ForwardItem prefill_item{&state, prompt};
  const Clock::time_point prefill_start = Clock::now();
  model->Forward({&prefill_item, 1}, ctx);
  const double ttft_s = Seconds(prefill_start, Clock::now());
  probe.Sample(kBandwidthBetweenPasses);
  const FlopCount flops = CountForwardFlops(config, 0, o.prefill_tokens);
  const double prefill_flops_per_s = static_cast<double>(flops.total()) / ttft_s;

  // Decode at each batch size.
  // Batch 1 also times its GEMV-shaped linears: the best of them is a second denominator.
  std::vector<DecodeResult> decode;
  GemvRecord gemvs;
  for (int64_t batch : o.batch_sizes) {
    Progress("decode, batch " + std::to_string(batch));
    backend.RecordGemvs(batch == 1 ? &gemvs : nullptr);
    decode.push_back(RunDecode(*model, ctx, batch, o.warmup, o.decode_tokens));
    backend.RecordGemvs(nullptr);
    probe.Sample(kBandwidthBetweenPasses);
  }

  const ReadBandwidthProbe::Summary bandwidth = probe.summary();
  const double read_gb_s = bandwidth.median / 1e9;
  const double best_gemv_gb_s = gemvs.best_bytes_per_s / 1e9;
  auto gb_s = [](const DecodeResult& d) { return d.bytes_per_step / d.step_seconds / 1e9; };

  std::printf("deepinfer bench: %s\n", model_dir.c_str());
  std::printf("  %d layers, hidden %lld, %d routed experts (top %d); %d threads, isa %s\n", config.num_layers,
              static_cast<long long>(config.hidden_size), config.n_routed_experts, config.num_experts_per_tok,
              pool.size(), std::string(IsaName(isa)).c_str());
  std::printf("  kernels: %s\n", std::string(LinearKernelsName(isa)).c_str());
  std::printf("  FP8/FP4 weights: %s\n", weight_layout.c_str());
  std::printf("\nmachine (measured now, %d threads)\n", pool.size());
  std::printf(
      "  DRAM read bandwidth   %10.2f GB/s      (1 GiB vectorised sum: median of %d passes between the "
      "phases, %.2f-%.2f)\n",
      read_gb_s, bandwidth.passes, bandwidth.min / 1e9, bandwidth.max / 1e9);
  if (gemvs.calls > 0) {
    std::printf(
        "  best GEMV             %10.2f GB/s      (%.1f MB of weights; fastest of %lld batch-1 linears >= 1 MiB)\n",
        best_gemv_gb_s, static_cast<double>(gemvs.best_bytes) / 1e6, static_cast<long long>(gemvs.calls));
  }
  std::printf("  FLOP peak             %10.2f GFLOP/s   (%s, 12 chains per thread)\n", peak_flops / 1e9,
              std::string(PeakKindName(peak_kind)).c_str());
  std::printf("\nprefill (%lld tokens, one forward)\n", static_cast<long long>(o.prefill_tokens));
  std::printf("  TTFT                  %10.3f ms\n", ttft_s * 1e3);
  std::printf("  FLOPs                 %10.4g         (linear %.4g, attention %.4g, indexer %.4g)\n",
              static_cast<double>(flops.total()), static_cast<double>(flops.linear),
              static_cast<double>(flops.attention), static_cast<double>(flops.indexer));
  std::printf("  FLOP/s                %10.3f GFLOP/s   %.2f%% of peak\n", prefill_flops_per_s / 1e9,
              100.0 * prefill_flops_per_s / peak_flops);
  std::printf("\ndecode (%lld timed steps after %lld warm-up, %lld-token prompts)\n",
              static_cast<long long>(o.decode_tokens), static_cast<long long>(o.warmup),
              static_cast<long long>(kDecodePromptTokens));
  std::printf("  %5s %10s %11s %14s %9s %9s %10s\n", "batch", "TPOT ms", "tokens/s", "bytes/step", "GB/s", "% of BW",
              "% of GEMV");
  for (const DecodeResult& d : decode) {
    std::printf("  %5lld %10.3f %11.2f %14.0f %9.3f %8.2f%% %9.2f%%\n", static_cast<long long>(d.batch),
                d.step_seconds * 1e3, static_cast<double>(d.batch) / d.step_seconds, d.bytes_per_step, gb_s(d),
                100.0 * gb_s(d) / read_gb_s, best_gemv_gb_s > 0 ? 100.0 * gb_s(d) / best_gemv_gb_s : 0.0);
  }

  if (o.json) {
    const DecodeResult& one =
        *std::find_if(decode.begin(), decode.end(), [](const DecodeResult& d) { return d.batch == 1; });
    nlohmann::json per_batch = nlohmann::json::array();
    for (const DecodeResult& d : decode) {
      per_batch.push_back({{"batch", d.batch},
                           {"tpot_ms", d.step_seconds * 1e3},
                           {"tokens_per_s", static_cast<double>(d.batch) / d.step_seconds},
                           {"bytes_per_step", d.bytes_per_step},
                           {"gb_s", gb_s(d)},
                           {"bandwidth_fraction", gb_s(d) / read_gb_s}});
    }
    nlohmann::json j = {
        {"model", model_dir},
        {"threads", pool.size()},
        {"isa", std::string(IsaName(isa))},
        {"prefill_tokens", o.prefill_tokens},
        {"decode_tokens", o.decode_tokens},
        {"warmup", o.warmup},
        {"measured_read_gb_s", read_gb_s},
        {"measured_read_gb_s_min", bandwidth.min / 1e9},
        {"measured_read_gb_s_max", bandwidth.max / 1e9},
        {"measured_read_passes", bandwidth.passes},
        {"best_gemv_gb_s", best_gemv_gb_s},
        {"kernels", std::string(LinearKernelsName(isa))},
        {"weight_layout", model->interleave_report().matrices > 0 ? "interleaved" : "in-place"},
        {"interleaved_bytes", model->interleave_report().bytes},
        {"interleave_seconds", model->interleave_report().seconds},
        {"measured_peak_flops", peak_flops},
        {"peak_kind", std::string(PeakKindName(peak_kind))},
        {"ttft_ms", ttft_s * 1e3},
        {"prefill_flops", flops.total()},
        {"prefill_flops_per_s", prefill_flops_per_s},
        {"prefill_peak_fraction", prefill_flops_per_s / peak_flops},
        {"tpot_ms", one.step_seconds * 1e3},
        {"tokens_per_s", 1.0 / one.step_seconds},
        {"decode_bytes_per_step", one.bytes_per_step},
        {"decode_gb_s", gb_s(one)},
        {"decode_bandwidth_fraction", gb_s(one) / read_gb_s},
        {"decode_gemv_fraction", best_gemv_gb_s > 0 ? gb_s(one) / best_gemv_gb_s : 0.0},
        {"decode", per_batch},
    };
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace deepinfer
