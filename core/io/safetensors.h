// safetensors checkpoint I/O: read a file by mapping it, write one atomically.
//
// The format (https://github.com/huggingface/safetensors): 8 bytes little-endian u64 header
// length N, N bytes of UTF-8 JSON, then the data region. The JSON object maps each tensor
// name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, offsets in
// bytes relative to the start of the data region, elements row-major little-endian, and may
// hold "__metadata__": an object of string to string.
//
// Reading validates the file before handing out any tensor, with the rules of the reference
// implementation, safetensors 0.8.0: header length at most 100,000,000 bytes and inside the
// file; UTF-8 JSON, one object (whitespace around it allowed, nothing else, no NUL byte;
// nesting at most 127 deep); each entry an object with a dtype, a shape of non-negative
// integers and data_offsets [begin, end] (other fields ignored), numel(shape) x bits / 8
// == end - begin, a whole number of bytes (the shape counts elements, also the 4- and 6-bit
// ones: F4 [4, 8] is 16 bytes); ranges that tile the data region exactly; "__metadata__"
// null or an object of strings. Every dtype of 0.8.0 is read (tensor/dtype.h). A file the
// reference loads is refused only for (a) duplicate keys, which the reference resolves
// silently by keeping the last, (b) a dimension above 2^63 - 1 in a shape holding a 0, (c) a
// tensor name holding a NUL byte ("\u0000"), which a C caller would see cut there.
// Conversely, of 600 crafted headers compared with 0.8.0, none it refuses does sdrt load.
// Every error is an absl::Status naming the file, the tensor or metadata key and the rule.
// Tensors borrow the mapping zero-copy when their address is a multiple of their element
// size (any byte for sub-byte dtypes) and are copied into aligned memory otherwise (files
// from other writers may leave the data region unaligned: a header length that is not a
// multiple of 8).
//
// Writing lays the data out largest element size first (so every tensor is aligned for the
// zero-copy read), pads the header with spaces so the data starts at a multiple of 8,
// writes a temporary file beside the target, fsyncs it and renames it over the target, so
// a reader never sees a partial file.
//
// Thread-safety: a SafetensorsFile is immutable after Open; its const methods may be
// called from several threads.
#ifndef SDRT_CORE_IO_SAFETENSORS_H_
#define SDRT_CORE_IO_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// The reference implementation's cap on the JSON header length N, in bytes.
inline constexpr int64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// The reserved header key holding the string-to-string metadata; no tensor may use it.
inline constexpr absl::string_view kSafetensorsMetadataKey = "__metadata__";

// The __metadata__ key marking a header-only description (value "true"), which
// SafetensorsFile::Options::accept_header_only opens and everything else refuses.
inline constexpr absl::string_view kSafetensorsHeaderOnlyKey = "sdrt.header_only";

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;         // elements per dim, PyTorch order; empty for a 0-dim tensor
  int64_t data_begin = 0;  // bytes, relative to the start of the data region
  int64_t data_end = 0;    // bytes, exclusive; data_end - data_begin == numel * element size
};

// An opened, fully validated safetensors file (or in-memory image of one). Cheap to move;
// copies share the mapping. The bytes stay mapped while this object or any tensor returned
// by Get() lives.
class SafetensorsFile {
 public:
  struct Options {
    // Registers the whole mapping with CUDA as page-locked, read-only memory
    // (cudaHostRegisterReadOnly | cudaHostRegisterPortable, one HostRegistration of
    // pin_chunk_bytes chunks, cuda/runtime.h) so that host-to-device copies from the
    // returned tensors need no staging buffer; undone when the mapping is released.
    bool pin_mapping = false;
    // The device whose context registers the mapping and whose attributes decide how
    // read-only pages are registered (kCurrentCudaDevice: the calling thread's current one).
    int pin_device = kCurrentCudaDevice;
    // Bytes per cudaHostRegister call (rounded up to whole pages; a chunk grows to keep
    // each tensor whole); must be >= 1. The default registers a file under 64 GiB in one
    // call, as HostRegistrationOptions::chunk_bytes says why.
    int64_t pin_chunk_bytes = kDefaultRegistrationChunkBytes;
    // When the registration fails (no CUDA or no device, a device that cannot register
    // read-only pages, the locked-memory limit, a driver refusing a size), open the file
    // with its mapping pageable and keep the reason in pin_status() instead of failing;
    // the chunks registered before the failure are undone either way. Safe for every sdrt
    // copy out of these tensors (Tensor::CopyFrom and To move host memory with
    // cudaMemcpyAsync or stage it, and a copy from pageable memory is only slower: it is
    // synchronous for the host, so non_blocking buys no overlap). NOT safe for a caller
    // that hands the tensors' host pointers to a kernel, which reads host memory only when
    // it is registered (StridedCopyDevice's contract): set this to false, or check
    // pin_status() / storage()->is_pinned() first.
    bool pageable_fallback = true;
    // Opens a header-only description instead of refusing it: a file whose header lists
    // tensors with their data_offsets but that ends where the data region begins, its
    // __metadata__ holding kSafetensorsHeaderOnlyKey = "true" (`sdrt make --header-only`,
    // a checkpoint's layout without its bytes). header_only() is then true, entries() and
    // metadata() describe the tensors, Get() refuses every one and the mapping is never
    // pinned. For tools that only describe or plan (`sdrt inspect`); nothing may read the
    // tensors' bytes (TensorByteRanges() lie past the end of the file). The marker excuses
    // an empty data region only: a file holding some of its data bytes, or an empty one
    // without the marker, is refused as truncated either way.
    bool accept_header_only = false;
  };

