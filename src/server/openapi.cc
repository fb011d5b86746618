#include "server/openapi.h"

#include <cstdint>
#include <limits>

#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

Json Ref(const char* name) { return Json{{"$ref", std::string("#/components/schemas/") + name}}; }

// JSON Schema 2020-12 (OpenAPI 3.1): null as a type.
Json Nullable(Json schema) {
  if (schema.contains("type") && schema["type"].is_string()) {
    schema["type"] = Json::array({schema["type"], "null"});
    return schema;
  }
  return Json{{"anyOf", Json::array({std::move(schema), {{"type", "null"}}})}};
}

Json Type(const char* type) { return Json{{"type", type}}; }
Json IntRange(int64_t lo, int64_t hi) { return Json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}; }
Json NumRange(double lo, double hi) { return Json{{"type", "number"}, {"minimum", lo}, {"maximum", hi}}; }
Json ArrayOf(Json items) { return Json{{"type", "array"}, {"items", std::move(items)}}; }

Json Object(Json properties, Json required = Json::array(), bool additional = true) {
  Json o = {{"type", "object"}, {"properties", std::move(properties)}};
  if (!required.empty()) o["required"] = std::move(required);
  if (!additional) o["additionalProperties"] = false;
  return o;
}

Json JsonContent(Json schema) { return Json{{"application/json", {{"schema", std::move(schema)}}}}; }

Json ErrorResponse(const char* what) {
  return Json{{"description", what}, {"content", JsonContent(Ref("ErrorResponse"))}};
}

// The sampling and stop fields both generation endpoints take.
Json CommonProperties(const ModelInfo& model) {
  const int64_t last_id = model.vocab_size - 1;
  return Json{
      {"model", Nullable(Json{{"type", "string"}, {"description", "must be the served name when given"}})},
      // More than the context can never be served (prompt + max_tokens must fit).
      {"max_tokens", Nullable(IntRange(1, model.max_model_len - 1))},
      {"temperature", Nullable(NumRange(0, 2))},
      {"top_p", Nullable(Json{{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 1}})},
      {"top_k", Nullable(Json{{"type", "integer"},
                              {"minimum", -1},
                              {"maximum", std::numeric_limits<int32_t>::max()},
                              {"description", "-1 or 0: off"}})},
      {"min_p", Nullable(NumRange(0, 1))},
      {"presence_penalty", Nullable(NumRange(-2, 2))},
      {"frequency_penalty", Nullable(NumRange(-2, 2))},
      {"repetition_penalty", Nullable(Json{{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 100}})},
      {"seed", Nullable(IntRange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))},
      {"stop", Nullable(Json{{"anyOf", Json::array({Json{{"type", "string"}, {"minLength", 1}},
                                                    Json{{"type", "array"},
                                                         {"maxItems", 64},
                                                         {"items", {{"type", "string"}, {"minLength", 1}}}}})}})},
      {"stop_token_ids", Nullable(Json{{"type", "array"}, {"maxItems", 1024}, {"items", IntRange(0, last_id)}})},
      {"n", Nullable(IntRange(1, 128))},
      {"stream", Nullable(Type("boolean"))},
      {"stream_options", Nullable(Object({{"include_usage", Nullable(Type("boolean"))}}))},
      {"logit_bias", Nullable(Json{{"type", "object"},
                                   {"propertyNames", {{"pattern", "^[0-9]{1,9}$"}}},
                                   {"additionalProperties", NumRange(-100, 100)},
                                   {"description", "token id (a decimal string) -> bias added to its logit"}})},
      {"ignore_eos", Nullable(Type("boolean"))},
      {"skip_special_tokens", Nullable(Type("boolean"))},
      {"include_stop_str_in_output", Nullable(Type("boolean"))},
      {"user", Nullable(Type("string"))},
  };
}

void LogprobSchemas(Json& schemas) {
  schemas["TopLogprob"] =
      Object({{"token", Type("string")}, {"logprob", Type("number")}, {"bytes", ArrayOf(IntRange(0, 255))}},
             Json::array({"token", "logprob", "bytes"}));
  schemas["TokenLogprob"] = Object({{"token", Type("string")},
                                    {"logprob", Type("number")},
                                    {"bytes", ArrayOf(IntRange(0, 255))},
                                    {"top_logprobs", ArrayOf(Ref("TopLogprob"))}},
                                   Json::array({"token", "logprob", "bytes", "top_logprobs"}));
  schemas["ChatLogprobs"] = Object({{"content", ArrayOf(Ref("TokenLogprob"))}}, Json::array({"content"}));
  schemas["CompletionLogprobs"] =
      Object({{"tokens", ArrayOf(Type("string"))},
              {"token_logprobs", ArrayOf(Type("number"))},
              {"top_logprobs", ArrayOf(Json{{"type", "object"}, {"additionalProperties", Type("number")}})},
              {"text_offset", ArrayOf(IntRange(0, std::numeric_limits<int64_t>::max()))}},
             Json::array({"tokens", "token_logprobs", "top_logprobs", "text_offset"}));
}

