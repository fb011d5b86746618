// Request side of openai_api.h: JSON body -> validated Engine requests.
#include <cmath>
#include <ctime>
#include <limits>
#include <random>

#include "chat/chat_encoding.h"
#include "chat/structured_output.h"
#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

constexpr int64_t kMaxChoices = 128;  // n, as OpenAI
constexpr int64_t kMaxPrompts = 256;  // completion prompts in one request
constexpr int32_t kMaxLogprobs = 20;  // top_logprobs / logprobs, as OpenAI's chat
constexpr size_t kMaxStopStrings = 64;
constexpr size_t kMaxStopTokenIds = 1024;
constexpr double kMaxLogitBias = 100.0;  // OpenAI's range

std::string Describe(const Json& value) {
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number()) {
    std::string text = value.dump();
    return text.size() > 32 ? text.substr(0, 32) + "..." : text;
  }
  return std::string("a ") + value.type_name();
}

ApiError TypeError(const std::string& param, std::string_view expected, const Json& got) {
  return InvalidRequest(param, param + ": expected " + std::string(expected) + ", got " + Describe(got),
                        "invalid_type");
}

// Typed, range-checked reads of one object's fields. JSON null reads as absent, as OpenAI does.
class Fields {
 public:
  Fields(const Json& object, std::string prefix = "") : object_(object), prefix_(std::move(prefix)) {}

  const Json* Get(const char* name) const {
    const auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string Name(const char* name) const { return prefix_ + name; }

  std::optional<bool> Bool(const char* name) const {
    const Json* v = Get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw TypeError(Name(name), "true or false", *v);
    return v->get<bool>();
  }

  std::optional<int64_t> Integer(const char* name, int64_t lo, int64_t hi) const {
    const Json* v = Get(name);
    if (!v) return std::nullopt;
    return ReadInteger(*v, Name(name), lo, hi);
  }

  std::optional<double> Number(const char* name, double lo, double hi, bool lo_open = false) const {
    const Json* v = Get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw TypeError(Name(name), "a number", *v);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
      throw InvalidRequest(Name(name), Name(name) + ": expected a number in " + (lo_open ? "(" : "[") + Fmt(lo) + ", " +
                                           Fmt(hi) + "], got " + Describe(*v));
    }
    return x;
  }

  std::optional<std::string> String(const char* name) const {
    const Json* v = Get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw TypeError(Name(name), "a string", *v);
    return v->get<std::string>();
  }

  const Json* Object(const char* name) const {
    const Json* v = Get(name);
    if (v && !v->is_object()) throw TypeError(Name(name), "an object", *v);
    return v;
  }

  const Json* Array(const char* name) const {
    const Json* v = Get(name);
    if (v && !v->is_array()) throw TypeError(Name(name), "an array", *v);
    return v;
  }

  static int64_t ReadInteger(const Json& v, const std::string& param, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) throw TypeError(param, "an integer", v);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw InvalidRequest(
          param, param + ": " + v.dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) {
      throw InvalidRequest(param, param + ": expected an integer in [" + std::to_string(lo) + ", " +
                                      std::to_string(hi) + "], got " + std::to_string(x));
    }
    return x;
  }

 private:
  static std::string Fmt(double x) {
    std::string text = std::to_string(x);
    while (text.size() > 1 && text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
    return text;
  }

  const Json& object_;
  std::string prefix_;
};

void RequireObject(const Json& body) {
  if (!body.is_object()) {
    throw InvalidRequest("", std::string("the request body must be a JSON object, got ") + body.type_name(),
                         "invalid_type");
  }
}

void Refuse(const std::string& param, const std::string& why) {
  throw InvalidRequest(param, param + ": " + why, "unsupported_parameter");
}

