// `deepinfer serve`: the OpenAI-compatible HTTP server (src/server) on one model.
//
//   deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--served-model-name NAME]
//                   [--api-key KEY] [--max-model-len N] [--kv-cache-memory BYTES|auto]
//                   [--max-running N] [--max-step-tokens N] [--max-queue N] [--threads N] ...
//
// Without --model, the embedded default. Prints the model, the address ("listening on
// http://HOST:PORT", the real port with --port 0) and the KV budget on stderr, serves until
// SIGINT / SIGTERM, then finishes or aborts running requests within --shutdown-timeout and
// returns 0. Throws Error (one line, naming the flag or file) on bad flags or a bad model.
#pragma once

#include <string>
#include <vector>

namespace deepinfer {

int RunServeCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
