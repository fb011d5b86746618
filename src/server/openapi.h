// GET /openapi.json: the OpenAPI 3.1 document of every route, the one description of the API
// that clients and the schema fuzzer (schemathesis, in the tests) read. It lives in
// src/server/openapi.json (compiled in), with "@name@" strings where the served model's numbers
// go (last token id, most completion tokens, last tokenizer id). Request schemas carry the
// ranges the parser enforces (openai_request.cc); response schemas are the shapes the builders
// write (openai_response.cc); additional request fields are allowed (ignored).
#pragma once

#include <string>

#include "server/openai_api.h"

namespace deepinfer {

// `api_key`: whether the routes that need a key say so (bearer security).
std::string OpenApiJson(const ModelInfo& model, bool api_key = false);

}  // namespace deepinfer
