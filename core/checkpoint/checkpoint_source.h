// A checkpoint source: one read-only view of a full (unsharded) checkpoint, whatever its
// layout on disk (docs/ARCHITECTURE.md, "Checkpoint sources"):
//   - a single .safetensors file;
//   - a Hugging Face folder: model.safetensors.index.json ({"metadata": {"total_size": N},
//     "weight_map": {tensor: file}}) and the shard files it names, e.g.
//     model-00001-of-00003.safetensors;
//   - a folder of *.safetensors files without an index, whose files never repeat a tensor;
//   - an sdrt sharded checkpoint folder (index.json + rank files, sharded_checkpoint.h):
//     its tensors are listed from the index (global shapes), their bytes are pieces in the
//     rank files, which LoadStateDict (core/distributed/load_state_dict.h) reads.
//
// It lives in core/checkpoint, not core/io, because it parses its index with the strict
// JSON reader of core/checkpoint/internal and tells sdrt's own sharded folders apart.
//
// Thread-safety: immutable after Open; its const methods may be called from several threads.
#ifndef SDRT_CORE_CHECKPOINT_CHECKPOINT_SOURCE_H_
#define SDRT_CORE_CHECKPOINT_CHECKPOINT_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/shape.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

struct ShardedCheckpointIndex;  // sharded_checkpoint.h

enum class CheckpointKind {
  kSafetensorsFile,    // one .safetensors file
  kHfFolder,           // model.safetensors.index.json + shard files
  kSafetensorsFolder,  // *.safetensors files, no index
  kShardedFolder,      // an sdrt sharded checkpoint (index.json + rank files)
};

// "safetensors file", "Hugging Face folder", "safetensors folder", "sdrt sharded folder".
absl::string_view CheckpointKindName(CheckpointKind kind);

// Which kind `path` is, from file names alone (no file is read):
//   - anything but a folder (a file, a link to one, a FIFO): kSafetensorsFile (Open then
//     validates it);
//   - a folder with an entry named index.json: kShardedFolder (even when it also holds
//     model.safetensors.index.json);
//   - else a folder with an entry named model.safetensors.index.json: kHfFolder;
//   - else a folder with an entry named *.safetensors: kShardedFolder when every such
//     name is an sdrt rank file name ("rank-00000-of-00002.safetensors": a sharded folder
//     that lost its index, which ReadShardedCheckpointIndex reports), else
//     kSafetensorsFolder.
// Errors: the errno's code (NotFound for a missing path) "<path>: <strerror>";
// InvalidArgument for a folder with none of these entries ("<path>: not a checkpoint
// folder: no index.json, model.safetensors.index.json or *.safetensors file") or more than
// internal::kMaxHfIndexFiles (99,999) *.safetensors entries.
absl::StatusOr<CheckpointKind> DetectCheckpointKind(const std::string& path);

// One file of a source.
struct CheckpointSourceFile {
  std::string name;  // the file name ("model-00001-of-00002.safetensors"); the path as
                     // given for a kSafetensorsFile source
  std::string path;  // the path opened: the folder as given + "/" + name
  int64_t size = 0;  // bytes
  // The file's identity when the source opened it (SafetensorsFile::file_device and
  // file_inode): reading it again by path, LoadStateDict refuses another file of that name.
  // 0 and 0 for a source made FromFile of a SafetensorsFile::FromBuffer: its size alone is
  // compared then.
  uint64_t device = 0;
  uint64_t inode = 0;
};

// One tensor of a source: enough to pread its bytes without the mapping.
struct CheckpointSourceTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;     // elements per dim, PyTorch order; empty for a 0-dim tensor
  int file = 0;        // index into files(); -1 in a sharded folder (pieces in rank files)
  int64_t offset = 0;  // bytes from the start of that file (the header included); 0 if -1
  int64_t nbytes = 0;  // numel x element size (the whole tensor's)
};

class CheckpointSource {
 public:
  struct Options {
    // How each safetensors file is opened (pinning the mapping, ...). With
    // file_options.accept_header_only, header-only descriptions open too: tensors() then
    // describe bytes their files lack (offset past the end), Get refuses them, and the
    // merged metadata() holds kSafetensorsHeaderOnlyKey; for listing and planning only.
    SafetensorsFile::Options file_options;
  };