// Fields both endpoints share: sampling, stop conditions, n, stream.
void ParseCommon(const Fields& f, const ModelInfo& model, GenerationRequest& r) {
  SamplingParams& s = r.params.sampling;
  StopParams& stop = r.params.stop;
  s.temperature = static_cast<float>(f.Number("temperature", 0.0, 2.0).value_or(1.0));
  s.top_p = static_cast<float>(f.Number("top_p", 0.0, 1.0, /*lo_open=*/true).value_or(1.0));
  // vLLM: -1 (or 0) turns top-k off.
  const int64_t top_k = f.Integer("top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0);
  s.top_k = static_cast<int32_t>(std::max<int64_t>(top_k, 0));
  s.min_p = static_cast<float>(f.Number("min_p", 0.0, 1.0).value_or(0.0));
  s.presence_penalty = static_cast<float>(f.Number("presence_penalty", -2.0, 2.0).value_or(0.0));
  s.frequency_penalty = static_cast<float>(f.Number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  s.repetition_penalty = static_cast<float>(f.Number("repetition_penalty", 0.0, 100.0, true).value_or(1.0));
  if (const Json* bias = f.Object("logit_bias")) {
    for (const auto& [key, value] : bias->items()) {
      const std::string param = "logit_bias." + key;
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id >= model.vocab_size) {
        throw InvalidRequest("logit_bias", "logit_bias: key \"" + key.substr(0, 32) +
                                               "\" is not a token id of this model (0.." +
                                               std::to_string(model.vocab_size - 1) + ")");
      }
      if (!value.is_number()) throw TypeError(param, "a number", value);
      const double b = value.get<double>();
      if (!std::isfinite(b) || b < -kMaxLogitBias || b > kMaxLogitBias) {
        throw InvalidRequest("logit_bias", param + ": expected a number in [-100, 100], got " + Describe(value));
      }
      s.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(b);
    }
  }
  if (const auto seed = f.Integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    r.params.seed = static_cast<uint64_t>(*seed);
  }
  if (const Json* v = f.Get("stop")) {
    std::vector<std::string> stops;
    if (v->is_string()) {
      stops.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStopStrings) {
        throw InvalidRequest("stop", "stop: at most " + std::to_string(kMaxStopStrings) + " stop strings, got " +
                                         std::to_string(v->size()));
      }
      for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string()) throw TypeError("stop[" + std::to_string(i) + "]", "a string", (*v)[i]);
        stops.push_back((*v)[i].get<std::string>());
      }
    } else {
      throw TypeError("stop", "a string or an array of strings", *v);
    }
    for (size_t i = 0; i < stops.size(); ++i) {
      if (stops[i].empty()) throw InvalidRequest("stop", "stop: stop strings must not be empty");
    }
    stop.stop = std::move(stops);
  }
  if (const Json* ids = f.Array("stop_token_ids")) {
    if (ids->size() > kMaxStopTokenIds) throw InvalidRequest("stop_token_ids", "stop_token_ids: too many ids");
    for (size_t i = 0; i < ids->size(); ++i) {
      stop.stop_token_ids.push_back(static_cast<int32_t>(
          Fields::ReadInteger((*ids)[i], "stop_token_ids[" + std::to_string(i) + "]", 0, model.vocab_size - 1)));
    }
  }
  stop.ignore_eos = f.Bool("ignore_eos").value_or(false);
  stop.skip_special_tokens = f.Bool("skip_special_tokens").value_or(true);
  stop.include_stop_string_in_output = f.Bool("include_stop_str_in_output").value_or(false);
  // Extension: false opts this request out of speculative decoding (serve --speculative dspark).
  r.params.speculative = f.Bool("speculative").value_or(true);
  r.n = static_cast<int>(f.Integer("n", 1, kMaxChoices).value_or(1));
  r.stream = f.Bool("stream").value_or(false);
  if (const Json* options = f.Object("stream_options")) {
    if (!r.stream) Refuse("stream_options", "only allowed when stream is true");
    r.include_usage = Fields(*options, "stream_options.").Bool("include_usage").value_or(false);
  }
  if (const auto min_tokens = f.Integer("min_tokens", 0, std::numeric_limits<int64_t>::max());
      min_tokens && *min_tokens > 0) {
    Refuse("min_tokens", "not supported by this server");
  }
  if (f.Get("prompt_logprobs")) Refuse("prompt_logprobs", "not supported by this server");
  if (const auto best_of = f.Integer("best_of", 1, kMaxChoices); best_of && *best_of > 1) {
    Refuse("best_of", "not supported by this server (use n)");
  }
  (void)f.String("user");
}

// Structured output (response_format, vLLM's structured_outputs / guided_*, a forced tool call):
// compiled here, on the HTTP thread, so that the engine thread only applies the masks.
void Constrain(const Json& body, const ModelInfo& model, const StructuredOutputOptions& options, GenerationRequest& r) {
  try {
    r.params.constraint = CompileStructuredOutput(body, model.vocabulary, options);
  } catch (const StructuredOutputError& e) {
    throw InvalidRequest(e.field(), e.what());
  }
  if (r.params.constraint && r.params.stop.ignore_eos) {
    throw InvalidRequest("ignore_eos",
                         "ignore_eos: cannot be combined with structured output (the output ends with the "
                         "end-of-sentence token once the document is complete)");
  }
}

