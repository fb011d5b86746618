#include "cli/bench_command.h"

#include <algorithm>
#include <array>
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
#include "cli/speculative_flag.h"
#include "cli/weight_layout_flag.h"
#include "core/error.h"
#include "core/machine_limits.h"
#include "core/step_parallelism.h"
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
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  int64_t prefill_tokens = 512;
  int64_t decode_tokens = 16;
  std::vector<int64_t> batch_sizes = {1, 4, 16};
  int64_t warmup = 1;
  bool json = false;
  bool compare_threads = false;
  bool speculative = false;
  int speculative_length = 5;
  double forced_accepted = 0;  // mean tokens per verify step to force (bonus included); 0: real acceptance
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
      KernelPlanFlag<BenchOptions>(),
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
      SpeculativeFlag<BenchOptions>(),
      {"--speculative-length", "K", "with --speculative dspark: drafts verified per step (default 5)",
       [](BenchOptions& o, const std::string& v) {
         o.speculative_length = static_cast<int>(ParseIntFlag("--speculative-length", v, 1, 256));
       }},
      {"--forced-accepted", "A",
       "with --speculative dspark, for measuring speed: keep A tokens per verify step on average (bonus included, "
       "1 <= A <= K + 1; the kept drafts follow a fixed pattern whatever the target says), instead of the real "
       "acceptance",
       [](BenchOptions& o, const std::string& v) { o.forced_accepted = ParseRealFlag("--forced-accepted", v); }},
      {"--compare-threads", nullptr,
       "also time each decode batch on one thread, in blocks of steps alternating with the default threads in this "
       "process (so both see the same minutes of the machine), and print default / one-thread",
       [](BenchOptions& o, const std::string&) { o.compare_threads = true; }},
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
  if (options.forced_accepted != 0 &&
      (!options.speculative ||
       !(options.forced_accepted >= 1 && options.forced_accepted <= options.speculative_length + 1))) {
    throw MakeError("bench: --forced-accepted needs --speculative dspark and a value in [1, --speculative-length + 1]");
  }
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
  double flops_per_step = 0.0;  // mean CountForwardFlops over the timed steps, all sequences
  // Forwards of this batch (prompts, warm-up and timed steps) and how many of them the backend
  // ran on one thread (StepParallelism).
  uint64_t steps = 0;
  uint64_t serial_steps = 0;
  // The linears of this batch's forwards by weight format (prompt forwards excluded), and at
  // batch 1 the fastest GEMV.
  LinearRecord linears;
  // The step's roofline: the longer of reading its bytes at `bytes_per_s` and doing its FLOPs at
  // `flops_per_s`.
  double roofline_seconds(double bytes_per_s, double flops_per_s) const {
    return std::max(bytes_per_step / bytes_per_s, flops_per_step / flops_per_s);
  }
};

// B sequences with short distinct prompts, prefilled together at construction; then one (greedy)
// token per sequence per Step. Only the Forward call is timed.
class DecodeRun {
 public:
  DecodeRun(const Model& model, const ComputeContext& ctx, int64_t batch)
      : model_(model), ctx_(ctx), batch_(batch), states_(), items_(batch), next_(batch) {
    const int64_t vocab = model.config().vocab_size;
    std::vector<std::vector<int32_t>> prompts(batch);
    for (int64_t b = 0; b < batch; ++b) {
      states_.push_back(model.NewSequence());
      for (int64_t t = 0; t < kDecodePromptTokens; ++t) prompts[b].push_back(BenchToken(1000 + b, t, vocab));
    }
    for (int64_t b = 0; b < batch; ++b) items_[b] = ForwardItem{&states_[b], prompts[b]};
    logits_ = model.Forward(items_, ctx);
  }

  // One step; `timed` adds it to the result. Returns its seconds.
  double Step(bool timed) {
    const int64_t vocab = model_.config().vocab_size;
    for (int64_t b = 0; b < batch_; ++b) {
      next_[b] = Argmax(logits_.data() + b * vocab, vocab);
      items_[b] = ForwardItem{&states_[b], std::span<const int32_t>(&next_[b], 1)};
    }
    ForwardStats stats;
    const Clock::time_point start = Clock::now();
    logits_ = model_.Forward(items_, ctx_, &stats);
    const double seconds = Seconds(start, Clock::now());
    if (timed) {
      ++timed_steps_;
      seconds_ += seconds;
      bytes_ += static_cast<double>(stats.weight_bytes);
      for (int64_t b = 0; b < batch_; ++b) {
        flops_ += static_cast<double>(CountForwardFlops(model_.config(), states_[b].length() - 1, 1).total());
      }
    }
    return seconds;
  }

