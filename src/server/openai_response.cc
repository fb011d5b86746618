// Response side of openai_api.h: Engine events -> chat.completion / text_completion bodies and
// their streamed chunks.
#include <algorithm>
#include <cmath>
#include <map>

#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

// OpenAI reports an impossible token as -9999.0 (JSON has no -inf).
double ReportedLogprob(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

std::string Sse(const Json& event) { return "data: " + DumpJson(event) + "\n\n"; }

}  // namespace

ResponseBuilder::ResponseBuilder(const GenerationRequest& request, const ModelInfo& model, std::string id,
                                 int64_t created)
    : request_(request), model_(model), id_(std::move(id)), created_(created) {
  choices_.resize(request.prompts.size() * static_cast<size_t>(request.n));
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (request.kind == ApiKind::kChat) choices_[i].parser.emplace(request.thinking, request.tool_calls);
    choices_[i].prompt_tokens = static_cast<int64_t>(request.prompts[i / static_cast<size_t>(request.n)].size());
  }
}

ResponseBuilder::Delta ResponseBuilder::Apply(const ChoiceEvent& event) {
  Delta delta;
  Choice& c = choices_.at(event.choice);
  if (c.finish != FinishReason::kNone) return delta;  // nothing follows a finish
  const RequestUpdate& u = event.update;
  delta.first_new_call = c.tool_calls.size();
  if (!u.tokens.empty()) {
    if (!first_token_) first_token_ = event.time;
    c.generated += static_cast<int64_t>(u.tokens.size());
    c.cached_tokens = u.cached_tokens;
    if (request_.logprobs) {
      for (const GeneratedToken& t : u.tokens) {
        delta.logprobs.push_back(LogprobEntry{t.token, t.logprob.value_or(0.0f), t.top_logprobs, c.token_text_bytes});
        const int32_t id = t.token;
        c.token_text_bytes += model_.tokenizer->Decode(std::span<const int32_t>(&id, 1)).size();
      }
    }
  }
  if (c.parser) {
    delta.chat = c.parser->Feed(u.text);
    if (u.finished()) {
      ChatOutputDelta rest = c.parser->Finish();
      delta.chat.reasoning_content += rest.reasoning_content;
      delta.chat.content += rest.content;
      for (ParsedToolCall& call : rest.tool_calls) delta.chat.tool_calls.push_back(std::move(call));
    }
    c.reasoning += delta.chat.reasoning_content;
    c.text += delta.chat.content;
    for (const ParsedToolCall& call : delta.chat.tool_calls) {
      c.tool_calls.push_back(call);
      c.tool_call_ids.push_back(RandomId("call_"));
    }
  } else {
    delta.text = u.text;
    c.text += u.text;
  }
  c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  if (u.finished()) {
    c.finish = u.finish;
    ++finished_;
    if (event.rejected) {
      if (!rejection_) rejection_ = u.error;
    } else if (u.finish == FinishReason::kError || (u.finish == FinishReason::kAbort && !u.error.empty())) {
      if (!failure_) failure_ = u.error;
    }
  }
  return delta;
}

std::string ResponseBuilder::FinishReasonOf(const Choice& c) const {
  const bool stopped = c.finish == FinishReason::kStopToken || c.finish == FinishReason::kStopString;
  if (stopped && !c.tool_calls.empty()) return "tool_calls";
  return std::string(OpenAiFinishReason(c.finish));
}

