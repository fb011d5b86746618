#include "cli/generate_command.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "backend/cpu_backend.h"
#include "chat/chat_encoding.h"
#include "chat/structured_output.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "cli/isa_flag.h"
#include "cli/model_loading.h"
#include "cli/sampling_flags.h"
#include "cli/speculative_flag.h"
#include "cli/weight_layout_flag.h"
#include "core/bounded_json.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "core/npy.h"
#include "core/regular_file.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_conditions.h"
#include "model/model.h"
#include "structured/token_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

// --n: choices run as one batch (OpenAI allows up to 128).
constexpr int64_t kMaxChoices = 128;

struct GenerateOptions {
  std::string model;  // empty: the embedded default
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  int64_t max_tokens = -1;
  SamplingParams sampling;  // greedy unless --temperature
  uint64_t seed = 0;
  int threads = 0;
  std::optional<IsaLevel> isa;
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  int64_t max_context = 0;
  std::string dump_logits;
  bool show_ids = false;
  bool ignore_eos = false;
  // Structured output (at most one), compiled by the server's front door.
  std::string json_schema;  // a file
  bool json_object = false;
  std::optional<std::string> regex;   // may be empty (the empty output)
  std::optional<std::string> choice;  // "a,b,c"
  std::string tools;                  // a file with OpenAI tools, for --chat and --tool-choice
  std::string tool_choice;
  bool thinking = false;
  int64_t n = 1;
  bool jsonl = false;
  bool speculative = false;
  int speculative_length = 0;
  std::string dump_draft;
};