  // Means over the timed steps.
  DecodeResult result() const {
    DecodeResult r;
    r.batch = batch_;
    const double steps = static_cast<double>(std::max<int64_t>(1, timed_steps_));
    r.step_seconds = seconds_ / steps;
    r.bytes_per_step = bytes_ / steps;
    r.flops_per_step = flops_ / steps;
    return r;
  }

 private:
  const Model& model_;
  const ComputeContext& ctx_;
  int64_t batch_;
  std::vector<SequenceState> states_;
  std::vector<ForwardItem> items_;
  std::vector<int32_t> next_;
  std::vector<float> logits_;
  int64_t timed_steps_ = 0;
  double seconds_ = 0.0, bytes_ = 0.0, flops_ = 0.0;
};

// `warmup` untimed and `steps` timed steps of a DecodeRun.
DecodeResult RunDecode(const Model& model, const ComputeContext& ctx, int64_t batch, int64_t warmup, int64_t steps) {
  DecodeRun run(model, ctx, batch);
  for (int64_t step = 0; step < warmup + steps; ++step) run.Step(step >= warmup);
  return run.result();
}

// --compare-threads: the same decode on the default threads and on one, in blocks of
// kCompareBlock steps that alternate, so both see the same minutes of a noisy host (separate runs
// move by +-30% here); which of a pair of blocks runs first alternates too, so neither profits
// from the other's warm caches or idle second core.
constexpr int64_t kCompareBlock = 4;
struct ThreadComparison {
  int64_t batch = 0;
  double default_seconds = 0.0;  // mean step
  double one_thread_seconds = 0.0;
  double worst_block_ratio = 0.0;  // default / one thread, the worst block pair
  // The geometric mean of the block pairs' ratios, +- 1.96 standard errors: where the ratio lies
  // with 95% confidence (pairs of blocks are independent samples of the same two ways).
  double ratio_low = 0.0, ratio_high = 0.0;
  double ratio() const { return default_seconds / one_thread_seconds; }
};

ThreadComparison CompareThreads(const Model& model, const ComputeContext& ctx, const ComputeContext& one_thread,
                                int64_t batch, int64_t warmup, int64_t steps) {
  DecodeRun all(model, ctx, batch), one(model, one_thread, batch);
  for (int64_t step = 0; step < warmup; ++step) {
    all.Step(false);
    one.Step(false);
  }
  ThreadComparison c;
  c.batch = batch;
  std::vector<double> log_ratios;
  for (int64_t done = 0; done < steps; done += kCompareBlock) {
    const int64_t block = std::min(kCompareBlock, steps - done);
    auto run_block = [block](DecodeRun& run) {
      double seconds = 0.0;
      for (int64_t k = 0; k < block; ++k) seconds += run.Step(true);
      return seconds;
    };
    const bool all_first = log_ratios.size() % 2 == 0;
    const double first = run_block(all_first ? all : one);
    const double second = run_block(all_first ? one : all);
    const double ratio = all_first ? first / second : second / first;
    c.worst_block_ratio = std::max(c.worst_block_ratio, ratio);
    log_ratios.push_back(std::log(ratio));
  }
  c.default_seconds = all.result().step_seconds;
  c.one_thread_seconds = one.result().step_seconds;
  const double n = static_cast<double>(log_ratios.size());
  double mean = 0.0, squares = 0.0;
  for (double r : log_ratios) mean += r / n;
  for (double r : log_ratios) squares += (r - mean) * (r - mean);
  const double standard_error = n > 1 ? std::sqrt(squares / (n - 1) / n) : 0.0;
  c.ratio_low = std::exp(mean - 1.96 * standard_error);
  c.ratio_high = std::exp(mean + 1.96 * standard_error);
  return c;
}

struct SpeculativeResult {
  int64_t steps = 0;
  int length = 0;             // drafts verified per step
  double mean_emitted = 0;    // tokens per verify step, bonus included
  double plain_seconds = 0;   // per plain decode step (a sequence beside it, interleaved)
  double draft_seconds = 0;   // per draft
  double verify_seconds = 0;  // per verify forward
  double plain_bytes = 0;     // ForwardStats::weight_bytes per plain step ...
  double verify_bytes = 0;    // ... and per verify step
  double draft_bytes = 0;     // DraftResult::weight_bytes per draft
  double head_bytes = 0;

