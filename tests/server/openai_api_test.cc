// Request parsing and response building without HTTP: JSON in, Engine requests out; synthetic
// Engine events in, OpenAI bodies and SSE chunks out.
#include "server/openai_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/metrics.h"
#include "server/openapi.h"
#include "server_fixture.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

// The server's defaults (HttpServerOptions).
constexpr JsonLimits kTestJsonLimits{size_t{16} << 20, 64, DuplicateKeys::kLastWins};

const ModelInfo& Info() {
  static const ModelInfo info = DescribeModel("m", testing::ProjectTokenizer(), 129280, 1024);
  return info;
}

Json Body(std::string_view text) { return Json::parse(text); }

// The ApiError a body gets, as "status param code".
std::string ErrorOf(const std::string& text, bool chat = true) {
  try {
    const Json body = ParseRequestJson(text, kTestJsonLimits);
    if (chat) {
      (void)ParseChatCompletionRequest(body, Info());
    } else {
      (void)ParseCompletionRequest(body, Info());
    }
  } catch (const ApiError& e) {
    const Json error = Json::parse(e.Body())["error"];
    return std::to_string(e.status()) + " " + (error["param"].is_null() ? "-" : error["param"].get<std::string>()) +
           " " + (error["code"].is_null() ? "-" : error["code"].get<std::string>());
  }
  return "ok";
}

TEST(OpenAiRequest, ChatFieldsBecomeEngineParams) {
  const GenerationRequest r = ParseChatCompletionRequest(
      Body(R"({"messages": [{"role": "user", "content": "Hi"}], "temperature": 0.5, "top_p": 0.9, "top_k": -1,
               "max_completion_tokens": 7, "max_tokens": 99, "stop": "x", "seed": -1, "n": 2,
               "logprobs": true, "top_logprobs": 3, "logit_bias": {"17": -100}, "stream": true,
               "stream_options": {"include_usage": true}, "chat_template_kwargs": {"thinking": true}})"),
      Info());
  EXPECT_EQ(r.kind, ApiKind::kChat);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].front(), 0);      // BOS
  EXPECT_EQ(r.prompts[0].back(), 128821);  // <think>: thinking on
  EXPECT_EQ(r.params.stop.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.sampling.top_k, 0);  // -1: off
  EXPECT_EQ(r.params.stop.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.params.seed, static_cast<uint64_t>(-1));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.params.sampling.logit_bias.at(17), -100.0f);
  EXPECT_TRUE(r.stream && r.include_usage && r.thinking);
  const std::vector<RequestParams> choices = ExpandChoices(r);
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[1].seed, static_cast<uint64_t>(0));  // seed + 1
  EXPECT_EQ(choices[1].sampling.logprobs, 3);
}

TEST(OpenAiRequest, DefaultsFollowOpenAi) {
  const GenerationRequest chat =
      ParseChatCompletionRequest(Body(R"({"messages": [{"role": "user", "content": "Hi"}]})"), Info());
  EXPECT_EQ(chat.params.sampling.temperature, 1.0f);
  EXPECT_EQ(chat.params.stop.max_tokens, 1024 - static_cast<int64_t>(chat.prompts[0].size()));  // the rest
  const GenerationRequest completion = ParseCompletionRequest(Body(R"({"prompt": "Hi"})"), Info());
  EXPECT_EQ(completion.params.stop.max_tokens, 16);
  EXPECT_FALSE(completion.params.seed.has_value());
}

TEST(OpenAiRequest, ReasoningEffortNames) {
  auto effort_line = [](const char* effort) {
    const GenerationRequest r = ParseChatCompletionRequest(
        Body(std::string(R"({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": )") + effort + "}"),
        Info());
    return testing::ProjectTokenizer().Decode(r.prompts[0]);
  };
  EXPECT_THAT(effort_line("\"medium\""), HasSubstr("Reasoning Effort: 50"));
  EXPECT_THAT(effort_line("\"minimal\""), HasSubstr("Reasoning Effort: 25"));
  EXPECT_THAT(effort_line("\"max\""), HasSubstr("Reasoning Effort: 100"));
  EXPECT_THAT(effort_line("37"), HasSubstr("Reasoning Effort: 37"));
  EXPECT_THAT(effort_line("\"none\""), ::testing::Not(HasSubstr("Reasoning Effort")));
}