const std::vector<Flag<GenerateOptions>>& GenerateFlags() {
  static const std::vector<Flag<GenerateOptions>> flags = WithSamplingFlags<GenerateOptions>({
      {"--model", "DIR", kModelFlagHelp, [](GenerateOptions& o, const std::string& v) { o.model = v; }},
      {"--prompt-ids", "1,2,3", "prompt as comma-separated token ids",
       [](GenerateOptions& o, const std::string& v) { o.prompt_ids = v; }},
      {"--prompt", "TEXT", "prompt text (tokenized with the model's tokenizer.json)",
       [](GenerateOptions& o, const std::string& v) { o.prompt = v; }},
      {"--chat", nullptr, "wrap --prompt as one user turn in the V4.1 chat format",
       [](GenerateOptions& o, const std::string&) { o.chat = true; }},
      {"--max-tokens", "N", "number of tokens to generate (required)",
       [](GenerateOptions& o, const std::string& v) {
         o.max_tokens = ParseIntFlag("--max-tokens", v, 0, kMaxTokensFlag);
       }},
      {"--seed", "S", "sampling seed (default 0)",
       [](GenerateOptions& o, const std::string& v) { o.seed = ParseSeedFlag("--seed", v); }},
      {"--threads", "N", "worker threads (default: all cores; at most 4 per hardware thread)",
       [](GenerateOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<GenerateOptions>(),
      KernelPlanFlag<GenerateOptions>(),
      WeightLayoutFlag<GenerateOptions>(),
      {"--max-context", "N", "maximum sequence length (default: the model's max_position_embeddings)",
       [](GenerateOptions& o, const std::string& v) {
         o.max_context = ParseIntFlag("--max-context", v, 0, kMaxTokensFlag);
       }},
      {"--dump-logits", "FILE.npy",
       "write fp32 logits, one row per prompt position then one per generated token fed back",
       [](GenerateOptions& o, const std::string& v) { o.dump_logits = v; }},
      SpeculativeFlag<GenerateOptions>(),
      SpeculativeLengthFlag<GenerateOptions>(),
      {"--dump-draft", "FILE.npy",
       "with --speculative dspark: write every draft's fp32 logits (Markov bias included), [drafts x block, vocab]",
       [](GenerateOptions& o, const std::string& v) { o.dump_draft = v; }},
      {"--show-ids", nullptr, "also print the generated token ids",
       [](GenerateOptions& o, const std::string&) { o.show_ids = true; }},
      {"--ignore-eos", nullptr, "keep generating after the end-of-sentence token",
       [](GenerateOptions& o, const std::string&) { o.ignore_eos = true; }},
      {"--json-schema", "FILE", "structured output: a JSON document valid under the JSON Schema in FILE",
       [](GenerateOptions& o, const std::string& v) { o.json_schema = v; }},
      {"--json-object", nullptr, "structured output: any JSON object",
       [](GenerateOptions& o, const std::string&) { o.json_object = true; }},
      {"--regex", "R", "structured output: text matching the regular expression R as a whole",
       [](GenerateOptions& o, const std::string& v) { o.regex = v; }},
      {"--choice", "A,B,C", "structured output: exactly one of the comma-separated strings",
       [](GenerateOptions& o, const std::string& v) { o.choice = v; }},
      {"--tools", "FILE", "OpenAI tools (a JSON array) listed in the --chat prompt",
       [](GenerateOptions& o, const std::string& v) { o.tools = v; }},
      {"--tool-choice", "required|NAME", "force a DSML tool call: any of --tools, or the named function",
       [](GenerateOptions& o, const std::string& v) { o.tool_choice = v; }},
      {"--thinking", nullptr, "--chat in thinking mode (structured output starts after </think>)",
       [](GenerateOptions& o, const std::string&) { o.thinking = true; }},
      {"--logit-bias", "ID:B,...", "add B to the logit of token ID (OpenAI logit_bias)",
       [](GenerateOptions& o, const std::string& v) {
         for (size_t start = 0; start < v.size();) {
           const size_t comma = std::min(v.find(',', start), v.size());
           const std::string item = v.substr(start, comma - start);
           const size_t colon = item.find(':');
           if (colon == std::string::npos) throw MakeError("--logit-bias: expected ID:BIAS, got '", item, "'");
           const int64_t id = ParseIntFlag("--logit-bias", item.substr(0, colon), 0, INT32_MAX);
           o.sampling.logit_bias[static_cast<int32_t>(id)] =
               static_cast<float>(ParseRealFlag("--logit-bias", item.substr(colon + 1)));
           start = comma + 1;
         }
       }},
      {"--n", "N", "sample N choices (seeds S, S+1, ...), run as one batch",
       [](GenerateOptions& o, const std::string& v) { o.n = ParseIntFlag("--n", v, 1, kMaxChoices); }},
      {"--jsonl", nullptr,
       "print one JSON object per choice ({\"index\", \"text\", \"finish_reason\", \"tokens\", \"error\"}) "
       "instead of streaming text",
       [](GenerateOptions& o, const std::string&) { o.jsonl = true; }},
  });
  return flags;
}

GenerateOptions ParseGenerateOptions(const std::vector<std::string>& args) {
  GenerateOptions options;
  ParseFlags("generate", args, GenerateFlags(), options);
  if (options.max_tokens < 0) throw MakeError("generate: --max-tokens N is required (N >= 0)");
  if (options.prompt_ids.empty() == options.prompt.empty()) {
    throw MakeError("generate: give exactly one of --prompt-ids and --prompt");
  }
  if (options.chat && options.prompt.empty()) throw MakeError("generate: --chat applies to --prompt text");
  if (options.thinking && !options.chat) throw MakeError("generate: --thinking applies to --chat prompts");
  if (!options.tools.empty() && !options.chat && options.tool_choice.empty()) {
    throw MakeError("generate: --tools is listed in --chat prompts or forced with --tool-choice");
  }
  if (!options.tool_choice.empty() && options.tools.empty()) throw MakeError("generate: --tool-choice needs --tools");
  const int sources = !options.json_schema.empty() + options.json_object + options.regex.has_value() +
                      options.choice.has_value() + !options.tool_choice.empty();
  if (sources > 1) {
    throw MakeError("generate: give at most one of --json-schema, --json-object, --regex, --choice and --tool-choice");
  }
  if (options.n > 1 && !options.jsonl) throw MakeError("generate: --n > 1 prints its choices with --jsonl");
  if (!options.dump_draft.empty() && !options.speculative) {
    throw MakeError("generate: --dump-draft needs --speculative dspark");
  }
  if (options.speculative_length > 0 && !options.speculative) {
    throw MakeError("generate: --speculative-length needs --speculative dspark");
  }
  return options;
}

// A JSON file named by a flag (a schema, a tools list), read and parsed within the limits of a
// chat request, since these flags stand for request fields.
nlohmann::ordered_json ReadJsonFile(const std::string& flag, const std::string& path) {
  try {
    return ParseOrderedJsonBounded(ReadRegularFile(path, kChatJsonLimits.max_bytes), path, kChatJsonLimits);
  } catch (const Error& e) {
    throw MakeError(flag, ": ", e.what());
  }
}

// The OpenAI request fields the structured-output flags stand for; null when none is given.
nlohmann::ordered_json StructuredOutputRequest(const GenerateOptions& o) {
  nlohmann::ordered_json request = nlohmann::ordered_json::object();
  if (!o.json_schema.empty()) {
    request["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", o.json_schema}, {"schema", ReadJsonFile("--json-schema", o.json_schema)}}}};
  }
  if (o.json_object) request["structured_outputs"] = {{"json_object", true}};
  if (o.regex) request["guided_regex"] = *o.regex;
  if (o.choice) {
    nlohmann::ordered_json choices = nlohmann::ordered_json::array();
    for (size_t start = 0;;) {
      const size_t comma = o.choice->find(',', start);
      choices.push_back(o.choice->substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    request["guided_choice"] = choices;
  }
  if (!o.tool_choice.empty()) {
    request["tools"] = ReadJsonFile("--tools", o.tools);
    request["tool_choice"] =
        o.tool_choice == "required"
            ? nlohmann::ordered_json("required")
            : nlohmann::ordered_json{{"type", "function"}, {"function", {{"name", o.tool_choice}}}};
  }
  return request;
}

// The flag a front-door field came from, for messages.
std::string FlagOf(const std::string& field) {
  if (field == "response_format") return "--json-schema";
  if (field == "structured_outputs") return "--json-object";
  if (field == "guided_regex") return "--regex";
  if (field == "guided_choice") return "--choice";
  if (field == "tool_choice" || field == "tools" || field == "parallel_tool_calls") return "--tool-choice";
  return field;
}

std::vector<int32_t> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  for (int64_t id : ParseIntListFlag("--prompt-ids", text, 0, INT32_MAX)) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

}  // namespace