Json FinishReasonSchema() {
  return Json{{"type", "string"}, {"enum", Json::array({"stop", "length", "tool_calls", "abort", "error"})}};
}

Json Operation(const char* summary, Json responses, bool needs_key, bool api_key) {
  Json op = {{"summary", summary}, {"responses", std::move(responses)}};
  if (needs_key && api_key) op["security"] = Json::array({{{"bearer", Json::array()}}});
  return op;
}

}  // namespace

std::string OpenApiJson(const ModelInfo& model, bool api_key) {
  Json schemas = Json::object();
  schemas["ErrorResponse"] = Object({{"error", Object({{"message", Type("string")},
                                                       {"type", Type("string")},
                                                       {"param", Nullable(Type("string"))},
                                                       {"code", Nullable(Type("string"))}},
                                                      Json::array({"message", "type", "param", "code"}))}},
                                    Json::array({"error"}));
  const Json text_part =
      Object({{"type", {{"const", "text"}}}, {"text", Type("string")}}, Json::array({"type", "text"}));
  schemas["ToolCall"] = Object(
      {{"id", Type("string")},
       {"type", {{"const", "function"}}},
       {"function",
        Object({{"name", Type("string")}, {"arguments", {{"anyOf", Json::array({Type("string"), Type("object")})}}}},
               Json::array({"name", "arguments"}))}},
      Json::array({"function"}));
  schemas["ChatMessage"] =
      Object({{"role",
               {{"type", "string"},
                {"enum", Json::array({"system", "user", "assistant", "tool", "developer", "latest_reminder"})}}},
              {"content",
               {{"anyOf", Json::array({Type("string"), ArrayOf(text_part), Type("null")})},
                {"description", "a string or text parts; user messages need one"}}},
              {"reasoning_content", Nullable(Type("string"))},
              {"tool_calls", Nullable(ArrayOf(Ref("ToolCall")))},
              {"tool_call_id", Nullable(Type("string"))},
              {"name", Nullable(Type("string"))}},
             Json::array({"role"}));
  schemas["Tool"] = Object({{"type", {{"const", "function"}}},
                            {"function", Object({{"name", {{"type", "string"}, {"minLength", 1}}},
                                                 {"description", Nullable(Type("string"))},
                                                 {"parameters", Nullable(Type("object"))}},
                                                Json::array({"name"}))}},
                           Json::array({"type", "function"}));

  Json chat_properties = CommonProperties(model);
  chat_properties["messages"] = Json{{"type", "array"}, {"minItems", 1}, {"items", Ref("ChatMessage")}};
  chat_properties["max_completion_tokens"] = Nullable(IntRange(1, model.max_model_len - 1));
  chat_properties["logprobs"] = Nullable(Type("boolean"));
  chat_properties["top_logprobs"] = Nullable(IntRange(0, 20));
  chat_properties["tools"] = Nullable(ArrayOf(Ref("Tool")));
  chat_properties["tool_choice"] = Nullable(Json{{"type", "string"}, {"enum", Json::array({"auto", "none"})}});
  chat_properties["parallel_tool_calls"] = Nullable(Type("boolean"));
  chat_properties["reasoning_effort"] = Nullable(Json{
      {"anyOf", Json::array({Json{{"type", "string"},
                                  {"enum", Json::array({"none", "minimal", "low", "medium", "high", "xhigh", "max"})}},
                             IntRange(1, 100)})},
      {"description", "OpenAI's names or the V4.1 levels; without chat_template_kwargs it turns thinking on"}});
  chat_properties["chat_template_kwargs"] =
      Nullable(Object({{"thinking", Nullable(Type("boolean"))}, {"enable_thinking", Nullable(Type("boolean"))}}));
  chat_properties["response_format"] =
      Nullable(Object({{"type", {{"type", "string"}, {"description", "only \"text\" is supported"}}}}));
  schemas["ChatCompletionRequest"] = Object(chat_properties, Json::array({"messages"}));

  Json completion_properties = CommonProperties(model);
  completion_properties["prompt"] = Json{
      {"anyOf",
       Json::array(
           {Type("string"), Json{{"type", "array"}, {"minItems", 1}, {"items", Type("string")}},
            Json{{"type", "array"}, {"minItems", 1}, {"items", IntRange(0, model.vocab_size - 1)}},
            Json{{"type", "array"},
                 {"minItems", 1},
                 {"items", {{"type", "array"}, {"minItems", 1}, {"items", IntRange(0, model.vocab_size - 1)}}}}})}};
  completion_properties["logprobs"] = Nullable(IntRange(0, 20));
  completion_properties["echo"] = Nullable(Type("boolean"));
  completion_properties["suffix"] = Nullable(Type("string"));
  schemas["CompletionRequest"] = Object(completion_properties, Json::array({"prompt"}));

  LogprobSchemas(schemas);
  schemas["Usage"] = Object(
      {{"prompt_tokens", IntRange(0, std::numeric_limits<int64_t>::max())},
       {"completion_tokens", IntRange(0, std::numeric_limits<int64_t>::max())},
       {"total_tokens", IntRange(0, std::numeric_limits<int64_t>::max())},
       {"prompt_tokens_details",
        Object({{"cached_tokens", IntRange(0, std::numeric_limits<int64_t>::max())}}, Json::array({"cached_tokens"}))}},
      Json::array({"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}));
  schemas["ChatCompletion"] =
      Object({{"id", Type("string")},
              {"object", {{"const", "chat.completion"}}},
              {"created", Type("integer")},
              {"model", Type("string")},
              {"choices", ArrayOf(Object({{"index", IntRange(0, std::numeric_limits<int32_t>::max())},
                                          {"message", Object({{"role", {{"const", "assistant"}}},
                                                              {"content", Nullable(Type("string"))},
                                                              {"reasoning_content", Nullable(Type("string"))},
                                                              {"tool_calls", ArrayOf(Ref("ToolCall"))}},
                                                             Json::array({"role", "content"}))},
                                          {"logprobs", Nullable(Ref("ChatLogprobs"))},
                                          {"finish_reason", FinishReasonSchema()}},
                                         Json::array({"index", "message", "logprobs", "finish_reason"})))},
              {"usage", Ref("Usage")}},
             Json::array({"id", "object", "created", "model", "choices", "usage"}));
  schemas["Completion"] =
      Object({{"id", Type("string")},
              {"object", {{"const", "text_completion"}}},
              {"created", Type("integer")},
              {"model", Type("string")},
              {"choices", ArrayOf(Object({{"index", IntRange(0, std::numeric_limits<int32_t>::max())},
                                          {"text", Type("string")},
                                          {"logprobs", Nullable(Ref("CompletionLogprobs"))},
                                          {"finish_reason", FinishReasonSchema()}},
                                         Json::array({"index", "text", "logprobs", "finish_reason"})))},
              {"usage", Ref("Usage")}},
             Json::array({"id", "object", "created", "model", "choices", "usage"}));
  schemas["Model"] = Object({{"id", Type("string")},
                             {"object", {{"const", "model"}}},
                             {"created", Type("integer")},
                             {"owned_by", Type("string")},
                             {"max_model_len", Type("integer")}},
                            Json::array({"id", "object", "created", "owned_by"}));
  schemas["ModelList"] =
      Object({{"object", {{"const", "list"}}}, {"data", ArrayOf(Ref("Model"))}}, Json::array({"object", "data"}));
  schemas["TokenizeRequest"] =
      Object({{"model", Nullable(Type("string"))},
              {"prompt", Type("string")},
              {"messages", ArrayOf(Ref("ChatMessage"))},
              {"tools", Nullable(ArrayOf(Ref("Tool")))},
              {"chat_template_kwargs", Nullable(Object({{"thinking", Nullable(Type("boolean"))}}))},
              {"add_special_tokens", Nullable(Type("boolean"))},
              {"return_token_strs", Nullable(Type("boolean"))}});
  schemas["TokenizeResponse"] = Object({{"count", IntRange(0, std::numeric_limits<int64_t>::max())},
                                        {"max_model_len", Type("integer")},
                                        {"tokens", ArrayOf(IntRange(0, std::numeric_limits<int32_t>::max()))},
                                        {"token_strs", Nullable(ArrayOf(Type("string")))}},
                                       Json::array({"count", "max_model_len", "tokens", "token_strs"}));
  schemas["DetokenizeRequest"] = Object(
      {{"model", Nullable(Type("string"))},
       {"tokens", ArrayOf(IntRange(0, static_cast<int64_t>(model.tokenizer ? model.tokenizer->size() : 1) - 1))}},
      Json::array({"tokens"}));
  schemas["DetokenizeResponse"] = Object({{"prompt", Type("string")}}, Json::array({"prompt"}));
  schemas["Health"] = Object({{"status", {{"type", "string"}, {"enum", Json::array({"ok", "shutting_down"})}}},
                              {"model", Type("string")},
                              {"vocab_size", Type("integer")},
                              {"max_model_len", Type("integer")},
                              {"running", Type("integer")},
                              {"waiting", Type("integer")},
                              {"kv_pages_in_use", Type("integer")},
                              {"kv_used_bytes", Type("integer")},
                              {"kv_budget_bytes", Type("integer")},
                              {"prefix_cache_blocks", Type("integer")}},
                             Json::array({"status", "model", "running", "waiting", "kv_pages_in_use"}));

  auto generation = [&](const char* summary, const char* request, const char* response) {
    Json content = JsonContent(Ref(response));
    content["text/event-stream"] = {
        {"schema", {{"type", "string"}, {"description", "with stream: SSE chunks, then data: [DONE]"}}}};
    Json responses = {
        {"200",
         {{"description", "the completion (JSON), or its chunks (SSE) when stream is true"}, {"content", content}}},
        {"400", ErrorResponse("invalid request: the message names the field")},
        {"401", ErrorResponse("missing or wrong API key")},
        {"404", ErrorResponse("unknown model")},
        {"413", ErrorResponse("body over the size limit")},
        {"429", ErrorResponse("the server is at capacity; see Retry-After")},
        {"500", ErrorResponse("generation failed")},
        {"503", ErrorResponse("shutting down")},
    };
    Json op = Operation(summary, responses, true, api_key);
    op["requestBody"] = {{"required", true}, {"content", JsonContent(Ref(request))}};
    return op;
  };
  auto post_json = [&](const char* summary, const char* request, const char* response) {
    Json op = Operation(summary,
                        {{"200", {{"description", "OK"}, {"content", JsonContent(Ref(response))}}},
                         {"400", ErrorResponse("invalid request")},
                         {"401", ErrorResponse("missing or wrong API key")},
                         {"404", ErrorResponse("unknown model")},
                         {"413", ErrorResponse("body over the size limit")}},
                        true, api_key);
    op["requestBody"] = {{"required", true}, {"content", JsonContent(Ref(request))}};
    return op;
  };
  auto text = [](const char* type) { return Json{{type, {{"schema", {{"type", "string"}}}}}}; };

  Json paths = {
      {"/",
       {{"get", Operation("the chat page", {{"200", {{"description", "HTML"}, {"content", text("text/html")}}}}, false,
                          api_key)}}},
      {"/health",
       {{"get", Operation("liveness and load",
                          {{"200", {{"description", "serving"}, {"content", JsonContent(Ref("Health"))}}},
                           {"503", {{"description", "shutting down"}, {"content", JsonContent(Ref("Health"))}}}},
                          false, api_key)}}},
      {"/metrics",
       {{"get", Operation("Prometheus metrics",
                          {{"200", {{"description", "text exposition format 0.0.4"}, {"content", text("text/plain")}}}},
                          false, api_key)}}},
      {"/openapi.json",
       {{"get", Operation("this document",
                          {{"200", {{"description", "OpenAPI 3.1"}, {"content", JsonContent(Type("object"))}}}}, false,
                          api_key)}}},
      {"/v1/models",
       {{"get", Operation("the served model",
                          {{"200", {{"description", "OK"}, {"content", JsonContent(Ref("ModelList"))}}},
                           {"401", ErrorResponse("missing or wrong API key")}},
                          true, api_key)}}},
      {"/v1/models/{model}",
       {{"get",
         [&] {
           Json op = Operation("one model",
                               {{"200", {{"description", "OK"}, {"content", JsonContent(Ref("Model"))}}},
                                {"401", ErrorResponse("missing or wrong API key")},
                                {"404", ErrorResponse("unknown model")}},
                               true, api_key);
           op["parameters"] = Json::array({{{"name", "model"},
                                            {"in", "path"},
                                            {"required", true},
                                            {"schema", {{"type", "string"}, {"minLength", 1}}}}});
           return op;
         }()}}},
      {"/v1/chat/completions", {{"post", generation("chat completion", "ChatCompletionRequest", "ChatCompletion")}}},
      {"/v1/completions", {{"post", generation("text completion", "CompletionRequest", "Completion")}}},
      {"/tokenize",
       {{"post", post_json("tokenize text or chat messages (vLLM's shape)", "TokenizeRequest", "TokenizeResponse")}}},
      {"/detokenize",
       {{"post", post_json("token ids to text (vLLM's shape)", "DetokenizeRequest", "DetokenizeResponse")}}},
      {"/reset_prefix_cache",
       {{"post", Operation("drop every prefix-cache entry",
                           {{"200",
                             {{"description", "OK"},
                              {"content", JsonContent(Object({{"status", Type("string")}}, Json::array({"status"})))}}},
                            {"401", ErrorResponse("missing or wrong API key")}},
                           true, api_key)}}},
  };
  Json doc = {
      {"openapi", "3.1.0"},
      {"info", {{"title", "deepinfer"}, {"version", "1"}, {"description", "OpenAI-compatible API of deepinfer serve"}}},
      {"paths", std::move(paths)},
      {"components", {{"schemas", std::move(schemas)}}}};
  if (api_key) doc["components"]["securitySchemes"] = {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}};
  return DumpJson(doc);
}

}  // namespace deepinfer