  // Opens the checkpoint at `path` (DetectCheckpointKind says which layout) and validates
  // it whole before returning; no tensor byte is read.
  //   kSafetensorsFile: SafetensorsFile::Open's rules and errors.
  //   kHfFolder: the index is read with ReadBoundedFile (regular, at most 64 MiB) and
  //     parsed by internal::ParseHfIndex (strict JSON, duplicate keys refused, file names
  //     directly inside the folder); each file it names must be a regular file in the
  //     folder or a link resolving to one in the same folder (a link out of the folder is
  //     refused, never opened) and a valid safetensors file; no tensor may be in two files;
  //     weight_map must match the files' headers exactly (a tensor the map names that its
  //     file lacks, a tensor a file holds that the map lacks or maps to another file);
  //     metadata.total_size, when present, must equal total_bytes().
  //   kSafetensorsFolder: every *.safetensors entry must be a regular file (or a link to
  //     one in the folder) and valid; no tensor name in two files.
  //   kShardedFolder: its index.json is read and validated by ReadShardedCheckpointIndex
  //     (rank files present as regular files; they are not opened here: each is checked
  //     when a load reads it, LoadRankShards), and presented as the other kinds are: the
  //     index's tensors in its order with their global shapes, its metadata; no files().
  // For the other folders, every file's __metadata__ is merged: a key given different
  // values by two files is InvalidArgument naming both.
  // Errors: InvalidArgument for every rule above, the message naming the folder, the file
  // and the tensor; NotFound for a missing path or a missing file named by a Hugging Face
  // index (a missing sdrt rank file is InvalidArgument, ReadShardedCheckpointIndex's rule);
  // the errno's code when a file cannot be read; SafetensorsFile::Open's errors, after
  // the folder's name.
  static absl::StatusOr<CheckpointSource> Open(const std::string& path, const Options& options);
  static absl::StatusOr<CheckpointSource> Open(const std::string& path) {
    return Open(path, Options());
  }

  // A kSafetensorsFile source over an already open file; `name` (its path, say) names it
  // in files() and messages. Never fails.
  static CheckpointSource FromFile(SafetensorsFile file, std::string name);

  CheckpointKind kind() const { return kind_; }
  // The path as given to Open (or FromFile's name).
  const std::string& path() const { return path_; }
  // The files, in tensor order: sorted by name (byte order) for folders; empty for a
  // sharded folder (its rank files are sharded_index()->files).
  const std::vector<CheckpointSourceFile>& files() const { return files_; }
  // The opened file `i` (0 <= i < files().size()); lives as long as this object.
  const SafetensorsFile& file(int i) const { return mapped_[static_cast<size_t>(i)]; }
  // Every tensor: the files in files() order and, within a file, the order of its bytes
  // (SafetensorsFile::entries(): the JSON key order of a safetensors header carries no
  // meaning, so data order is the one stable order, and the one a sequential reader wants).
  const std::vector<CheckpointSourceTensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or nullptr. The pointer lives as long as this object.
  const CheckpointSourceTensor* Find(absl::string_view name) const;
  // The tensor list (names, dtypes, shapes) in tensors() order, e.g. for
  // ShardingPlan::MetaStateDict.
  std::vector<SafetensorsTensorSpec> TensorSpecs() const;
  // The merged __metadata__ of the files.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A Hugging Face index's "metadata" (internal::HfIndex::metadata: strings as they are,
  // other values as JSON text); empty for other kinds.
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }
  // The sum of the tensors' nbytes.
  int64_t total_bytes() const { return total_bytes_; }
  // A sharded folder's index (sharded_checkpoint.h); nullptr for the other kinds. Lives as
  // long as this object (and its copies).
  const ShardedCheckpointIndex* sharded_index() const { return sharded_.get(); }

  // The tensor `name` as a contiguous CPU tensor, SafetensorsFile::Get of its file:
  // zero-copy (read-only) where aligned, else a copy. NotFound naming the tensor and the
  // source; ResourceExhausted when a copy cannot be allocated; InvalidArgument for a
  // sharded folder, which holds no whole tensor (load or gather its pieces).
  absl::StatusOr<Tensor> Get(absl::string_view name) const;

 private:
  CheckpointSource() = default;
  // Appends the tensors of mapped_[i] and merges its metadata. `dir` prefixes messages.
  absl::Status AddFile(int i, const std::string& dir);

  CheckpointKind kind_ = CheckpointKind::kSafetensorsFile;
  std::string path_;
  std::vector<CheckpointSourceFile> files_;
  std::vector<SafetensorsFile> mapped_;  // parallel to files_
  std::vector<CheckpointSourceTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  std::map<std::string, int> metadata_file_;  // key -> the file that first set it
  std::map<std::string, std::string> index_metadata_;
  int64_t total_bytes_ = 0;
  std::shared_ptr<const ShardedCheckpointIndex> sharded_;  // kShardedFolder only
};

}  // namespace sdrt

#endif  // SDRT_CORE_CHECKPOINT_CHECKPOINT_SOURCE_H_