int RunGenerateCommand(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    std::cout << "usage: deepinfer generate [flags]   (sampling: greedy unless --temperature)\n";
    PrintFlagHelp(std::cout, GenerateFlags());
    return 0;
  }
  const GenerateOptions options = ParseGenerateOptions(args);
  const IsaLevel isa = ChooseIsaFlag(options.isa);  // before the model loads, like the id list
  const Bf16Dot plan = ChooseKernelPlanFlag(options.kernel_plan, isa);
  // Before the model loads, so that a bad id list fails at once.
  std::vector<int32_t> prompt = options.prompt_ids.empty() ? std::vector<int32_t>() : ParseIdList(options.prompt_ids);
  const std::string model_dir = ModelDirOrDefault(options.model);
  ModelOptions model_options;
  model_options.max_context = options.max_context;
  const std::unique_ptr<Model> model = LoadModelAndPageIn(model_dir, model_options, isa, plan, options.weight_layout);
  const std::optional<Tokenizer> tokenizer = Tokenizer::FromModelDirectory(ModelDirectory(model_dir));

  if (!options.prompt.empty()) {
    if (!tokenizer) throw MakeError(model_dir, ": --prompt needs tokenizer.json in the model directory");
    if (options.chat) {
      ChatMessage user;
      user.role = "user";
      user.content = options.prompt;
      ChatOptions chat;
      chat.thinking = options.thinking;
      if (!options.tools.empty()) chat.tools = ReadJsonFile("--tools", options.tools);
      prompt = tokenizer->Encode(RenderChatPrompt({user}, chat));
    } else {
      prompt = tokenizer->EncodeTextPrompt(options.prompt);
    }
  }
  if (prompt.empty()) throw MakeError("generate: the prompt is empty");
  for (int32_t id : prompt) {
    if (id >= model->config().vocab_size) {
      throw MakeError("generate: prompt token id ", id, " is outside the model's vocabulary of ",
                      model->config().vocab_size, " (it only knows ids below ", model->config().vocab_size,
                      "; use --prompt-ids or another --model)");
    }
  }

  std::shared_ptr<const Constraint> constraint;
  if (const nlohmann::ordered_json structured = StructuredOutputRequest(options); !structured.empty()) {
    if (!tokenizer) throw MakeError(model_dir, ": structured output needs tokenizer.json in the model directory");
    try {
      constraint = CompileStructuredOutput(structured, TokenVocabulary::FromTokenizer(*tokenizer),
                                           {.thinking = options.thinking});
    } catch (const StructuredOutputError& e) {
      // The message starts with the request field the flag stands for; name the flag instead.
      const std::string message = e.what();
      const std::string prefix = e.field() + ": ";
      throw MakeError("generate: ", FlagOf(e.field()), ": ",
                      message.starts_with(prefix) ? message.substr(prefix.size()) : message);
    }
  }

  ThreadPool pool(options.threads);
  const size_t vocab = model->config().vocab_size;
  const bool dump = !options.dump_logits.empty();
  CpuBackend backend(pool, isa, plan);
  EngineOptions engine_options;
  engine_options.speculative = options.speculative;
  engine_options.speculative_length = options.speculative_length;
  Engine engine(*model, ComputeContext{backend}, engine_options, tokenizer ? &*tokenizer : nullptr);
  std::vector<RequestId> choices;
  for (int64_t i = 0; i < options.n; ++i) {
    RequestParams request{.prompt = prompt, .sampling = options.sampling, .seed = options.seed + i};
    request.stop.max_tokens = options.max_tokens;
    request.stop.ignore_eos = options.ignore_eos;
    // Structured output prints the document alone, without the end-of-sentence token's text.
    request.stop.skip_special_tokens = constraint != nullptr;
    request.stop.include_stop_string_in_output = constraint == nullptr;
    request.return_logits = dump;
    request.return_draft_logits = !options.dump_draft.empty();
    request.constraint = constraint;
    choices.push_back(engine.Add(std::move(request)));
  }

  struct Choice {
    std::string text;
    int64_t tokens = 0;
    FinishReason finish = FinishReason::kNone;
    std::string error;
  };
  std::map<RequestId, Choice> results;
  std::vector<float> dumped, drafts;
  std::vector<int32_t> generated;
  while (!engine.idle()) {
    for (const RequestUpdate& update : engine.Step()) {
      Choice& choice = results[update.id];
      for (const GeneratedToken& t : update.tokens) generated.push_back(t.token);
      choice.tokens += static_cast<int64_t>(update.tokens.size());
      drafts.insert(drafts.end(), update.draft_logits.begin(), update.draft_logits.end());
      choice.text += update.text;
      if (update.finished()) choice.finish = update.finish, choice.error = update.error;
      if (options.jsonl) continue;
      // Whole UTF-8 characters only, however the bytes split across tokens.
      std::cout << update.text << std::flush;
      dumped.insert(dumped.end(), update.logits.begin(), update.logits.end());
      if (update.finish == FinishReason::kError) throw MakeError("generate: ", update.error);
    }
  }
  if (options.speculative) {
    const SpeculationStats& spec = engine.stats().speculation;
    std::fprintf(stderr,
                 "speculative (DSpark): %llu verify steps, mean accepted length %.3f (bonus included), %llu of %llu "
                 "drafts accepted; draft %.3f s, verify %.3f s; accepted/verified by draft position:",
                 static_cast<unsigned long long>(spec.verify_steps), spec.mean_accepted_length(),
                 static_cast<unsigned long long>(spec.accepted_tokens),
                 static_cast<unsigned long long>(spec.drafted_tokens), spec.draft_seconds, spec.verify_seconds);
    for (size_t i = 0; i < spec.verified_at.size(); ++i) {
      std::fprintf(stderr, " %llu/%llu", static_cast<unsigned long long>(spec.accepted_at[i]),
                   static_cast<unsigned long long>(spec.verified_at[i]));
    }
    std::fprintf(stderr, "\n");
  }
  if (!options.dump_draft.empty()) {
    WriteNpyFloat32(options.dump_draft, {drafts.size() / vocab, vocab}, drafts.data());
  }
  if (options.jsonl) {
    bool failed = false;
    for (size_t i = 0; i < choices.size(); ++i) {
      const Choice& c = results[choices[i]];
      nlohmann::ordered_json line = {{"index", i},
                                     {"text", c.text},
                                     {"finish_reason", std::string(OpenAiFinishReason(c.finish))},
                                     {"tokens", c.tokens}};
      if (!c.error.empty()) line["error"] = c.error;
      failed |= c.finish == FinishReason::kError;
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    return failed ? 1 : 0;
  }
  if (tokenizer) std::cout << "\n";
  if (options.show_ids || !tokenizer) {
    std::cout << "ids:";
    for (int32_t id : generated) std::cout << " " << id;
    std::cout << "\n";
  }
  if (dump) WriteNpyFloat32(options.dump_logits, {dumped.size() / vocab, vocab}, dumped.data());
  return 0;
}

}  // namespace deepinfer
