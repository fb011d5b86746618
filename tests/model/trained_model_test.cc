// The trained default model (tests/data/models/kjv-tiny, tools/train/) on held-out data: greedy
// continuations of Revelation, which it never saw, read as KJV English; held-out chats call the
// right tool in well-formed DSML and close their reasoning before answering.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "chat/chat_encoding.h"
#include "chat/output_parser.h"
#include "core/model_directory.h"
#include "engine/engine.h"
#include "model/golden_support.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {
namespace {

const std::string kModel = "kjv-tiny";

std::string EvalFile(const std::string& name) { return ModelDir(kModel) + "/eval/" + name; }

std::vector<std::string> Words(const std::string& text) {
  static const std::regex word("[a-z]+(?:'[a-z]+)?");
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(lower.begin(), lower.end(), word); it != std::sregex_iterator(); ++it) {
    out.push_back(it->str());
  }
  return out;
}

// The most times any n-gram of `ids` occurs.
int MaxNgramCount(const std::vector<int32_t>& ids, size_t n) {
  std::map<std::vector<int32_t>, int> counts;
  int most = 0;
  for (size_t i = 0; i + n <= ids.size(); ++i) {
    most = std::max(most, ++counts[std::vector<int32_t>(ids.begin() + i, ids.begin() + i + n)]);
  }
  return most;
}

class TrainedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = std::make_unique<ThreadPool>(2);
    model_ = Model::Load(ModelDir(kModel));
    tokenizer_ = std::make_unique<Tokenizer>(*Tokenizer::FromModelDirectory(ModelDirectory(ModelDir(kModel))));
  }
  static void TearDownTestSuite() {
    model_.reset();
    tokenizer_.reset();
    pool_.reset();
  }

  // Greedy completions of every prompt, run together in one engine; text keeps special tokens.
  static std::vector<std::pair<std::vector<int32_t>, std::string>> Complete(
      const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens, bool ignore_eos) {
    CpuBackend backend(*pool_, DetectIsa());
    Engine engine(*model_, ComputeContext{backend}, EngineOptions{}, tokenizer_.get());
    std::map<RequestId, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
      RequestParams request{.prompt = prompts[i]};
      request.stop.max_tokens = max_tokens;
      request.stop.ignore_eos = ignore_eos;
      request.stop.skip_special_tokens = false;
      index[engine.Add(std::move(request))] = i;
    }
    std::vector<std::pair<std::vector<int32_t>, std::string>> out(prompts.size());
    while (!engine.idle()) {
      for (const RequestUpdate& u : engine.Step()) {
        auto& [ids, text] = out[index.at(u.id)];
        for (const GeneratedToken& t : u.tokens) ids.push_back(t.token);
        text += u.text;
        EXPECT_NE(u.finish, FinishReason::kError) << u.error;
      }
    }
    return out;
  }

  static std::unique_ptr<ThreadPool> pool_;
  static std::unique_ptr<Model> model_;
  static std::unique_ptr<Tokenizer> tokenizer_;
};
std::unique_ptr<ThreadPool> TrainedModelTest::pool_;
std::unique_ptr<Model> TrainedModelTest::model_;
std::unique_ptr<Tokenizer> TrainedModelTest::tokenizer_;

TEST_F(TrainedModelTest, ContinuesHeldOutScriptureInCorpusWordsWithoutRunawayRepetition) {
  std::set<std::string> corpus;
  std::ifstream words_file(EvalFile("corpus_words.txt"));
  for (std::string w; std::getline(words_file, w);) corpus.insert(w);
  ASSERT_GT(corpus.size(), 10000u);
  std::ifstream prompts_file(EvalFile("text_prompts.json"));
  const std::vector<std::string> texts = nlohmann::json::parse(prompts_file).get<std::vector<std::string>>();
  ASSERT_EQ(texts.size(), 10u);
  std::vector<std::vector<int32_t>> prompts;
  ASSERT_TRUE(tokenizer_->prompt_bos().has_value()) << "tokenizer_config.json should set add_bos_token";
  for (const std::string& text : texts) prompts.push_back(tokenizer_->EncodeTextPrompt(text));
  size_t total = 0, known = 0;
  const auto completions = Complete(prompts, 64, /*ignore_eos=*/true);
  for (size_t i = 0; i < completions.size(); ++i) {
    const auto& [ids, text] = completions[i];
    EXPECT_EQ(ids.size(), 64u);
    const std::vector<std::string> words = Words(text);
    size_t here = 0;
    for (const std::string& w : words) here += corpus.count(w);
    total += words.size();
    known += here;
    const int repeats = MaxNgramCount(ids, 8);
    std::printf("[trained] prompt %zu: %zu/%zu corpus words, most frequent 8-gram x%d\n  %s|%s\n", i, here,
                words.size(), repeats, texts[i].c_str(), text.c_str());
    EXPECT_LT(repeats, 3) << "prompt " << i << ": an 8-gram occurs " << repeats << " times in 64 tokens";
  }
  const double fraction = static_cast<double>(known) / static_cast<double>(total);
  std::printf("[trained] %zu of %zu generated words (%.1f%%) are words of the corpus\n", known, total, 100 * fraction);
  EXPECT_GT(total, 200u);
  EXPECT_GE(fraction, 0.90);
}

TEST_F(TrainedModelTest, HeldOutChatsCallTheRightToolAndCloseTheirReasoning) {
  std::ifstream file(EvalFile("chats.jsonl"));
  std::vector<nlohmann::json> cases;
  std::vector<std::vector<int32_t>> prompts;
  for (std::string line; std::getline(file, line);) {
    cases.push_back(nlohmann::json::parse(line));
    const ChatRequest request = ParseChatRequestJson(cases.back());
    prompts.push_back(tokenizer_->Encode(RenderChatPrompt(request.messages, request.options)));
  }
  ASSERT_EQ(cases.size(), 200u);
  const auto completions = Complete(prompts, 160, /*ignore_eos=*/false);
  int tool_cases = 0, tool_ok = 0, think_cases = 0, think_ok = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& text = completions[i].second;
    const bool thinking = cases[i]["thinking"].get<bool>();
    ChatOutputParser parser(thinking);
    ChatOutputDelta whole = parser.Feed(text);
    const ChatOutputDelta rest = parser.Finish();
    whole.reasoning_content += rest.reasoning_content;
    whole.content += rest.content;
    whole.tool_calls.insert(whole.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
    bool ok = false;
    if (cases[i].contains("expect_tool")) {
      ++tool_cases;
      for (const ParsedToolCall& call : whole.tool_calls) {
        const nlohmann::json args = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
        ok = ok || (call.name == cases[i]["expect_tool"].get<std::string>() && args.is_object() && !args.empty());
      }
      tool_ok += ok;
    } else {
      ++think_cases;
      const size_t close = text.find("</think>");
      ok = close != std::string::npos && close > 0 && whole.content.find_first_not_of(" \n") != std::string::npos;
      think_ok += ok;
    }
    if (!ok) std::printf("[trained] chat %zu missed: %s\n", i, text.c_str());
  }
  std::printf("[trained] tool prompts: %d/%d call the right tool; thinking prompts: %d/%d close <think> and answer\n",
              tool_ok, tool_cases, think_ok, think_cases);
  EXPECT_GE(tool_ok, (tool_cases * 4 + 4) / 5);
  EXPECT_GE(think_ok, (think_cases * 4 + 4) / 5);
}

}  // namespace
}  // namespace deepinfer::testing
