// The model reaches the device only through the Backend interface: a forward of tiny-a on a
// backend that records every call gives the CPU backend's logits bit for bit, and calls each op
// as often as the config's layer roles say.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "model/golden_support.h"
#include "model/recording_backend.h"

namespace deepinfer {
namespace {

using testing::LoadGolden;
using testing::ModelDir;
using testing::RecordingBackend;

struct RoleCounts {
  int layers = 0, engram = 0, pooled_sources = 0, index_sources = 0;
  int indexed_kv_sources = 0;  // KV sources some index source scores against
};

RoleCounts CountRoles(const ModelConfig& c) {
  RoleCounts n;
  n.layers = c.num_layers;
  n.engram = static_cast<int>(c.engram_layer_ids.size());
  std::set<int> indexed;
  for (const LayerRole& role : c.roles) {
    n.pooled_sources += role.kv_source && role.compress_ratio > 1 ? 1 : 0;
    n.index_sources += role.index_source ? 1 : 0;
    if (role.index_source) indexed.insert(role.kv_source_layer);
  }
  n.indexed_kv_sources = static_cast<int>(indexed.size());
  return n;
}

// Calls one forward of one sequence makes whatever the token count (ops that run once per layer
// role, or once per sequence and layer).
void ExpectPerLayerCalls(const RecordingBackend& backend, const RoleCounts& n) {
  EXPECT_EQ(backend.count("Embed"), 1);
  EXPECT_EQ(backend.count("HcMixes"), 2 * n.layers);
  EXPECT_EQ(backend.count("HcCollapse"), 2 * n.layers + 1);  // + the head's
  EXPECT_EQ(backend.count("HcExpand"), 2 * n.layers);
  EXPECT_GE(backend.count("Copy"), n.layers);  // pre_mix, and the compressors' pending groups
  EXPECT_EQ(backend.count("EncodeWindowRows"), n.layers);
  EXPECT_EQ(backend.count("DecodeWindowEntries"), n.layers);
  EXPECT_EQ(backend.count("StoreWindowEntries"), n.layers);
  EXPECT_EQ(backend.count("SparseAttention"), n.layers);
  EXPECT_EQ(backend.count("Rope.inverse"), n.layers);
  EXPECT_EQ(backend.count("GroupedLinear"), n.layers);
  EXPECT_EQ(backend.count("Route"), n.layers);
  EXPECT_EQ(backend.count("AddRounded"), n.layers);
  EXPECT_EQ(backend.count("EngramGather"), n.engram);
  EXPECT_EQ(backend.count("EngramGate"), n.engram);
  EXPECT_EQ(backend.count("IndexerSelect"), n.index_sources);
  EXPECT_EQ(backend.count("DecodeIndexKeys"), n.indexed_kv_sources);
  EXPECT_EQ(backend.count("CompressorPool"), n.pooled_sources);
}

TEST(BackendSeamTest, EveryOpOfATinyAForwardGoesThroughTheBackend) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-a"));
  const RoleCounts roles = CountRoles(model->config());
  ASSERT_GT(roles.engram, 0);
  ASSERT_GT(roles.pooled_sources, 0);
  ASSERT_GT(roles.index_sources, 0);
  const testing::GoldenCase golden = LoadGolden("tiny-a");
  ThreadPool pool(2);
  RecordingBackend recording(pool, DetectIsa());
  CpuBackend cpu(pool, DetectIsa());

  // A prefill whose length completes groups of every ratio, then one decode step.
  const std::span<const int32_t> prompt = std::span<const int32_t>(golden.tokens).first(golden.prompt_len);
  ASSERT_GE(prompt.size(), 16u);
  SequenceState recorded = model->NewSequence();
  SequenceState plain = model->NewSequence();
  const ForwardItem recorded_prefill{&recorded, prompt, LogitsMode::kAll};
  const ForwardItem plain_prefill{&plain, prompt, LogitsMode::kAll};
  EXPECT_EQ(model->Forward({&recorded_prefill, 1}, ComputeContext{recording}),
            model->Forward({&plain_prefill, 1}, ComputeContext{cpu}));
  ExpectPerLayerCalls(recording, roles);
  std::map<std::string, int> seen = recording.calls();

  recording.Clear();
  const int32_t next = golden.tokens[golden.prompt_len];
  const ForwardItem recorded_step{&recorded, std::span<const int32_t>(&next, 1)};
  const ForwardItem plain_step{&plain, std::span<const int32_t>(&next, 1)};
  EXPECT_EQ(model->Forward({&recorded_step, 1}, ComputeContext{recording}),
            model->Forward({&plain_step, 1}, ComputeContext{cpu}));
  EXPECT_EQ(recording.count("Embed"), 1);
  EXPECT_EQ(recording.count("SparseAttention"), roles.layers);
  for (const auto& [op, calls] : recording.calls()) seen[op] += calls;

  // Every op of the interface ran.
  for (const char* op : {"Linear",
                         "Linear.dense",
                         "GroupedLinear",
                         "Copy",
                         "Embed",
                         "RmsNorm",
                         "Rope",
                         "Rope.inverse",
                         "HcMixes",
                         "HcCollapse",
                         "HcExpand",
                         "EncodeWindowRows",
                         "StoreWindowEntries",
                         "DecodeWindowEntries",
                         "EncodeCompressedEntries",
                         "DecodeCompressedEntries",
                         "DecodeIndexKeys",
                         "CompressorPool",
                         "IndexerSelect",
                         "SparseAttention",
                         "Route",
                         "SwiGlu",
                         "GatherRows",
                         "ScatterAddRows",
                         "AddRounded",
                         "EngramGather",
                         "EngramGate"}) {
    EXPECT_GT(seen[op], 0) << op;
  }
}

}  // namespace
}  // namespace deepinfer