TEST(OpenAiRequest, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf("{\"messages\": ["), "400 - invalid_json");
  EXPECT_EQ(ErrorOf(std::string(100, '[') + std::string(100, ']')), "400 - invalid_json");
  EXPECT_EQ(ErrorOf("[]"), "400 - invalid_type");
  EXPECT_EQ(ErrorOf("{}"), "400 messages missing_required_parameter");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})"),
            "400 max_tokens invalid_value");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "n": 0})"), "400 n invalid_value");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})"),
            "400 temperature invalid_value");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 2})"), "400 top_p invalid_value");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "model": "other"})"),
            "404 model model_not_found");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}})"),
            "400 tool_choice invalid_value");
  // Structured output: compiled while the request is parsed, errors naming the field.
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"),
            "ok");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "structured_outputs": {"choice": ["a", "b"]}})", false), "ok");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
                        "json_schema": {"name": "a", "schema": {"type": "string", "contentMediaType": "x"}}}})"),
            "400 response_format invalid_value");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})"),
            "400 tool_choice invalid_value");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "guided_regex": "a", "ignore_eos": true})", false),
            "400 ignore_eos invalid_value");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": false})"),
            "400 parallel_tool_calls unsupported_parameter");
  EXPECT_EQ(ErrorOf(R"({"prompt": [1, 2], "max_tokens": 1023})", false), "400 max_tokens context_length_exceeded");
  EXPECT_EQ(ErrorOf(R"({"prompt": [1, 200000]})", false), "400 prompt invalid_value");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "echo": true})", false), "400 echo unsupported_parameter");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "whatever_comes_next": {"a": [1]}})", false), "ok");  // unknown: ignored
}

// Text that cannot fit is refused from its length alone ("at least N tokens"), not tokenized.
TEST(OpenAiRequest, HugeTextIsRefusedBeforeTokenizing) {
  const std::string body = "{\"prompt\": \"" + std::string(8 << 20, 'a') + "\"}";
  try {
    (void)ParseCompletionRequest(ParseRequestJson(body, kTestJsonLimits), Info());
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_THAT(e.what(), HasSubstr("has at least"));
    EXPECT_THAT(e.what(), HasSubstr("maximum context length is 1024"));
  }
}

ChoiceEvent Event(size_t choice, std::vector<int32_t> tokens, std::string text,
                  FinishReason finish = FinishReason::kNone) {
  ChoiceEvent e;
  e.choice = choice;
  for (int32_t t : tokens) e.update.tokens.push_back({t, -0.5f, {{t, -0.5f}}});
  e.update.text = std::move(text);
  e.update.finish = finish;
  e.update.cached_tokens = 16;
  e.time = Clock::now();
  return e;
}

TEST(ResponseBuilder, ChatBodySplitsReasoningAndToolCalls) {
  GenerationRequest r = ParseChatCompletionRequest(
      Body(R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"thinking": true}})"), Info());
  ResponseBuilder b(r, Info(), "chatcmpl-x", 1);
  b.Collect({Event(0, {10, 11}, "I should call f.</th"),
             Event(0, {12}, "ink>Calling.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"),
             Event(0, {13},
                   "<｜DSML｜ parameter name=\"x\" string=\"true\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
                   "</｜DSML｜ calls>",
                   FinishReason::kStopToken)});
  ASSERT_TRUE(b.done());
  const Json body = Json::parse(b.Body());
  const Json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "I should call f.");
  EXPECT_EQ(message["content"], "Calling.");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"x\": \"1\"}");
  EXPECT_THAT(message["tool_calls"][0]["id"].get<std::string>(), ::testing::StartsWith("call_"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 16);
}

