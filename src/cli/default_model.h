// The embedded default model: the trained V4.1 checkpoint "kjv-tiny" (tests/data/models/kjv-tiny,
// tools/train/) compiled into the binary, so `deepinfer generate` runs with no download and no
// --model; and the project's V4.1 tokenizer (data/tokenizer), which `make-model` writes into the
// random checkpoints it makes.
#pragma once

#include <filesystem>
#include <string>

namespace deepinfer {

// Writes the embedded files once into `<temp>/deepinfer-<uid>/default-model-<hash>` and returns
// that path, ready for Model::Load. <hash> is a SHA-256 of the files computed by CMake at build
// time. The per-user folder must be a real directory owned by this user with mode 0700 (created
// so); anything else there is an error, since another user could have planted files in it. A
// folder left by an earlier run is used only when every file in it is byte-for-byte the embedded
// one; otherwise it is unpacked again. `temp` defaults to the system temp directory (TMPDIR).
std::string MaterializeDefaultModel();
std::string MaterializeDefaultModel(const std::filesystem::path& temp);

// The embedded V4.1 tokenizer (129,280 ids), unpacked the same way into
// `<temp>/deepinfer-<uid>/project-tokenizer-<hash>/`; returns the path of its tokenizer.json.
std::string MaterializeProjectTokenizer();
std::string MaterializeProjectTokenizer(const std::filesystem::path& temp);

// `--model DIR` as the commands take it: DIR, or the embedded default when empty.
std::string ModelDirOrDefault(const std::string& model);

}  // namespace deepinfer
