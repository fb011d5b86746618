#include "cli/chat_command.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "backend/cpu_backend.h"
#include "chat/chat_encoding.h"
#include "chat/output_parser.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "cli/isa_flag.h"
#include "cli/model_loading.h"
#include "cli/sampling_flags.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kNormal = "\x1b[0m";
constexpr const char* kCommands = "/reset, /system TEXT, /think on|off, /help, /exit";

struct TerminalChatOptions {
  std::string model;
  std::string system;
  bool thinking = false;
  ReasoningEffort effort;
  int64_t max_tokens = 1024;
  SamplingParams sampling{0.7f};
  std::optional<uint64_t> seed;
  int threads = 0;
  std::optional<IsaLevel> isa;
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  int64_t max_context = 0;
};

const std::vector<Flag<TerminalChatOptions>>& ChatFlags() {
  static const std::vector<Flag<TerminalChatOptions>> flags = WithSamplingFlags<TerminalChatOptions>({
      {"--model", "DIR", kModelFlagHelp, [](TerminalChatOptions& o, const std::string& v) { o.model = v; }},
      {"--system", "TEXT", "system prompt (change it later with /system TEXT)",
       [](TerminalChatOptions& o, const std::string& v) { o.system = v; }},
      {"--think", nullptr, "start in thinking mode (toggle with /think on|off)",
       [](TerminalChatOptions& o, const std::string&) { o.thinking = true; }},
      {"--reasoning-effort", "E", "1-100, or low, high (default), xhigh, max (thinking mode)",
       [](TerminalChatOptions& o, const std::string& v) {
         try {
           o.effort = ParseReasoningEffort(v);
         } catch (const Error& e) {
           throw MakeError("--reasoning-effort: ", e.what());
         }
       }},
      {"--max-tokens", "N", "longest reply in tokens (default 1024; the context also ends it)",
       [](TerminalChatOptions& o, const std::string& v) {
         o.max_tokens = ParseIntFlag("--max-tokens", v, 1, kMaxTokensFlag);
       }},
      {"--seed", "S", "sampling seed; turn k uses S + k (default: random)",
       [](TerminalChatOptions& o, const std::string& v) { o.seed = ParseSeedFlag("--seed", v); }},
      {"--threads", "N", "worker threads (default: all cores; at most 4 per hardware thread)",
       [](TerminalChatOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<TerminalChatOptions>(),
      KernelPlanFlag<TerminalChatOptions>(),
      WeightLayoutFlag<TerminalChatOptions>(),
      {"--max-context", "N", "maximum conversation length in tokens (default: the model's)",
       [](TerminalChatOptions& o, const std::string& v) {
         o.max_context = ParseIntFlag("--max-context", v, 0, kMaxTokensFlag);
       }},
  });
  return flags;
}

// Prints one reply as it streams: reasoning dimmed (or in <think> tags), then content.
class ReplyPrinter {
 public:
  ReplyPrinter(std::ostream& out, bool color) : out_(out), color_(color) {}

  void Print(const ChatOutputDelta& delta) {
    if (!delta.reasoning_content.empty()) {
      if (!in_reasoning_) out_ << (color_ ? kDim : "<think>");
      in_reasoning_ = true;
      out_ << delta.reasoning_content;
    }
    if (!delta.content.empty() || !delta.tool_calls.empty()) EndReasoning();
    out_ << delta.content;
    for (const ParsedToolCall& call : delta.tool_calls)
      out_ << "\n[tool call] " << call.name << "(" << call.arguments << ")";
    out_.flush();
  }

  void End() {
    EndReasoning();
    out_ << "\n";
    out_.flush();
  }

 private:
  void EndReasoning() {
    if (!in_reasoning_) return;
    out_ << (color_ ? kNormal : "</think>") << "\n";
    in_reasoning_ = false;
  }

  std::ostream& out_;
  bool color_;
  bool in_reasoning_ = false;
};

class TerminalChat {
 public:
  TerminalChat(const TerminalChatOptions& options, const Model& model, const Tokenizer& tokenizer, IsaLevel isa,
               Bf16Dot plan, std::ostream& out, bool color)
      : options_(options),
        model_(model),
        tokenizer_(tokenizer),
        pool_(options.threads),
        backend_(pool_, isa, plan),
        engine_(model, ComputeContext{backend_}, EngineOptions{}, &tokenizer),
        out_(out),
        color_(color),
        system_(options.system),
        thinking_(options.thinking) {}

  // Returns false for /exit.
  bool Handle(const std::string& line) {
    if (line.empty()) return true;
    if (line[0] == '/') return Command(line);
    Reply(line);
    return true;
  }

 private:
  bool Command(const std::string& line) {
    const size_t space = line.find(' ');
    const std::string name = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (name == "/exit" || name == "/quit") return false;
    if (name == "/reset") {
      history_.clear();
      out_ << "(history cleared)\n";
    } else if (name == "/system") {
      system_ = rest;
      out_ << (rest.empty() ? "(system prompt removed)\n" : "(system prompt set)\n");
    } else if (name == "/think" && (rest == "on" || rest == "off")) {
      thinking_ = rest == "on";
      out_ << "(thinking " << rest << ")\n";
    } else if (name == "/help") {
      out_ << "commands: " << kCommands << "\n";
    } else {
      out_ << "(unknown command " << name << "; commands: " << kCommands << ")\n";
    }
    out_.flush();
    return true;
  }

  void Reply(const std::string& text) {
    ChatMessage user;
    user.role = "user";
    user.content = text;
    std::vector<ChatMessage> messages;
    if (!system_.empty()) {
      ChatMessage system;
      system.role = "system";
      system.content = system_;
      messages.push_back(std::move(system));
    }
    messages.insert(messages.end(), history_.begin(), history_.end());
    messages.push_back(user);
    ChatOptions chat;
    chat.thinking = thinking_;
    chat.reasoning_effort = options_.effort;
    const std::vector<int32_t> prompt = tokenizer_.Encode(RenderChatPrompt(messages, chat));
    const int64_t room = model_.max_context() - static_cast<int64_t>(prompt.size());
    if (room < 1) {
      out_ << "(the conversation is " << prompt.size() << " tokens, the context holds " << model_.max_context()
           << "; /reset to start over)\n";
      return;
    }
    RequestParams request;
    request.prompt = prompt;
    request.sampling = options_.sampling;
    request.stop.max_tokens = std::min(options_.max_tokens, room);
    if (options_.seed) request.seed = *options_.seed + turns_;
    ++turns_;
    engine_.Add(std::move(request));

    ChatOutputParser parser(thinking_);
    ReplyPrinter printer(out_, color_);
    ChatMessage reply;
    reply.role = "assistant";
    std::string content, reasoning, error;
    auto take = [&](const ChatOutputDelta& delta) {
      printer.Print(delta);
      content += delta.content;
      reasoning += delta.reasoning_content;
      for (const ParsedToolCall& call : delta.tool_calls) {
        reply.tool_calls.push_back({"call_" + std::to_string(reply.tool_calls.size()), call.name, call.arguments});
      }
    };
    while (!engine_.idle()) {
      for (const RequestUpdate& u : engine_.Step()) {
        take(parser.Feed(u.text));
        if (u.finish == FinishReason::kError) error = u.error;
      }
    }
    take(parser.Finish());
    printer.End();
    if (!error.empty()) {
      out_ << "(error: " << error << ")\n";
      return;
    }
    reply.content = content;
    reply.reasoning_content = reasoning;
    history_.push_back(std::move(user));
    history_.push_back(std::move(reply));
  }

  const TerminalChatOptions& options_;
  const Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool pool_;
  CpuBackend backend_;
  Engine engine_;
  std::ostream& out_;
  bool color_;
  std::string system_;
  bool thinking_;
  std::vector<ChatMessage> history_;
  uint64_t turns_ = 0;
};

}  // namespace

int RunChat(const std::vector<std::string>& args, std::istream& in, std::ostream& out, bool color, bool interactive) {
  if (WantsHelp(args)) {
    out << "usage: deepinfer chat [flags]   (sampling: temperature 0.7 unless given)\n"
           "one user turn per line; commands: "
        << kCommands << "\n";
    PrintFlagHelp(out, ChatFlags());
    return 0;
  }
  TerminalChatOptions options;
  ParseFlags("chat", args, ChatFlags(), options);
  const std::string model_dir = ModelDirOrDefault(options.model);
  std::optional<Tokenizer> loaded = Tokenizer::FromModelDirectory(ModelDirectory(model_dir));
  if (!loaded) throw MakeError("chat: ", model_dir, " has no tokenizer.json");
  const Tokenizer tokenizer = std::move(*loaded);
  const IsaLevel isa = ChooseIsaFlag(options.isa);
  const Bf16Dot plan = ChooseKernelPlanFlag(options.kernel_plan, isa);
  const std::unique_ptr<Model> model =
      LoadModelAndPageIn(model_dir, ModelOptions{.max_context = options.max_context}, isa, plan, options.weight_layout);
  if (static_cast<int64_t>(tokenizer.size()) > model->config().vocab_size) {
    throw MakeError("chat: the model's vocabulary (", model->config().vocab_size,
                    " ids) does not cover its tokenizer (", tokenizer.size(), " ids), so it cannot take chat text",
                    options.model.empty() ? " (the embedded default is such a model; pass --model DIR, e.g. one "
                                            "written by 'deepinfer make-model --preset tiny')"
                                          : "");
  }
  TerminalChat chat(options, *model, tokenizer, isa, plan, out, color);
  if (interactive) out << "deepinfer chat on " << model_dir << "; " << kCommands << "\n";
  std::string line;
  while (true) {
    if (interactive) out << "> " << std::flush;
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!interactive && !line.empty()) out << "> " << line << "\n";
    if (!chat.Handle(line)) break;
  }
  if (interactive) out << "\n";
  return 0;
}

int RunChatCommand(const std::vector<std::string>& args) {
  return RunChat(args, std::cin, std::cout, ::isatty(STDOUT_FILENO) != 0, ::isatty(STDIN_FILENO) != 0);
}

}  // namespace deepinfer