TEST(ResponseBuilder, StreamedToolCallsArriveAsArgumentDeltas) {
  GenerationRequest r =
      ParseChatCompletionRequest(Body(R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true,
               "stream_options": {"include_usage": true}})"),
                                 Info());
  ResponseBuilder b(r, Info(), "chatcmpl-x", 1);
  std::string sse = b.StreamEvents({Event(0, {1}, "ok")});
  sse += b.StreamEvents(
      {Event(0, {2}, "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
             FinishReason::kStopToken)});
  ASSERT_TRUE(b.done());
  sse += b.StreamEnd();
  std::vector<Json> chunks;
  for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
    const std::string data = sse.substr(at + 6, sse.find("\n\n", at) - at - 6);
    if (data != "[DONE]") chunks.push_back(Json::parse(data));
  }
  ASSERT_EQ(chunks.size(), 5u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "ok");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "");
  EXPECT_EQ(chunks[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_EQ(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(chunks[4]["choices"].empty());
  EXPECT_EQ(chunks[4]["usage"]["completion_tokens"], 2);
  EXPECT_TRUE(sse.ends_with("data: [DONE]\n\n"));
}

TEST(ResponseBuilder, CompletionLogprobsAndRejection) {
  GenerationRequest r = ParseCompletionRequest(Body(R"({"prompt": [1, 2], "logprobs": 1, "n": 2})"), Info());
  ResponseBuilder b(r, Info(), "cmpl-x", 1);
  b.Collect({Event(0, {33310}, "hello", FinishReason::kMaxTokens)});
  ChoiceEvent refused = Event(1, {}, "", FinishReason::kError);
  refused.rejected = true;
  refused.update.error = "nope";
  b.Collect({refused});
  ASSERT_TRUE(b.done());
  EXPECT_EQ(b.rejection(), "nope");
  const Json body = Json::parse(b.Body());
  const Json& lp = body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"hello"}));
  EXPECT_EQ(lp["text_offset"], Json::array({0}));
  EXPECT_EQ(lp["top_logprobs"][0]["hello"], -0.5);
}

TEST(OpenApi, DocumentsEveryRouteWithTheModelsNumbers) {
  const Json doc = Json::parse(OpenApiJson(Info(), /*api_key=*/false));
  EXPECT_EQ(doc["openapi"], "3.1.0");
  for (const char* path :
       {"/", "/health", "/metrics", "/openapi.json", "/v1/models", "/v1/models/{model}", "/v1/chat/completions",
        "/v1/completions", "/tokenize", "/detokenize", "/reset_prefix_cache"}) {
    EXPECT_TRUE(doc["paths"].contains(path)) << path;
  }
  const Json& max_tokens = doc["components"]["schemas"]["CompletionRequest"]["properties"]["max_tokens"];
  EXPECT_EQ(max_tokens.dump().find("\"maximum\":1023") != std::string::npos, true) << max_tokens.dump();
  EXPECT_FALSE(doc["components"].contains("securitySchemes"));
  const Json with_key = Json::parse(OpenApiJson(Info(), /*api_key=*/true));
  EXPECT_TRUE(with_key["paths"]["/v1/completions"]["post"].contains("security"));
}

TEST(Metrics, RendersCumulativeHistogramsAndCounters) {
  Metrics m;
  m.RecordFinished({FinishReason::kMaxTokens, 10, 4, 0.02, 0.005, 0.04});
  m.RecordFinished({FinishReason::kAbort, 5, 1, std::nullopt, std::nullopt, 3.0});
  m.RecordHttp("/v1/completions", 200);
  const std::string text = m.Render(LoopStats{});
  EXPECT_THAT(text, HasSubstr("deepinfer_requests_finished_total{finish_reason=\"length\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_requests_finished_total{finish_reason=\"abort\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_prompt_tokens_total 15\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_generation_tokens_total 5\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_time_to_first_token_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_e2e_request_latency_seconds_bucket{le=\"2.5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_e2e_request_latency_seconds_bucket{le=\"5\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("deepinfer_http_requests_total{route=\"/v1/completions\",status=\"200\"} 1\n"));
}

}  // namespace
}  // namespace deepinfer