// Applies the context limit and the default max_tokens, once the prompt lengths are known.
void ApplyLengthLimits(const ModelInfo& model, GenerationRequest& r, const char* length_field,
                       std::optional<int64_t> max_tokens, int64_t default_max_tokens, const char* prompt_field) {
  int64_t longest = 0;
  for (const std::vector<int32_t>& p : r.prompts) longest = std::max<int64_t>(longest, p.size());
  const int64_t limit = model.max_model_len;
  if (longest >= limit) {
    throw InvalidRequest(prompt_field,
                         "This model's maximum context length is " + std::to_string(limit) +
                             " tokens. However, your prompt has " + std::to_string(longest) +
                             " tokens, which leaves no room for a completion. Please reduce the length of the prompt.",
                         "context_length_exceeded");
  }
  if (max_tokens && longest + *max_tokens > limit) {
    throw InvalidRequest(length_field,
                         "This model's maximum context length is " + std::to_string(limit) +
                             " tokens. However, you requested " + std::to_string(longest + *max_tokens) + " tokens (" +
                             std::to_string(longest) + " in the prompt, " + std::to_string(*max_tokens) +
                             " for the completion). Please reduce the length of the prompt or " + length_field + ".",
                         "context_length_exceeded");
  }
  r.params.stop.max_tokens = max_tokens ? *max_tokens : std::min(default_max_tokens, limit - longest);
}

// Token ids must be ones the model has; the tokenizer may know more (a model smaller than it).
void CheckVocabulary(const std::vector<int32_t>& prompt, const ModelInfo& model, const std::string& param) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= model.vocab_size) {
      throw InvalidRequest(
          param, param + ": token " + std::to_string(i) + " has id " + std::to_string(prompt[i]) +
                     ", outside this model's vocabulary of " + std::to_string(model.vocab_size) + " ids" +
                     (prompt[i] >= 0 && model.tokenizer && static_cast<size_t>(prompt[i]) < model.tokenizer->size()
                          ? " (the model's vocabulary does not cover its tokenizer, so it cannot "
                            "take this text)"
                          : ""));
    }
  }
}

// Refuses text that cannot fit before spending time tokenizing it.
void CheckTextLength(std::string_view text, const ModelInfo& model, const char* param) {
  const size_t at_least = (text.size() + model.max_token_bytes - 1) / model.max_token_bytes;
  if (static_cast<int64_t>(at_least) >= model.max_model_len) {
    throw InvalidRequest(param,
                         "This model's maximum context length is " + std::to_string(model.max_model_len) +
                             " tokens. However, your prompt has at least " + std::to_string(at_least) + " tokens (" +
                             std::to_string(text.size()) + " bytes). Please reduce the length of the prompt.",
                         "context_length_exceeded");
  }
}

// A rendered chat prompt (it carries its own BOS).
std::vector<int32_t> Tokenize(std::string_view text, const ModelInfo& model, const char* param) {
  CheckTextLength(text, model, param);
  return model.tokenizer->Encode(text);
}

// A raw text prompt, as vLLM's add_special_tokens=True: BOS first where tokenizer_config.json says so.
std::vector<int32_t> TokenizeTextPrompt(std::string_view text, const ModelInfo& model, const char* param) {
  CheckTextLength(text, model, param);
  return model.tokenizer->EncodeTextPrompt(text);
}

// OpenAI's effort names and the V4.1 levels (low 25, high 50, xhigh 75, max 100, or 1..100).
// OpenAI's default "medium" maps to V4.1's default "high"; "minimal" to "low"; "none" turns
// thinking off.
ReasoningEffort ParseEffort(const Json& value, bool* thinking_off) {
  if (value.is_string()) {
    const std::string name = value.get<std::string>();
    if (name == "none") {
      *thinking_off = true;
      return std::monostate();
    }
    if (name == "minimal") return std::string("low");
    if (name == "medium") return std::string("high");
    if (name == "low" || name == "high" || name == "xhigh" || name == "max") return name;
    throw InvalidRequest("reasoning_effort", "reasoning_effort: unknown level \"" + name.substr(0, 32) +
                                                 "\" (expected none, minimal, low, medium, high, xhigh, max or an "
                                                 "integer in [1, 100])");
  }
  return static_cast<int>(Fields::ReadInteger(value, "reasoning_effort", 1, 100));
}

