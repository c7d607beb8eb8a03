// The file names of a Hugging Face checkpoint folder, shared by its writer
// (hf_checkpoint_writer.h) and its readers (CheckpointSource, checkpoint_source.h, through
// the index parser).
#ifndef SDRT_CORE_CHECKPOINT_HF_FOLDER_H_
#define SDRT_CORE_CHECKPOINT_HF_FOLDER_H_

#include "absl/strings/string_view.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// The index's file name inside the folder.
inline constexpr absl::string_view kHfIndexFileName = "model.safetensors.index.json";

// The name of the one file of a single-file folder (no index).
inline constexpr absl::string_view kHfSingleFileName = "model.safetensors";

}  // namespace SDRT_API

#endif  // SDRT_CORE_CHECKPOINT_HF_FOLDER_H_
