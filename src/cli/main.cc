// deepinfer: the command-line front end. Each subcommand lives in its own file; this one
// only dispatches and turns errors into one-line messages.
#include <malloc.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "cli/build_info.h"
#include "cli/chat_command.h"
#include "cli/chat_template_command.h"
#include "cli/generate_command.h"
#include "cli/inspect_command.h"
#include "cli/make_model_command.h"
#include "cli/perplexity_command.h"
#include "cli/serve_command.h"
#include "cli/tokenize_command.h"
#include "core/error.h"

namespace {

// On stdout when asked for (--help), on stderr after a bad command line.
void PrintUsage(FILE* out) {
  std::fputs(
      "usage: deepinfer <command> [flags]\n"
      "  generate       run the model on a prompt (default: the embedded default model, kjv-tiny)\n"
      "  inspect        print a model's config, layer roles, tensors and validation result\n"
      "  bench          measure prefill/decode speed against this machine's measured limits\n"
      "  make-model     write a random checkpoint with the real V4.1-Flash layer dimensions\n"
      "  perplexity     perplexity and bits per byte of a text file under a model\n"
      "  tokenize       encode text to token ids or decode ids to text\n"
      "  chat-template  render chat messages in the DeepSeek-V4.1 prompt format\n"
      "  serve          an OpenAI-compatible HTTP server with a chat page\n"
      "  chat           chat with a model in the terminal\n"
      "run 'deepinfer <command> --help' for a command's flags; 'deepinfer --version' for the build\n",
      out);
}

}  // namespace

int main(int argc, char** argv) {
  // A forward allocates its activations afresh (up to a few MB at decode). glibc would hand
  // each large block out as a fresh mmap and unmap it on free, so every step paid page faults
  // and page zeroing (~3% of a decode step): keep blocks up to 32 MB (glibc's maximum) on the
  // heap and let freed memory stay for the next step.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "generate") return deepinfer::RunGenerateCommand(args);
    if (command == "inspect") return deepinfer::RunInspectCommand(args);
    if (command == "bench") return deepinfer::RunBenchCommand(args);
    if (command == "make-model") return deepinfer::RunMakeModelCommand(args);
    if (command == "perplexity") return deepinfer::RunPerplexityCommand(args);
    if (command == "tokenize") return deepinfer::RunTokenizeCommand(args);
    if (command == "chat-template") return deepinfer::RunChatTemplateCommand(args);
    if (command == "serve") return deepinfer::RunServeCommand(args);
    if (command == "chat") return deepinfer::RunChatCommand(args);
    if (command == "--version" || command == "version") {
      std::fputs(deepinfer::VersionText().c_str(), stdout);
      return 0;
    }
    if (command == "--help" || command == "-h" || command == "help") {
      PrintUsage(stdout);
      return 0;
    }
    std::fprintf(stderr, "deepinfer: unknown command '%s'\n", command.c_str());
    PrintUsage(stderr);
    return 2;
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