void ValidateTools(const Json& tools) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& tool = tools[i];
    if (!tool.is_object()) throw TypeError(where, "an object", tool);
    const Fields f(tool, where + ".");
    const auto type = f.String("type");
    if (type != "function") throw InvalidRequest(where + ".type", where + ".type: expected \"function\"");
    const Json* function = f.Object("function");
    if (!function)
      throw InvalidRequest(where + ".function", where + ".function: missing", "missing_required_parameter");
    const Fields fn(*function, where + ".function.");
    const auto name = fn.String("name");
    if (!name || name->empty()) {
      throw InvalidRequest(where + ".function.name", where + ".function.name: missing or empty",
                           "missing_required_parameter");
    }
    (void)fn.String("description");
    (void)fn.Object("parameters");
  }
}

}  // namespace

ApiError::ApiError(int status, std::string type, std::string code, std::string param, const std::string& message)
    : Error(message), status_(status), type_(std::move(type)), code_(std::move(code)), param_(std::move(param)) {}

std::string ApiError::Body() const {
  // Library messages may quote the input (nlohmann's "last read: ..."): keep the body small.
  constexpr size_t kMaxMessage = 2048;
  std::string message = what();
  if (message.size() > kMaxMessage) message = message.substr(0, kMaxMessage) + "...";
  Json error = {{"message", message},
                {"type", type_},
                {"param", param_.empty() ? Json(nullptr) : Json(param_)},
                {"code", code_.empty() ? Json(nullptr) : Json(code_)}};
  return DumpJson(Json{{"error", std::move(error)}});
}

ApiError InvalidRequest(std::string param, const std::string& message, std::string code) {
  return ApiError(400, "invalid_request_error", std::move(code), std::move(param), message);
}

ModelInfo DescribeModel(std::string name, const Tokenizer& tokenizer, int64_t vocab_size, int64_t max_model_len) {
  ModelInfo info;
  info.name = std::move(name);
  info.tokenizer = &tokenizer;
  info.vocab_size = vocab_size;
  info.max_model_len = max_model_len;
  for (size_t id = 0; id < tokenizer.size(); ++id) {
    info.max_token_bytes = std::max(info.max_token_bytes, tokenizer.TokenBytes(static_cast<int32_t>(id)).size());
  }
  info.created = static_cast<int64_t>(std::time(nullptr));
  info.vocabulary = TokenVocabulary::FromTokenizer(tokenizer);
  return info;
}

void CheckModelName(const Json& body, const ModelInfo& model) {
  const auto name = Fields(body).String("model");
  if (name && *name != model.name) {
    throw ApiError(404, "invalid_request_error", "model_not_found", "model",
                   "The model `" + name->substr(0, 256) + "` does not exist; this server serves `" + model.name + "`");
  }
}

namespace {

// What both generation endpoints read first: an object for the served model, and the fields
// they share.
GenerationRequest BeginGeneration(const Json& body, const ModelInfo& model, ApiKind kind) {
  RequireObject(body);
  CheckModelName(body, model);
  GenerationRequest r;
  r.kind = kind;
  ParseCommon(Fields(body), model, r);
  return r;
}

}  // namespace

