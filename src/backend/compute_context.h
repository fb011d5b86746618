// What a forward runs on: the backend that executes its ops and the communicator of the ranks
// that share the model. Today there is one rank; the parallel (MPI / NCCL) issue fills in the
// communicator, and the model's sharded ops will reduce through it.
#pragma once

#include "backend/backend.h"

namespace deepinfer {

// The ranks a model is split over (tensor, context or expert parallel). Immutable.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // The communicator of a process that holds the whole model.
  static const Communicator& SingleRank();
};

struct ComputeContext {
  Backend& backend;
  const Communicator& communicator = Communicator::SingleRank();
};

}  // namespace deepinfer