  // Maps `path` read-only (mmap PROT_READ) and validates the header and the layout.
  // Errors: NotFound / PermissionDenied / ... (errno) when the file cannot be opened or
  // mapped; InvalidArgument when it is not a regular file (refused without waiting: a FIFO
  // is opened non-blocking) or any format rule is broken (the message names the path once,
  // the tensor or metadata key, and the rule); InvalidArgument for pin_chunk_bytes < 1;
  // with pin_mapping and without pageable_fallback, the registration's error
  // (HostRegistration::Register: Unavailable without CUDA or a device, FailedPrecondition,
  // ResourceExhausted, ...) after "<path>: pinning the mapping: ". A header-only description
  // (Options::accept_header_only) without that option: InvalidArgument "<path>: a
  // header-only description made by `sdrt make --header-only` ...: it has no tensor bytes".
  // The file must not be truncated while mapped (reading a vanished page raises SIGBUS).
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path, Options options);
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path) {
    return Open(path, Options());
  }

  // Validates a whole file image already in host memory (tests, fuzzing, network buffers).
  // The returned tensors borrow `bytes` like Open's borrow the mapping. InvalidArgument for
  // a null or non-CPU storage and for every format rule Open checks (a header-only
  // description included: it is never accepted here).
  static absl::StatusOr<SafetensorsFile> FromBuffer(std::shared_ptr<Storage> bytes);

  // The tensors sorted by data_begin (the order of their bytes in the file); zero-length
  // entries sharing an offset keep the header's order. JSON key order is not meaningful in
  // safetensors (the reference writer sorts by alignment, then name), so none is promised.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The entry named `name`, or nullptr. The pointer lives as long as this object.
  const SafetensorsEntry* Find(absl::string_view name) const;
  // The "__metadata__" object; empty when the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor `name` as a contiguous CPU tensor. Zero-copy (a view of storage(), which for
  // Open is read-only: writing to it faults; Clone() it to modify) when the tensor's address
  // is a multiple of its element size, else a copy in fresh 256-byte-aligned memory.
  // Tensors with no elements own an empty storage. NotFound naming the tensor and the file
  // when absent; ResourceExhausted when a copy cannot be allocated; InvalidArgument for
  // every tensor of a header-only description (header_only()).
  absl::StatusOr<Tensor> Get(absl::string_view name) const;

  // Whether this is a header-only description, opened with Options::accept_header_only:
  // the tensors' bytes are not in the file (data_offset() is its end).
  bool header_only() const { return header_only_; }

  // OK unless Open was asked to pin the mapping and fell back to pageable memory
  // (Options::pageable_fallback); then why, as Open would have failed with it.
  const absl::Status& pin_status() const { return pin_status_; }

  // The whole file image: a kMappedFile storage for Open, the caller's bytes for FromBuffer.
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t file_size() const { return storage_->nbytes(); }  // bytes
  // The opened file's identity, fstat's st_dev and st_ino of the descriptor Open mapped (0
  // and 0 for FromBuffer): a reader that opens the path again compares them, so that a file
  // replaced since (renamed over) is refused instead of read at this header's offsets.
  uint64_t file_device() const { return device_; }
  uint64_t file_inode() const { return inode_; }
  int64_t header_size() const { return header_size_; }      // N, bytes of JSON incl. padding
  int64_t data_offset() const { return 8 + header_size_; }  // bytes from the file start
  // (offset from the file start, nbytes) of every tensor's bytes, in file order: the
  // ranges a registration of the mapping must not cut (HostRegistrationOptions::
  // unbroken_ranges, cuda/runtime.h), so each tensor copies to the device in one piece.
  std::vector<std::pair<int64_t, int64_t>> TensorByteRanges() const;

 private:
  SafetensorsFile() = default;
  // Validates the image in `storage`; `source` (a path or "<buffer>") prefixes messages.
  // With `accept_header_only`, a header-only description is returned instead of refused.
  static absl::StatusOr<SafetensorsFile> Parse(std::shared_ptr<Storage> storage, std::string source,
                                               bool accept_header_only);

  std::shared_ptr<Storage> storage_;
  std::string source_;
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
  absl::Status pin_status_;
  int64_t header_size_ = 0;
  bool header_only_ = false;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` and `metadata` to `path` in safetensors format. The header lists the
// tensors in the given order; their data is laid out back to back sorted by element size,
// largest first, the given order within a size, so each starts at a multiple of its element
// size (and SafetensorsFile::entries(), in data order, differs from the given order).
// Any existing file is replaced atomically: the bytes go to a temporary file
// `.<name>.tmp.<pid>.<random>` in the same folder, which is fsynced and renamed over the
// target, and the folder is fsynced. When `path` is a symlink (or a chain of them), the
// target is the file it resolves to, written in that file's folder; the link stays
// (unless Options::follow_symlinks is false: then the link is replaced). A
// replaced file's permission bits carry over; a new file gets 0666 & ~umask. On any error
// before the rename the temporary file is removed and the target is left as it was (an
// error from the final fsync of the folder is returned with the new file already in place).
// Tensors may have any strides and live on CPU or CUDA (copied to host one at a time).
// InvalidArgument, before any file is created, for a tensor named "__metadata__", duplicate
// names, undefined or meta tensors, and names or metadata that are not valid UTF-8.
// I/O failures return the errno's code with the call; every message starts with
// `WriteSafetensors("<path>"): ` and names other paths (temporary file, folder) only.
struct WriteSafetensorsOptions {
  // Lay the data out in the given order instead of by element size (e.g. to reproduce a
  // file whose bytes are in another order, as `sdrt gather` does). A tensor may then start
  // at an offset that is not a multiple of its element size; SafetensorsFile::Get copies
  // such tensors instead of borrowing them.
  bool data_in_given_order = false;
  // Whether a symbolic link at `path` is followed (the file it resolves to is replaced, the
  // link stays). With false the link itself is replaced by the new file and whatever it
  // points at is never written: what a tool that must not write into its inputs wants
  // (`sdrt gather`, `sdrt make`), whatever the path has become since it was checked.
  bool follow_symlinks = true;
  // Write the header alone, marked kSafetensorsHeaderOnlyKey = "true" in __metadata__: a
  // header-only description (`sdrt make --header-only`) that SafetensorsFile opens only with
  // Options::accept_header_only. The data's offsets are those of the full file; no tensor
  // is asked for and no data byte is written.
  bool header_only = false;
  // Whether a file already at `path` when the new one is renamed into place is replaced.
  // With false the rename refuses it (AlreadyExists naming the path; nothing is replaced):
  // a command told not to overwrite never replaces a file that another process wrote
  // after the command checked that the path was free.
  bool replace_existing = true;
};

absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const std::pair<std::string, Tensor>> tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              const WriteSafetensorsOptions& options = {});

// What the header says of one tensor to write, before its bytes exist.
struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;  // elements per dim; empty for a 0-dim tensor
};

// Produces tensor i of the specs given to WriteSafetensorsStreamed: a tensor of exactly that
// dtype and shape, any strides, on CPU or CUDA. Its bytes are written before the next call,
// so the writer holds no reference to it afterwards.
using SafetensorsTensorSource = std::function<absl::StatusOr<Tensor>(size_t index)>;

// WriteSafetensors for tensors made one at a time: the header (all of `specs` in the given
// order, the same layout, so the file is byte-identical to WriteSafetensors of the same
// tensors) is written first, then `source(i)` is called once per tensor with elements, in
// the order of the data (largest element size first, the given order within a size; the
// given order with options.data_in_given_order), and its bytes written at once: memory
// peaks near the largest tensor, not the sum. Atomic like WriteSafetensors. Errors: those
// of WriteSafetensors (InvalidArgument for the reserved name, duplicates, a negative dim or
// a size above 2^63 - 1 bytes, before any file is created); `source`'s error, after
// `tensor "<name>": `; InvalidArgument when it gives a tensor of another dtype or shape. On
// any error the temporary file is removed and the target left as it was.
absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      absl::Span<const SafetensorsTensorSpec> specs,
                                      const SafetensorsTensorSource& source,
                                      const std::map<std::string, std::string>& metadata = {},
                                      const WriteSafetensorsOptions& options = {});

// The size in bytes of the file WriteSafetensorsStreamed (or WriteSafetensors of tensors
// with these names, dtypes and shapes) writes: 8 + the padded header + the data (none with
// options.header_only). Errors:
// InvalidArgument as WriteSafetensorsStreamed's before it creates a file, or a header above
// kSafetensorsMaxHeaderBytes.
absl::StatusOr<int64_t> SafetensorsFileBytes(absl::Span<const SafetensorsTensorSpec> specs,
                                             const std::map<std::string, std::string>& metadata,
                                             const WriteSafetensorsOptions& options = {});

}  // namespace sdrt

#endif  // SDRT_CORE_IO_SAFETENSORS_H_
