// `deepinfer chat`: an interactive terminal chat on the Engine (no server).
//
//   deepinfer chat [--model DIR] [--system TEXT] [--think] [--reasoning-effort E]
//                  [--max-tokens N] [sampling flags] [--seed S] [--threads N] [--max-context N]
//
// Reads one user turn per line from stdin (a terminal or a pipe), streams the reply as it is
// generated, keeps the history (the engine's prefix cache reuses it), and knows /reset,
// /system TEXT, /think on|off, /help and /exit. Reasoning is shown dimmed on a terminal and
// between <think> ... </think> otherwise; tool calls as "[tool call] name(arguments)". With
// piped stdin each turn is echoed as "> TEXT" so stdout reads as a transcript.
//
// A model whose vocabulary does not cover its tokenizer cannot take chat text: refused at
// start-up with an Error. Returns 0 at end of input or /exit.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace deepinfer {

int RunChatCommand(const std::vector<std::string>& args);

// The same, on the given streams; `color`: ANSI dim for reasoning; `interactive`: prompts.
int RunChat(const std::vector<std::string>& args, std::istream& in, std::ostream& out, bool color, bool interactive);

}  // namespace deepinfer