  double plain_tokens_per_s() const { return 1.0 / plain_seconds; }
  double speculative_tokens_per_s() const { return mean_emitted / (draft_seconds + verify_seconds); }
  double speedup() const { return speculative_tokens_per_s() / plain_tokens_per_s(); }
  // A step reads its bytes at the same rate: the speedup the bytes allow.
  double bytes_bound() const { return mean_emitted * plain_bytes / (verify_bytes + draft_bytes); }
  // The same with `layers` layers, each reading what the measured ones read on average.
  double bytes_bound_at(int measured_layers, int layers) const {
    auto scale = [&](double bytes) { return head_bytes + (bytes - head_bytes) * layers / measured_layers; };
    return mean_emitted * scale(plain_bytes) / (scale(verify_bytes) + draft_bytes);
  }
};

// Batch 1: a sequence decoding speculatively (draft, verify [next, d_1..d_k], keep, roll back) and
// one decoding plainly from the same prompt, their steps interleaved so both see the same machine.
// With `forced` > 0 the kept drafts per step follow a fixed pattern averaging forced - 1 (a
// measurement of speed at a given acceptance); else the greedy target decides.
SpeculativeResult RunSpeculativeDecode(const Model& model, const ComputeContext& ctx, int length, double forced,
                                       int64_t warmup, int64_t steps) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t width = model.draft_tap_width();
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < kDecodePromptTokens; ++t) tokens.push_back(BenchToken(2000, t, vocab));
  SequenceState spec = model.NewSequence();
  SequenceState plain = model.NewSequence();
  DraftState draft = model.NewDraftState();
  std::vector<float> logits, taps, plain_logits;
  ForwardItem prompt{&spec, tokens, LogitsMode::kLast};
  prompt.tap_rows = kDecodePromptTokens;
  model.ForwardInto({&prompt, 1}, ctx, logits, nullptr, &taps);
  ForwardItem plain_prompt{&plain, tokens, LogitsMode::kLast};
  model.ForwardInto({&plain_prompt, 1}, ctx, plain_logits);
  int32_t next = Argmax(logits.data(), vocab);
  int32_t plain_next = next;
  auto argmax = [](int, int, std::span<const float> row) {
    return Argmax(row.data(), static_cast<int64_t>(row.size()));
  };
  SpeculativeResult r;
  r.length = length;
  r.head_bytes = static_cast<double>(model.read_bytes().head);
  double kept_drafts_owed = 0;
  DraftResult drafted;
  std::vector<int32_t> verify;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    const bool timed = step >= warmup;
    // Plain.
    ForwardStats plain_stats;
    ForwardItem plain_item{&plain, std::span<const int32_t>(&plain_next, 1)};
    Clock::time_point start = Clock::now();
    model.ForwardInto({&plain_item, 1}, ctx, plain_logits, &plain_stats);
    if (timed) {
      r.plain_seconds += Seconds(start, Clock::now());
      r.plain_bytes += static_cast<double>(plain_stats.weight_bytes);
    }
    plain_next = Argmax(plain_logits.data(), vocab);
    // Speculative: draft, verify, keep.
    DraftItem item{&draft, taps, true, next};
    start = Clock::now();
    model.Draft({&item, 1}, ctx, argmax, drafted);
    const Clock::time_point drafted_at = Clock::now();
    verify.assign(1, next);
    verify.insert(verify.end(), drafted.tokens.begin(), drafted.tokens.begin() + length);
    ForwardItem check{&spec, verify, LogitsMode::kAll};
    check.tap_rows = length + 1;
    check.rollback = true;
    ForwardStats verify_stats;
    model.ForwardInto({&check, 1}, ctx, logits, &verify_stats, &taps);
    if (timed) {
      r.draft_seconds += Seconds(start, drafted_at);
      r.verify_seconds += Seconds(drafted_at, Clock::now());
      r.verify_bytes += static_cast<double>(verify_stats.weight_bytes);
      r.draft_bytes += static_cast<double>(drafted.weight_bytes);
    }
    int kept_drafts = 0;
    if (forced > 0) {
      kept_drafts_owed += forced - 1;
      kept_drafts = std::min(length, static_cast<int>(kept_drafts_owed));
      kept_drafts_owed -= kept_drafts;
    } else {
      while (kept_drafts < length && Argmax(logits.data() + kept_drafts * vocab, vocab) == verify[kept_drafts + 1]) {
        ++kept_drafts;
      }
    }
    const int64_t start_position = spec.length() - (length + 1);
    tokens.insert(tokens.end(), verify.begin(), verify.begin() + kept_drafts + 1);
    spec.Truncate(start_position + kept_drafts + 1, model.EngramHistory(tokens));
    spec.ReleaseStaleWindowPages();
    taps.resize(static_cast<size_t>((kept_drafts + 1) * width));
    next = Argmax(logits.data() + kept_drafts * vocab, vocab);
    if (timed) r.mean_emitted += kept_drafts + 1;
  }
  r.steps = steps;
  const double n = static_cast<double>(steps);
  r.mean_emitted /= n;
  r.plain_seconds /= n;
  r.draft_seconds /= n;
  r.verify_seconds /= n;
  r.plain_bytes /= n;
  r.verify_bytes /= n;
  r.draft_bytes /= n;
  return r;
}

