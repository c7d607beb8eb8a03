// An embedding program's OWN comm/communicator.h (not sdrt's); see tensor/tensor.h beside
// it.
#ifndef EMBEDDER_COMM_COMMUNICATOR_H_
#define EMBEDDER_COMM_COMMUNICATOR_H_

namespace engine {
struct Communicator {
  static constexpr int kEmbedderCommunicatorMarker = 13;
};
}  // namespace engine

#endif  // EMBEDDER_COMM_COMMUNICATOR_H_
