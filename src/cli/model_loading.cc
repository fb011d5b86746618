#include "cli/model_loading.h"

#include <unistd.h>

#include "core/progress.h"

namespace deepinfer {

std::unique_ptr<Model> LoadModelAndPageIn(const std::string& model_dir, const ModelOptions& options) {
  std::unique_ptr<Model> model = Model::Load(model_dir, options);
  const Checkpoint& checkpoint = model->checkpoint();
  uint64_t total = 0;
  for (const std::string& name : checkpoint.Names()) total += checkpoint.Find(name)->nbytes;
  const uint64_t memory =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (total > memory / 2) return model;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ProgressBar bar("loading", total);
  volatile uint8_t sink = 0;
  for (const std::string& name : checkpoint.Names()) {
    const TensorInfo& t = *checkpoint.Find(name);
    for (size_t offset = 0; offset < t.nbytes; offset += page) sink = sink + t.data[offset];
    bar.Add(t.nbytes);
  }
  bar.Finish();
  return model;
}

}  // namespace deepinfer
