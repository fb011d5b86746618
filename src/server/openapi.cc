#include "server/openapi.h"

#include "core/embedded_file.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

// DEEPINFER_SERVER_DIR is set by CMake to src/server.
DEEPINFER_EMBED_FILE(di_openapi, DEEPINFER_SERVER_DIR "/openapi.json")

namespace deepinfer {
namespace {

// The file holds "@name@" strings where the served model's numbers go.
void Substitute(std::string& text, std::string_view name, int64_t value) {
  const std::string quoted = "\"@" + std::string(name) + "@\"";
  for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at)) {
    text.replace(at, quoted.size(), std::to_string(value));
  }
}

}  // namespace

std::string OpenApiJson(const ModelInfo& model, bool api_key) {
  std::string text(di_openapi_begin, di_openapi_end - di_openapi_begin);
  Substitute(text, "last_token_id", model.vocab_size - 1);
  Substitute(text, "max_completion_tokens", model.max_model_len - 1);
  Substitute(text, "last_tokenizer_id", model.tokenizer ? static_cast<int64_t>(model.tokenizer->size()) - 1 : 0);
  DI_CHECK(text.find("\"@") == std::string::npos, "openapi.json has a placeholder nobody fills");
  Json doc = Json::parse(text);
  if (!api_key) {
    doc["components"].erase("securitySchemes");
    for (auto& [path, operations] : doc["paths"].items()) {
      for (auto& [method, operation] : operations.items()) operation.erase("security");
    }
  }
  return DumpJson(doc);
}

}  // namespace deepinfer