GenerationRequest ParseChatCompletionRequest(const Json& body, const ModelInfo& model) {
  GenerationRequest r = BeginGeneration(body, model, ApiKind::kChat);
  const Fields f(body);

  const Json* messages = f.Get("messages");
  if (!messages) throw InvalidRequest("messages", "messages: required", "missing_required_parameter");
  if (!messages->is_array()) throw TypeError("messages", "an array of messages", *messages);
  if (messages->empty()) throw InvalidRequest("messages", "messages: must contain at least one message");
  ChatRequest chat;
  try {
    chat = ParseChatRequestJson(*messages);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw InvalidRequest("messages", e.what());
  }

  if (const Json* tools = f.Array("tools")) {
    ValidateTools(*tools);
    chat.options.tools = *tools;
  }
  // tool_choice "required" or a named function is a constraint (Constrain, below), which also
  // checks its shape; "none" hides the tools.
  const Json* tool_choice = f.Get("tool_choice");
  const auto is = [&](const char* mode) { return tool_choice && tool_choice->is_string() && *tool_choice == mode; };
  if (is("none")) {
    chat.options.tools = Json();  // the model is not told about them, and output is not parsed for calls
    r.tool_calls = false;
  }
  const bool forced = tool_choice && ForcesToolCall(*tool_choice);
  if (const auto parallel = f.Bool("parallel_tool_calls"); parallel && !*parallel && !forced) {
    Refuse("parallel_tool_calls",
           "false is supported with a forced tool call (tool_choice \"required\" or a named function) only; "
           "with \"auto\" the model may call several tools at once");
  }
  if (f.Get("functions") || f.Get("function_call")) {
    Refuse(f.Get("functions") ? "functions" : "function_call", "deprecated; use tools and tool_choice");
  }

  // Thinking: chat_template_kwargs.thinking (or enable_thinking), else on when reasoning_effort
  // asks for reasoning.
  std::optional<bool> thinking;
  if (const Json* kwargs = f.Object("chat_template_kwargs")) {
    const Fields k(*kwargs, "chat_template_kwargs.");
    thinking = k.Bool("thinking");
    if (!thinking) thinking = k.Bool("enable_thinking");
  }
  if (const Json* effort = f.Get("reasoning_effort")) {
    bool off = false;
    chat.options.reasoning_effort = ParseEffort(*effort, &off);
    if (!thinking) thinking = !off;
  }
  chat.options.thinking = thinking.value_or(false);
  r.thinking = chat.options.thinking;

  const auto logprobs = f.Bool("logprobs");
  const auto top_logprobs = f.Integer("top_logprobs", 0, kMaxLogprobs);
  if (top_logprobs && !logprobs.value_or(false)) {
    throw InvalidRequest("top_logprobs", "top_logprobs: requires logprobs to be true");
  }
  if (logprobs.value_or(false)) r.logprobs = static_cast<int32_t>(top_logprobs.value_or(0));

  std::string prompt;
  try {
    prompt = RenderChatPrompt(chat.messages, chat.options);
  } catch (const Error& e) {
    throw InvalidRequest("messages", e.what());
  }
  r.prompts.push_back(Tokenize(prompt, model, "messages"));
  CheckVocabulary(r.prompts.back(), model, "messages");
  auto max_tokens = f.Integer("max_tokens", 1, std::numeric_limits<int64_t>::max());
  const char* length_field = "max_tokens";
  if (const auto m = f.Integer("max_completion_tokens", 1, std::numeric_limits<int64_t>::max())) {
    max_tokens = m;
    length_field = "max_completion_tokens";
  }
  ApplyLengthLimits(model, r, length_field, max_tokens, std::numeric_limits<int64_t>::max(), "messages");
  Constrain(body, model, {.thinking = r.thinking}, r);
  return r;
}

