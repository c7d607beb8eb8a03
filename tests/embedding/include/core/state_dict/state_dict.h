// An embedding program's OWN core/state_dict/state_dict.h (not sdrt's); see tensor/tensor.h
// beside it.
#ifndef EMBEDDER_CORE_STATE_DICT_STATE_DICT_H_
#define EMBEDDER_CORE_STATE_DICT_STATE_DICT_H_

namespace engine {
struct StateDict {
  static constexpr int kEmbedderStateDictMarker = 11;
};
}  // namespace engine

#endif  // EMBEDDER_CORE_STATE_DICT_STATE_DICT_H_