Json ResponseBuilder::LogprobsJson(const std::vector<LogprobEntry>& entries) const {
  const Tokenizer& tok = *model_.tokenizer;
  auto text = [&](int32_t id) { return tok.Decode(std::span<const int32_t>(&id, 1)); };
  if (request_.kind == ApiKind::kChat) {
    auto bytes = [&](int32_t id) {
      Json list = Json::array();
      for (const unsigned char b : tok.TokenBytes(id)) list.push_back(static_cast<int>(b));
      return list;
    };
    Json content = Json::array();
    for (const LogprobEntry& e : entries) {
      Json top = Json::array();
      for (const TokenLogprob& t : e.top) {
        top.push_back({{"token", text(t.token)}, {"logprob", ReportedLogprob(t.logprob)}, {"bytes", bytes(t.token)}});
      }
      content.push_back({{"token", text(e.token)},
                         {"logprob", ReportedLogprob(e.logprob)},
                         {"bytes", bytes(e.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(), offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(text(e.token));
    token_logprobs.push_back(ReportedLogprob(e.logprob));
    Json top = Json::object();
    for (const TokenLogprob& t : e.top) top[text(t.token)] = ReportedLogprob(t.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(e.text_offset);
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(offsets)}};
}

Usage ResponseBuilder::usage() const {
  Usage u;
  for (const std::vector<int32_t>& p : request_.prompts) u.prompt_tokens += static_cast<int64_t>(p.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    u.completion_tokens += choices_[i].generated;
    // Each prompt once: what its first choice found in the prefix cache.
    if (i % static_cast<size_t>(request_.n) == 0) u.cached_tokens += choices_[i].cached_tokens;
  }
  return u;
}

Json ResponseBuilder::UsageJson() const {
  const Usage u = usage();
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json ResponseBuilder::ChunkHeader() const {
  const bool chat = request_.kind == ApiKind::kChat;
  return Json{{"id", id_},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_.name}};
}

void ResponseBuilder::Collect(const std::vector<ChoiceEvent>& events) {
  for (const ChoiceEvent& e : events) (void)Apply(e);
}

std::string ResponseBuilder::Body() const {
  const bool chat = request_.kind == ApiKind::kChat;
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = {{"index", i}};
    if (chat) {
      Json message = {{"role", "assistant"}};
      message["content"] = c.text.empty() && !c.tool_calls.empty() ? Json(nullptr) : Json(c.text);
      message["reasoning_content"] = request_.thinking ? Json(c.reasoning) : Json(nullptr);
      if (!c.tool_calls.empty()) {
        Json calls = Json::array();
        for (size_t k = 0; k < c.tool_calls.size(); ++k) {
          calls.push_back({{"id", c.tool_call_ids[k]},
                           {"type", "function"},
                           {"function", {{"name", c.tool_calls[k].name}, {"arguments", c.tool_calls[k].arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = request_.logprobs ? LogprobsJson(c.logprobs) : Json(nullptr);
    choice["finish_reason"] = FinishReasonOf(c);
    choices.push_back(std::move(choice));
  }
  Json body = {{"id", id_},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", model_.name},
               {"choices", std::move(choices)},
               {"usage", UsageJson()}};
  return DumpJson(body);
}

std::string ResponseBuilder::StreamEvents(const std::vector<ChoiceEvent>& events) {
  const bool chat = request_.kind == ApiKind::kChat;
  // One chunk per choice per call: consecutive steps' output merged (a slow reader gets fewer,
  // larger chunks), in the order the choices first appear.
  struct Merged {
    std::string reasoning, content;
    size_t first_new_call = 0, calls_end = 0;
    std::vector<LogprobEntry> logprobs;
    bool finished = false;
  };
  std::vector<size_t> order;
  std::map<size_t, Merged> merged;
  std::string out;
  const bool had_failure = failure_.has_value() || rejection_.has_value();
  for (const ChoiceEvent& e : events) {
    Delta d = Apply(e);
    auto [it, fresh] = merged.try_emplace(e.choice);
    Merged& m = it->second;
    if (fresh) {
      order.push_back(e.choice);
      m.first_new_call = d.first_new_call;
    }
    m.reasoning += d.chat.reasoning_content;
    m.content += chat ? d.chat.content : d.text;
    m.calls_end = choices_[e.choice].tool_calls.size();
    m.logprobs.insert(m.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    m.finished = choices_[e.choice].finish != FinishReason::kNone;
  }
  auto chunk = [&](Json choice) {
    Json c = ChunkHeader();
    c["choices"] = Json::array({std::move(choice)});
    if (request_.include_usage) c["usage"] = nullptr;
    out += Sse(c);
  };
  for (const size_t i : order) {
    Merged& m = merged[i];
    Choice& c = choices_[i];
    const Json logprobs = request_.logprobs && !m.logprobs.empty() ? LogprobsJson(m.logprobs) : Json(nullptr);
    if (chat) {
      Json delta = Json::object();
      if (!c.sent_role) {
        delta["role"] = "assistant";
        c.sent_role = true;
        if (m.content.empty() && m.reasoning.empty()) delta["content"] = "";
      }
      if (!m.reasoning.empty()) delta["reasoning_content"] = m.reasoning;
      if (!m.content.empty()) delta["content"] = m.content;
      if (!delta.empty() || !logprobs.is_null()) {
        chunk({{"index", i}, {"delta", std::move(delta)}, {"logprobs", logprobs}, {"finish_reason", nullptr}});
      }
      // Tool calls: the call's id and name, then its arguments as one delta.
      for (size_t k = m.first_new_call; k < m.calls_end; ++k) {
        const Json head = {{"index", k},
                           {"id", c.tool_call_ids[k]},
                           {"type", "function"},
                           {"function", {{"name", c.tool_calls[k].name}, {"arguments", ""}}}};
        chunk({{"index", i},
               {"delta", {{"tool_calls", Json::array({head})}}},
               {"logprobs", nullptr},
               {"finish_reason", nullptr}});
        const Json args = {{"index", k}, {"function", {{"arguments", c.tool_calls[k].arguments}}}};
        chunk({{"index", i},
               {"delta", {{"tool_calls", Json::array({args})}}},
               {"logprobs", nullptr},
               {"finish_reason", nullptr}});
      }
      if (m.finished) {
        chunk({{"index", i}, {"delta", Json::object()}, {"logprobs", nullptr}, {"finish_reason", FinishReasonOf(c)}});
      }
    } else {
      if (!m.content.empty() || !logprobs.is_null()) {
        chunk({{"index", i}, {"text", m.content}, {"logprobs", logprobs}, {"finish_reason", nullptr}});
      }
      if (m.finished) {
        chunk({{"index", i}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", FinishReasonOf(c)}});
      }
    }
  }
  if (!had_failure && (failure_ || rejection_)) {
    const std::string& why = rejection_ ? *rejection_ : *failure_;
    const ApiError error =
        rejection_ ? InvalidRequest("", why) : ApiError(500, "server_error", "generation_failed", "", why);
    out += "data: " + error.Body() + "\n\n";
  }
  return out;
}

std::string ResponseBuilder::StreamEnd() const {
  std::string out;
  if (request_.include_usage) {
    Json c = ChunkHeader();
    c["choices"] = Json::array();
    c["usage"] = UsageJson();
    out += Sse(c);
  }
  out += "data: [DONE]\n\n";
  return out;
}

}  // namespace deepinfer