GenerationRequest ParseCompletionRequest(const Json& body, const ModelInfo& model) {
  GenerationRequest r = BeginGeneration(body, model, ApiKind::kCompletion);
  const Fields f(body);
  if (f.Bool("echo").value_or(false)) Refuse("echo", "echo is not supported by this server");
  if (const auto suffix = f.String("suffix"); suffix && !suffix->empty()) {
    Refuse("suffix", "suffix (fill-in-the-middle) is not supported by this server");
  }
  if (const auto logprobs = f.Integer("logprobs", 0, kMaxLogprobs)) r.logprobs = static_cast<int32_t>(*logprobs);

  const Json* prompt = f.Get("prompt");
  if (!prompt) throw InvalidRequest("prompt", "prompt: required", "missing_required_parameter");
  auto ids = [&](const Json& list, const std::string& param) {
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < list.size(); ++i) {
      tokens.push_back(static_cast<int32_t>(
          Fields::ReadInteger(list[i], param + "[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max())));
    }
    return tokens;
  };
  if (prompt->is_string()) {
    r.prompts.push_back(TokenizeTextPrompt(prompt->get_ref<const std::string&>(), model, "prompt"));
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    r.prompts.push_back(ids(*prompt, "prompt"));
  } else if (prompt->is_array()) {
    if (prompt->empty()) throw InvalidRequest("prompt", "prompt: must not be empty");
    if (static_cast<int64_t>(prompt->size()) > kMaxPrompts) {
      throw InvalidRequest("prompt", "prompt: at most " + std::to_string(kMaxPrompts) + " prompts in one request");
    }
    for (size_t i = 0; i < prompt->size(); ++i) {
      const Json& item = (*prompt)[i];
      const std::string param = "prompt[" + std::to_string(i) + "]";
      if (item.is_string()) {
        r.prompts.push_back(TokenizeTextPrompt(item.get_ref<const std::string&>(), model, "prompt"));
      } else if (item.is_array()) {
        r.prompts.push_back(ids(item, param));
      } else {
        throw TypeError(param, "a string or an array of token ids", item);
      }
    }
  } else {
    throw TypeError("prompt", "a string, an array of strings, or token ids", *prompt);
  }
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const std::string param = r.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
    if (r.prompts[i].empty()) throw InvalidRequest(param, param + ": the prompt is empty");
    CheckVocabulary(r.prompts[i], model, param);
  }
  if (static_cast<int64_t>(r.prompts.size()) * r.n > kMaxChoices * 4) {
    throw InvalidRequest("n", "n x prompts: at most " + std::to_string(kMaxChoices * 4) + " choices in one request");
  }
  // OpenAI's default for completions is 16 tokens.
  ApplyLengthLimits(model, r, "max_tokens", f.Integer("max_tokens", 1, std::numeric_limits<int64_t>::max()), 16,
                    "prompt");
  // Tools belong to chat; here, as other unknown fields, they are ignored.
  Constrain(body, model, {.thinking = false, .tool_choice = false}, r);
  return r;
}

std::vector<RequestParams> ExpandChoices(const GenerationRequest& request) {
  std::vector<RequestParams> choices;
  for (const std::vector<int32_t>& prompt : request.prompts) {
    for (int i = 0; i < request.n; ++i) {
      RequestParams p = request.params;
      p.prompt = prompt;
      if (request.params.seed) p.seed = *request.params.seed + static_cast<uint64_t>(i);
      p.sampling.logprobs = request.logprobs;
      choices.push_back(std::move(p));
    }
  }
  return choices;
}

Json TokenizeResponse(const Json& body, const ModelInfo& model) {
  RequireObject(body);
  CheckModelName(body, model);
  const Fields f(body);
  std::vector<int32_t> tokens;
  if (const Json* messages = f.Get("messages")) {
    if (!messages->is_array()) throw TypeError("messages", "an array of messages", *messages);
    ChatRequest chat;
    try {
      chat = ParseChatRequestJson(*messages);
      if (const Json* tools = f.Array("tools")) {
        ValidateTools(*tools);
        chat.options.tools = *tools;
      }
      if (const Json* kwargs = f.Object("chat_template_kwargs")) {
        chat.options.thinking = Fields(*kwargs, "chat_template_kwargs.").Bool("thinking").value_or(false);
      }
      const std::string prompt = RenderChatPrompt(chat.messages, chat.options);
      tokens = Tokenize(prompt, model, "messages");
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw InvalidRequest("messages", e.what());
    }
  } else if (const auto prompt = f.String("prompt")) {
    // add_special_tokens adds nothing: the V4.1 tokenizer adds no BOS (add_bos_token false).
    (void)f.Bool("add_special_tokens");
    tokens = TokenizeTextPrompt(*prompt, model, "prompt");
  } else {
    throw InvalidRequest("prompt", "prompt: required (or messages)", "missing_required_parameter");
  }
  Json out = {{"count", tokens.size()}, {"max_model_len", model.max_model_len}, {"tokens", tokens}};
  if (f.Bool("return_token_strs").value_or(false)) {
    Json strs = Json::array();
    for (int32_t id : tokens) strs.push_back(model.tokenizer->Decode(std::span<const int32_t>(&id, 1)));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return out;
}

Json DetokenizeResponse(const Json& body, const ModelInfo& model) {
  RequireObject(body);
  CheckModelName(body, model);
  const Json* tokens = Fields(body).Array("tokens");
  if (!tokens) throw InvalidRequest("tokens", "tokens: required", "missing_required_parameter");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    ids.push_back(static_cast<int32_t>(Fields::ReadInteger((*tokens)[i], "tokens[" + std::to_string(i) + "]", 0,
                                                           static_cast<int64_t>(model.tokenizer->size()) - 1)));
  }
  return Json{{"prompt", model.tokenizer->Decode(ids)}};
}

Json ModelsResponse(const ModelInfo& model) {
  Json card = {{"id", model.name},
               {"object", "model"},
               {"created", model.created},
               {"owned_by", "deepinfer"},
               {"max_model_len", model.max_model_len}};
  return Json{{"object", "list"}, {"data", Json::array({card})}};
}

std::string RandomId(std::string_view prefix) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device device;
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[device() % (sizeof(kAlphabet) - 1)];
  return id;
}

Json ParseRequestJson(std::string_view body, const JsonLimits& limits) {
  try {
    return ParseOrderedJsonBounded(body, "the body", limits);
  } catch (const Error& e) {
    // Says where the text is bad (line, column, nesting); it never echoes the whole body.
    throw InvalidRequest("", e.what(), "invalid_json");
  }
}

std::string DumpJson(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace deepinfer