// The instruction the prefill GEMM panels run on: vdpbf16ps only where the kernel plan puts the
// panels on it (Zen 4, twice the FMA rate); on Intel the panels use FMAs, which run there at twice
// the vdpbf16ps rate, so a vdpbf16ps peak would halve the denominator.
PeakKind PeakKindFor(IsaLevel isa, Bf16Dot plan) {
  switch (isa) {
    case IsaLevel::kAvx512:
      return plan == Bf16Dot::kQuantized ? PeakKind::kAvx512Bf16Dot : PeakKind::kAvx512Fma;
    case IsaLevel::kAvx2:
      return PeakKind::kAvx2Fma;
    case IsaLevel::kScalar:
      return PeakKind::kScalarFp32;
  }
  return PeakKind::kScalarFp32;
}

// The GEMVs in cache: a one-row Linear over the first rows of a matrix, about
// kInCacheBytesPerThread per thread (beyond L2, within the L3 of the server parts we meet), called
// over and over so that they stay in cache. Its weight bytes per second is the kernel's own speed
// without DRAM: where it is below the DRAM bandwidth, that format's GEMV is bound by the core.
// Sampled between the phases, as the bandwidth probe is, so that a minute of a noisy host does not
// decide it.
constexpr double kInCacheBytesPerThread = 2 << 20;
constexpr int kInCacheSamplesBetween = 3;
constexpr double kInCacheSampleSeconds = 5e-3;  // the least a sample takes

struct GemvInCache {
  std::vector<double> bytes_per_s;  // one per sample
  int64_t rows = 0;                 // of the matrix's
  uint64_t bytes = 0;               // of those rows
};

// `samples` more samples of `gemv`'s matrix in cache into `out`.
void SampleGemvInCache(CpuBackend& backend, const LinearRecord::Gemv& gemv, int threads, int samples,
                       GemvInCache& out) {
  const WeightMatrix& w = gemv.w;
  const double row_bytes = static_cast<double>(w.bytes()) / static_cast<double>(w.rows);
  const int64_t rows =
      std::clamp<int64_t>(static_cast<int64_t>(kInCacheBytesPerThread * threads / row_bytes), 1, w.rows);
  const WeightMatrix slice = w.RowSlice(0, rows);
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scope(workspace);
  const Tensor x = workspace.Take<float>({1, w.cols});
  const Tensor y = workspace.Take<float>({1, rows});
  float* xs = x.host<float>();
  for (int64_t k = 0; k < w.cols; ++k) xs[k] = std::ldexp(static_cast<float>(k % 61 - 30), -5);  // bf16-exact
  const auto call = [&] { backend.Linear(slice, x, y, gemv.numerics); };
  call();  // the rows into cache
  Clock::time_point start = Clock::now();
  call();
  const double one_call = std::max(Seconds(start, Clock::now()), 1e-7);
  const int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(kInCacheSampleSeconds / one_call)));
  for (int sample = 0; sample < samples; ++sample) {
    start = Clock::now();
    for (int64_t c = 0; c < calls; ++c) call();
    out.bytes_per_s.push_back(static_cast<double>(slice.bytes()) * static_cast<double>(calls) /
                              Seconds(start, Clock::now()));
  }
  out.rows = rows;
  out.bytes = slice.bytes();
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
  const Bf16Dot plan = ChooseKernelPlanFlag(o.kernel_plan, isa);
  const std::string model_dir = ModelDirOrDefault(o.model);
  const std::unique_ptr<Model> model = Model::Load(model_dir);
  const std::string weight_layout = ApplyWeightLayout(*model, o.weight_layout, isa, plan);
  const ModelConfig& config = model->config();
  if (o.prefill_tokens > model->max_context()) {
    throw MakeError("bench: --prefill-tokens ", o.prefill_tokens, " exceeds the model's maximum context of ",
                    model->max_context(), " tokens");
  }
  if (o.speculative && !model->has_draft()) {
    throw MakeError("bench: --speculative dspark needs a model with DSpark stages; ", model_dir, " has none");
  }
  if (o.speculative && o.speculative_length > model->draft_block()) {
    throw MakeError("bench: --speculative-length ", o.speculative_length, " exceeds the draft block of ",
                    model->draft_block());
  }
  const int64_t decode_length =
      kDecodePromptTokens + (o.warmup + o.decode_tokens) * (o.speculative ? o.speculative_length + 1 : 1);
  if (decode_length > model->max_context()) {
    throw MakeError("bench: decode needs ", decode_length, " positions (", kDecodePromptTokens,
                    "-token prompt + --warmup + --decode-tokens) but the model's maximum context is ",
                    model->max_context());
  }
  ThreadPool pool(o.threads);
  if (o.compare_threads && pool.size() == 1) {
    throw MakeError("bench: --compare-threads compares the default threads with one, but this run has one thread",
                    o.threads == 1 ? " (--threads 1)" : " (a 1-core machine: pass --threads 2)");
  }
  CpuBackend backend(pool, isa, plan);
  const ComputeContext ctx{backend};

  // The machine's limits, with the same threads; the bandwidth probe also runs between the
  // phases, and its median is the denominator.
  Progress("measuring DRAM read bandwidth (1 GiB)");
  ReadBandwidthProbe probe(pool, kBandwidthBytes);
  probe.Sample(kBandwidthFirstPasses);
  const PeakKind peak_kind = PeakKindFor(isa, plan);
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

  // After each later phase: the bandwidth probe, and once batch 1 has run, its largest matrix of
  // each format in cache.
  std::array<LinearRecord::Gemv, kMatrixFormats> gemv_matrices{};
  std::array<GemvInCache, kMatrixFormats> in_cache{};
  const auto between_phases = [&] {
    probe.Sample(kBandwidthBetweenPasses);
    for (int f = 0; f < kMatrixFormats; ++f) {
      if (!gemv_matrices[f].w.empty()) {
        SampleGemvInCache(backend, gemv_matrices[f], pool.size(), kInCacheSamplesBetween, in_cache[f]);
      }
    }
  };

  // Decode at each batch size, its linears timed by weight format. Batch 1's GEMV-shaped linears
  // give the best GEMV, a second denominator.
  std::vector<DecodeResult> decode;
  for (int64_t batch : o.batch_sizes) {
    Progress("decode, batch " + std::to_string(batch));
    LinearRecord linears;
    linears.step_rows = batch;
    backend.RecordLinears(&linears);
    const StepParallelism::Stats before = backend.step_stats();
    decode.push_back(RunDecode(*model, ctx, batch, o.warmup, o.decode_tokens));
    decode.back().steps = backend.step_stats().steps - before.steps;
    decode.back().serial_steps = backend.step_stats().serial_steps - before.serial_steps;
    decode.back().linears = linears;
    backend.RecordLinears(nullptr);
    if (batch == 1) gemv_matrices = linears.largest_gemv;
    between_phases();
  }
  // (ParseBenchOptions puts batch 1 in every run.)
  const DecodeResult& one =
      *std::find_if(decode.begin(), decode.end(), [](const DecodeResult& d) { return d.batch == 1; });
  const LinearRecord& gemvs = one.linears;  // the best GEMV

  std::vector<ThreadComparison> comparisons;
  if (o.compare_threads) {
    ThreadPool one_pool(1);
    CpuBackend one_backend(one_pool, isa, plan);
    const ComputeContext one_ctx{one_backend};
    for (int64_t batch : o.batch_sizes) {
      Progress("decode, batch " + std::to_string(batch) + ", " + std::to_string(pool.size()) + " threads against one");
      comparisons.push_back(CompareThreads(*model, ctx, one_ctx, batch, o.warmup, o.decode_tokens));
    }
    between_phases();
  }

  std::optional<SpeculativeResult> speculative;
  if (o.speculative) {
    Progress("speculative decode, batch 1");
    speculative = RunSpeculativeDecode(*model, ctx, o.speculative_length, o.forced_accepted, o.warmup, o.decode_tokens);
    between_phases();
  }

  const ReadBandwidthProbe::Summary bandwidth = probe.summary();
  const double read_gb_s = bandwidth.median / 1e9;
  const double best_gemv_gb_s = gemvs.best_gemv_bytes_per_s / 1e9;
  auto gb_s = [](const DecodeResult& d) { return d.bytes_per_step / d.step_seconds / 1e9; };
  // Each batch's linears by weight format, per forward (the text and the JSON).
  struct FormatRow {
    const char* name;
    double ms_per_forward, mb_per_forward, gb_s, calls_per_forward;
  };
  struct FormatRows {
    int64_t forwards = 0;
    double forward_ms = 0.0;
    std::vector<FormatRow> rows;
  };
  const auto format_rows = [](const LinearRecord& record) {
    FormatRows out;
    out.forwards = record.forwards;
    const double forwards = static_cast<double>(std::max<int64_t>(1, record.forwards));
    out.forward_ms = record.forward_seconds / forwards * 1e3;
    for (int f = 0; f < kMatrixFormats; ++f) {
      const LinearRecord::FormatTime& t = record.by_format[f];
      if (t.calls == 0) continue;
      out.rows.push_back({MatrixFormatName(static_cast<MatrixFormat>(f)), t.seconds / forwards * 1e3,
                          static_cast<double>(t.bytes) / forwards / 1e6,
                          t.seconds > 0.0 ? static_cast<double>(t.bytes) / t.seconds / 1e9 : 0.0,
                          static_cast<double>(t.calls) / forwards});
    }
    return out;
  };
  std::vector<FormatRows> by_format;
  for (const DecodeResult& d : decode) by_format.push_back(format_rows(d.linears));
  // Batch 1's linears at the kernels' speeds: each format's bytes at the slower of its GEMV in
  // cache and the DRAM bandwidth (the bandwidth alone for a format without a one-row Linear).
  std::array<SampleSummary, kMatrixFormats> in_cache_rate{};  // bytes per second
  for (int f = 0; f < kMatrixFormats; ++f) in_cache_rate[f] = SummarizeSamples(in_cache[f].bytes_per_s);
  // Against the same bytes at the bandwidth alone: the most of the bandwidth these kernels allow.
  double kernel_bound_s = 0.0, linears_at_bandwidth_s = 0.0;
  for (int f = 0; f < kMatrixFormats; ++f) {
    const LinearRecord::FormatTime& t = one.linears.by_format[f];
    const double rate =
        in_cache_rate[f].count == 0 ? bandwidth.median : std::min(in_cache_rate[f].median, bandwidth.median);
    kernel_bound_s += static_cast<double>(t.bytes) / rate;
    linears_at_bandwidth_s += static_cast<double>(t.bytes) / bandwidth.median;
  }
  const double forwards_of_one = static_cast<double>(std::max<int64_t>(1, one.linears.forwards));
  kernel_bound_s /= forwards_of_one;
  linears_at_bandwidth_s /= forwards_of_one;
  const double kernel_bound_fraction = kernel_bound_s > 0.0 ? linears_at_bandwidth_s / kernel_bound_s : 0.0;

  std::printf("deepinfer bench: %s\n", model_dir.c_str());
  std::printf("  %d layers, hidden %lld, %d routed experts (top %d); %d threads, isa %s\n", config.num_layers,
              static_cast<long long>(config.hidden_size), config.n_routed_experts, config.num_experts_per_tok,
              pool.size(), std::string(IsaName(isa)).c_str());
  std::printf("  kernels: %s (plan %s%s)\n", std::string(LinearKernelsName(isa, plan)).c_str(),
              std::string(Bf16DotName(plan)).c_str(), o.kernel_plan ? ", --kernel-plan" : ", this CPU's");
  std::printf("  weight layout: %s\n", weight_layout.c_str());
  std::printf("\nmachine (measured now, %d threads)\n", pool.size());
  std::printf(
      "  DRAM read bandwidth   %10.2f GB/s      (1 GiB vectorised sum: median of %d passes between the "
      "phases, %.2f-%.2f)\n",
      read_gb_s, bandwidth.count, bandwidth.min / 1e9, bandwidth.max / 1e9);
  if (gemvs.gemv_calls > 0) {
    std::printf(
        "  best GEMV             %10.2f GB/s      (%.1f MB of weights; fastest of %lld batch-1 linears >= 1 MiB)\n",
        best_gemv_gb_s, static_cast<double>(gemvs.best_gemv_bytes) / 1e6, static_cast<long long>(gemvs.gemv_calls));
  }
  for (int f = 0; f < kMatrixFormats; ++f) {
    const SampleSummary& rate = in_cache_rate[f];
    if (rate.count == 0) continue;
    const WeightMatrix& w = gemv_matrices[f].w;
    std::printf(
        "  GEMV in cache, %-6s %10.2f GB/s      (M = 1 over rows 0-%lld of %lld x %lld, %.2f MB, again and again: "
        "median of %d samples between the phases, %.2f-%.2f)\n",
        MatrixFormatName(static_cast<MatrixFormat>(f)), rate.median / 1e9, static_cast<long long>(in_cache[f].rows - 1),
        static_cast<long long>(w.rows), static_cast<long long>(w.cols), static_cast<double>(in_cache[f].bytes) / 1e6,
        rate.count, rate.min / 1e9, rate.max / 1e9);
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
  std::printf("  %5s %10s %11s %14s %9s %9s %10s %12s %10s\n", "batch", "TPOT ms", "tokens/s", "bytes/step", "GB/s",
              "% of BW", "% of GEMV", "roofline ms", "x roofline");
  for (const DecodeResult& d : decode) {
    const double roofline_s = d.roofline_seconds(bandwidth.median, peak_flops);
    std::printf("  %5lld %10.3f %11.2f %14.0f %9.3f %8.2f%% %9.2f%% %12.3f %10.2f\n", static_cast<long long>(d.batch),
                d.step_seconds * 1e3, static_cast<double>(d.batch) / d.step_seconds, d.bytes_per_step, gb_s(d),
                100.0 * gb_s(d) / read_gb_s, best_gemv_gb_s > 0 ? 100.0 * gb_s(d) / best_gemv_gb_s : 0.0,
                roofline_s * 1e3, d.step_seconds / roofline_s);
  }
  std::printf("  (roofline: the longer of the step's bytes at the median bandwidth and its FLOPs at the peak)\n");
  std::printf(
      "  batch 1's linears at the kernels' speeds: %.3f ms (each format's bytes at the slower of its GEMV in cache "
      "and the DRAM bandwidth: at most %.1f%% of the bandwidth); the step takes %.2fx that\n",
      kernel_bound_s * 1e3, 100.0 * kernel_bound_fraction, one.step_seconds / kernel_bound_s);
  if (pool.size() > 1) {
    std::printf("  forwards on one thread, where the hand-offs cost more than the other threads save:");
    for (const DecodeResult& d : decode) {
      std::printf(" batch %lld %llu of %llu%s", static_cast<long long>(d.batch),
                  static_cast<unsigned long long>(d.serial_steps), static_cast<unsigned long long>(d.steps),
                  &d == &decode.back() ? "\n" : ";");
    }
  }

  std::printf(
      "\ndecode by weight format (each batch's linears and all else, per forward: the mean of its warm-up "
      "and timed forwards)\n");
  std::printf("  %5s %-22s %10s %10s %10s %10s\n", "batch", "", "ms/forward", "MB/forward", "GB/s", "% of time");
  for (size_t i = 0; i < decode.size(); ++i) {
    const FormatRows& rows = by_format[i];
    if (rows.forwards == 0) continue;
    double linear_ms = 0.0;
    for (const FormatRow& row : rows.rows) {
      linear_ms += row.ms_per_forward;
      std::printf("  %5lld %-22s %10.3f %10.2f %10.3f %9.2f%%\n", static_cast<long long>(decode[i].batch), row.name,
                  row.ms_per_forward, row.mb_per_forward, row.gb_s, 100.0 * row.ms_per_forward / rows.forward_ms);
    }
    std::printf("  %5lld %-22s %10.3f %10s %10s %9.2f%%\n", static_cast<long long>(decode[i].batch),
                "all else (not linear)", rows.forward_ms - linear_ms, "", "",
                100.0 * (rows.forward_ms - linear_ms) / rows.forward_ms);
  }

  if (!comparisons.empty()) {
    std::printf("\nthreads: %d against 1, blocks of %lld steps alternating in this process\n", pool.size(),
                static_cast<long long>(kCompareBlock));
    std::printf("  %5s %12s %12s %12s %16s %12s\n", "batch", "default ms", "1 thread ms", "default/one", "95% interval",
                "worst block");
    for (const ThreadComparison& c : comparisons) {
      std::printf("  %5lld %12.3f %12.3f %12.3f %7.3f - %6.3f %12.3f\n", static_cast<long long>(c.batch),
                  c.default_seconds * 1e3, c.one_thread_seconds * 1e3, c.ratio(), c.ratio_low, c.ratio_high,
                  c.worst_block_ratio);
    }
    std::printf("  (95%% interval: the geometric mean of the block pairs' ratios, +-1.96 standard errors)\n");
  }

  constexpr int kReleasedLayers = 40;
  if (speculative) {
    const SpeculativeResult& sp = *speculative;
    std::printf(
        "\nspeculative decoding (DSpark, batch 1, %d drafts verified per step, %s; %lld steps interleaved with "
        "plain steps)\n",
        sp.length, o.forced_accepted > 0 ? "forced acceptance" : "greedy acceptance", static_cast<long long>(sp.steps));
    std::printf("  tokens per verify step %8.3f (bonus included)\n", sp.mean_emitted);
    std::printf("  plain                  %8.3f ms/token  %8.2f tokens/s  %12.0f bytes/step\n", sp.plain_seconds * 1e3,
                sp.plain_tokens_per_s(), sp.plain_bytes);
    std::printf("  draft + verify         %8.3f + %.3f ms  %8.2f tokens/s  %12.0f + %.0f bytes/step\n",
                sp.draft_seconds * 1e3, sp.verify_seconds * 1e3, sp.speculative_tokens_per_s(), sp.draft_bytes,
                sp.verify_bytes);
    std::printf("  speedup %.3fx; bytes bound %.3fx (%.1f%% of it); bound projected to %d layers %.3fx\n", sp.speedup(),
                sp.bytes_bound(), 100.0 * sp.speedup() / sp.bytes_bound(), kReleasedLayers,
                sp.bytes_bound_at(config.num_layers, kReleasedLayers));
  }

  if (o.json) {
    nlohmann::json per_batch = nlohmann::json::array();
    for (const DecodeResult& d : decode) {
      per_batch.push_back({{"batch", d.batch},
                           {"tpot_ms", d.step_seconds * 1e3},
                           {"tokens_per_s", static_cast<double>(d.batch) / d.step_seconds},
                           {"bytes_per_step", d.bytes_per_step},
                           {"gb_s", gb_s(d)},
                           {"bandwidth_fraction", gb_s(d) / read_gb_s},
                           {"flops_per_step", d.flops_per_step},
                           {"roofline_ms", d.roofline_seconds(bandwidth.median, peak_flops) * 1e3},
                           {"roofline_ratio", d.step_seconds / d.roofline_seconds(bandwidth.median, peak_flops)},
                           {"forwards", d.steps},
                           {"serial_forwards", d.serial_steps}});
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
        {"measured_read_passes", bandwidth.count},
        {"best_gemv_gb_s", best_gemv_gb_s},
        {"kernels", std::string(LinearKernelsName(isa, plan))},
        {"kernel_plan", std::string(Bf16DotName(plan))},
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
        {"decode_kernel_bound_ms", kernel_bound_s * 1e3},
        {"decode_kernel_bound_ratio", one.step_seconds / kernel_bound_s},
        {"decode_kernel_bound_bandwidth_fraction", kernel_bound_fraction},
        {"decode", per_batch},
    };
    nlohmann::json in_cache_gb_s = nlohmann::json::object();
    for (int f = 0; f < kMatrixFormats; ++f) {
      if (in_cache_rate[f].count > 0) {
        in_cache_gb_s[MatrixFormatName(static_cast<MatrixFormat>(f))] = in_cache_rate[f].median / 1e9;
      }
    }
    j["gemv_in_cache_gb_s"] = in_cache_gb_s;
    nlohmann::json per_batch_formats = nlohmann::json::array();
    for (size_t i = 0; i < decode.size(); ++i) {
      nlohmann::json linears = nlohmann::json::object();
      for (const FormatRow& row : by_format[i].rows) {
        linears[row.name] = {{"ms_per_forward", row.ms_per_forward},
                             {"mb_per_forward", row.mb_per_forward},
                             {"gb_s", row.gb_s},
                             {"calls_per_forward", row.calls_per_forward}};
      }
      per_batch_formats.push_back({{"batch", decode[i].batch},
                                   {"forwards", by_format[i].forwards},
                                   {"ms_per_forward", by_format[i].forward_ms},
                                   {"linears", linears}});
    }
    j["decode_by_format"] = per_batch_formats;
    if (!comparisons.empty()) {
      nlohmann::json rows = nlohmann::json::array();
      for (const ThreadComparison& c : comparisons) {
        rows.push_back({{"batch", c.batch},
                        {"default_ms", c.default_seconds * 1e3},
                        {"one_thread_ms", c.one_thread_seconds * 1e3},
                        {"ratio", c.ratio()},
                        {"ratio_low", c.ratio_low},
                        {"ratio_high", c.ratio_high},
                        {"worst_block_ratio", c.worst_block_ratio}});
      }
      j["thread_comparison"] = rows;
    }
    if (speculative) {
      const SpeculativeResult& sp = *speculative;
      j["speculative"] = {{"length", sp.length},
                          {"forced_accepted", o.forced_accepted},
                          {"steps", sp.steps},
                          {"mean_accepted_length", sp.mean_emitted},
                          {"plain_tokens_per_s", sp.plain_tokens_per_s()},
                          {"speculative_tokens_per_s", sp.speculative_tokens_per_s()},
                          {"speedup", sp.speedup()},
                          {"plain_ms", sp.plain_seconds * 1e3},
                          {"draft_ms", sp.draft_seconds * 1e3},
                          {"verify_ms", sp.verify_seconds * 1e3},
                          {"plain_bytes_per_step", sp.plain_bytes},
                          {"verify_bytes_per_step", sp.verify_bytes},
                          {"draft_bytes", sp.draft_bytes},
                          {"bytes_bound", sp.bytes_bound()},
                          {"bound_fraction", sp.speedup() / sp.bytes_bound()},
                          {"bytes_bound_40_layers", sp.bytes_bound_at(config.num_layers, kReleasedLayers)}};
    }
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace deepinfer
