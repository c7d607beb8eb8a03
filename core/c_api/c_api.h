/*
 * sdrt/c_api.h: the C API of sdrt (C11; also valid C++). Include it as "sdrt/c_api.h" and
 * link sdrt::sdrt (the library target sdrt_c_api holds these functions).
 *
 * Conventions (those of nccl.h, ONNX Runtime and ggml):
 *
 *   - Every function returns an sdrt_status_t (its values are absl::StatusCode's, which the
 *     library returns), except the version and string getters. No exception ever crosses
 *     this boundary: every entry point catches everything and returns SDRT_INTERNAL
 *     ("uncaught exception: ...") or SDRT_RESOURCE_EXHAUSTED (std::bad_alloc).
 *   - On any status other than SDRT_OK, sdrt_last_error() returns the library's message.
 *     It is thread-local and valid until the next sdrt_* call on the same thread (every
 *     call but sdrt_last_error, sdrt_status_string, sdrt_get_last_stats and the version
 *     getters resets it).
 *     Output parameters are written only on SDRT_OK.
 *   - Handles are opaque pointers whose values are ids in a table of live handles, never
 *     addresses (nothing may dereference one); each has one create/open and one
 *     destroy/close, which accepts NULL (and returns SDRT_OK). A NULL handle or output
 *     pointer anywhere else is SDRT_INVALID_ARGUMENT, and so is, anywhere, a handle that
 *     was destroyed (a second destroy/close included), one of another kind (a checkpoint
 *     where a state dict is expected) or a value sdrt never returned: the call changes
 *     nothing and sdrt_last_error() says which ("sdrt_state_dict_destroy: state_dict is a
 *     state dict handle that was already destroyed"). A value is never reused in a process,
 *     so a destroyed handle stays refused. A handle may be used by one thread at a time
 *     (destroying it during another thread's call on it is undefined).
 *   - Options structs are versioned: the first field is `size_t struct_size`, set by the
 *     struct's SDRT_*_OPTIONS_INIT macro (which also fills every default). A call refuses a
 *     struct_size other than the size of the struct this library was built with
 *     (SDRT_INVALID_ARGUMENT: a too small one is an old or uninitialised struct, a larger
 *     one is from a newer header). A NULL options pointer means the defaults.
 *   - Collective calls (marked "Collective") must be called by every rank of the
 *     communicator, in the same order, with structurally matching state dicts; the ranks
 *     agree on their inputs before any data moves, so a mismatch is the same
 *     SDRT_INVALID_ARGUMENT on every rank, never a hang. What one rank refuses alone once
 *     it has found the call's communicator (a NULL or dead state dict, checkpoint or map
 *     handle, an option out of range) it brings to that agreement too, so every rank
 *     returns it ("sdrt_load: LoadStateDict: rank 1: state_dict is NULL"). What keeps a
 *     rank from finding the communicator (NULL options where comm is required, a wrong
 *     struct_size, a dead communicator, plan or binding handle), and every refusal of
 *     sdrt_reshard_bound_execute (which runs no agreement), is that rank's alone: its call
 *     returns at once, and the other ranks' call waits for it (SDRT_DEADLINE_EXCEEDED) or
 *     meets its next collective call instead. Every collective's options carry
 *     `timeout_seconds` (0: the communicator's timeout, set at creation, 600 s by default);
 *     a rank that does not arrive in time makes the call return SDRT_DEADLINE_EXCEEDED on
 *     every live rank, after which the communicator is unusable (SDRT_FAILED_PRECONDITION):
 *     destroy it. "Local" calls need no other rank.
 *   - Every call exists in every build. In a build without MPI the MPI communicator
 *     constructors, and without NCCL sdrt_comm_create_from_nccl, return SDRT_UNAVAILABLE
 *     ("... sdrt was built without MPI"); the calls that need no communicator (sdrt_load
 *     and sdrt_distribute with comm NULL) work in every build. Left out on purpose:
 *     ShardedTensor entries, nested state dicts and non-tensor values are not expressible
 *     here.
 *   - Tensors cross as DLPack 0.6 DLTensors (dlpack/dlpack.h), borrowed: sdrt never frees
 *     or reallocates the caller's memory, and writes only into the tensors the caller gave
 *     it. Memory sdrt allocates (gathered or offloaded tensors) belongs to a state dict
 *     handle the caller destroys.
 *   - CUDA: a `stream` field is a cudaStream_t as void* (NULL: none). When the state dicts
 *     of the call hold CUDA tensors, a call given one first waits for the work already
 *     enqueued on it (an event recorded on it, on the first CUDA tensor's device, waited for
 *     on the host), so buffers the engine is still producing there are complete before sdrt
 *     touches them; sdrt's own copies run on its own stream (load), the legacy default
 *     stream (gather, broadcast, distribute, reshard) or `stream` itself (offload), and are
 *     complete when the call returns: nothing sdrt enqueued is pending on return. In a
 *     build without CUDA, CUDA tensors are SDRT_UNAVAILABLE (the library's answer for every
 *     CUDA call in such a build). The calls were tested on CPU buffers only.
 */
#ifndef SDRT_C_API_H_
#define SDRT_C_API_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define SDRT_C_API __attribute__((visibility("default")))
#else
#define SDRT_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The level of this header: bumped when functions or fields are added (2: adopting an
 * ncclComm_t, loading an sdrt sharded folder; 3: reshard plans bound to buffers; 4:
 * sdrt_load_options_t's read policy and bucket_bytes, a rank's local shape and global
 * offset under placements or a sharding plan; 5: weight maps, sdrt_weight_map_t in the load
 * and reshard options; 6: sdrt_load_options_t's readers and share_reads; 7: readers 0, the
 * default, chosen per call; 8: sdrt_comm_accept and sdrt_comm_connect, two separately
 * launched MPI jobs joined into one communicator; 9: sdrt_parallel_layout_place). */
#define SDRT_C_API_VERSION 9
/* The binary interface: bumped when a struct layout or a signature changes incompatibly
 * (2: sdrt_comm_create_from_nccl takes sdrt_nccl_comm_options_t; 3: sdrt_load_options_t
 * grew read and bucket_bytes; 4: sdrt_load_options_t and sdrt_reshard_options_t grew
 * weight_map; 5: sdrt_load_options_t grew readers and share_reads). */
#define SDRT_C_ABI_VERSION 5

/* ------------------------------------------------------------------------------------------
 * Status, errors, versions (local, any thread, never fail)
 * ---------------------------------------------------------------------------------------- */

/* absl::StatusCode's values. */
typedef enum sdrt_status_t {
  SDRT_OK = 0,
  SDRT_CANCELLED = 1,
  SDRT_UNKNOWN = 2,
  SDRT_INVALID_ARGUMENT = 3,
  SDRT_DEADLINE_EXCEEDED = 4,
  SDRT_NOT_FOUND = 5,
  SDRT_ALREADY_EXISTS = 6,
  SDRT_PERMISSION_DENIED = 7,
  SDRT_RESOURCE_EXHAUSTED = 8,
  SDRT_FAILED_PRECONDITION = 9,
  SDRT_ABORTED = 10,
  SDRT_OUT_OF_RANGE = 11,
  SDRT_UNIMPLEMENTED = 12,
  SDRT_INTERNAL = 13,
  SDRT_UNAVAILABLE = 14,
  SDRT_DATA_LOSS = 15,
  SDRT_UNAUTHENTICATED = 16
} sdrt_status_t;

/* "OK", "INVALID_ARGUMENT", ... (static storage); "UNKNOWN_STATUS" for other values. */
SDRT_C_API const char* sdrt_status_string(sdrt_status_t status);

/* The message of the last failed call on this thread ("" after a call that succeeded);
 * valid until the next sdrt_* call on this thread. Never NULL. */
SDRT_C_API const char* sdrt_last_error(void);

/* The library's version "MAJOR.MINOR.PATCH" (static storage; that of the library linked,
 * which may differ from the header compiled against). */
SDRT_C_API const char* sdrt_get_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH. */
SDRT_C_API int sdrt_get_version_number(void);
/* The SDRT_C_ABI_VERSION the library was built with; a program checks it equals its own. */
SDRT_C_API int sdrt_get_abi_version(void);
/* The SDRT_C_API_VERSION the library was built with (>= the program's for every function
 * the program calls). */
SDRT_C_API int sdrt_get_api_version(void);

/* ------------------------------------------------------------------------------------------
 * Communicators
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_comm_s* sdrt_comm_t;

typedef struct sdrt_comm_options_t {
  size_t struct_size;
  /* The default deadline of every collective over the communicator (its creation
   * included), seconds > 0. */
  double timeout_seconds;
} sdrt_comm_options_t;
#define SDRT_COMM_OPTIONS_INIT {sizeof(sdrt_comm_options_t), 600.0}

/* Collective over all processes of the MPI job (MPI_COMM_WORLD), which it duplicates: sdrt's
 * traffic never matches the program's. Initializes MPI (MPI_Init_thread,
 * MPI_THREAD_MULTIPLE: calls on two communicators may run on two threads at once) unless
 * the program already did (then below MPI_THREAD_MULTIPLE no two threads may be in calls
 * over MPI communicators at once), and then finalizes it at exit.
 * torch.distributed.init_process_group("mpi") is the PyTorch counterpart.
 * Errors: SDRT_INVALID_ARGUMENT (NULL out, bad options); SDRT_UNAVAILABLE in a build
 * without MPI; SDRT_FAILED_PRECONDITION when MPI was already finalized;
 * SDRT_DEADLINE_EXCEEDED when a rank does not call it within the timeout; MPI's error. */
SDRT_C_API sdrt_status_t sdrt_comm_create_world(const sdrt_comm_options_t* options,
                                                sdrt_comm_t* out);

/* Collective over the ranks of the program's communicator `mpi_comm`, a pointer to an
 * MPI_Comm (so this header does not include mpi.h), which is duplicated (MPI_Comm_idup):
 * the program keeps and frees its own. MPI must be initialized. Ranks are mpi_comm's.
 * Errors as sdrt_comm_create_world, and SDRT_FAILED_PRECONDITION when MPI is not
 * initialized. */
SDRT_C_API sdrt_status_t sdrt_comm_create_from_mpi(const void* mpi_comm,
                                                   const sdrt_comm_options_t* options,
                                                   sdrt_comm_t* out);

/* The same from MPI_Comm_c2f(comm), the portable integer handle (MPI_Fint). A value that
 * cannot be a communicator's is SDRT_INVALID_ARGUMENT naming it, refused before MPI sees
 * it: outside MPI_Fint, MPI_COMM_NULL, or, under MPICH (whose handles carry their kind in
 * their bits), not a communicator's bits. A freed communicator's value with the right bits
 * still reaches MPI, whose error handler decides. */
SDRT_C_API sdrt_status_t sdrt_comm_create_from_mpi_fortran(int64_t fortran_handle,
                                                           const sdrt_comm_options_t* options,
                                                           sdrt_comm_t* out);

/* Two separately launched MPI jobs (two mpiexec's: a trainer's and an engine's) joined into
 * one communicator through MPI's dynamic processes: one job calls sdrt_comm_accept and the
 * other sdrt_comm_connect with the same `port_file`, a path both can reach. Each call is
 * collective over its own job's MPI_COMM_WORLD and initializes MPI as
 * sdrt_comm_create_world does. The result spans both jobs, the accepting job's ranks first;
 * options->timeout_seconds bounds the meeting and is the communicator's deadline.
 * Destroying the handle frees the link; the jobs may meet again (a restarted engine).
 * sdrt_comm_accept: rank 0 locks `port_file`.lock (one accepting job per port file; the lock
 * goes with the process), opens an MPI port, writes its name to `port_file` atomically
 * (a temporary file in the same folder, fsync, rename; a symlink is never followed), waits
 * until a connector claims it (renames it to `port_file`.claimed), accepts, and removes
 * both names, on failure too. sdrt_comm_connect: rank 0 waits for `port_file`, reads at
 * most MPI_MAX_PORT_NAME bytes of it, claims it, and every rank connects.
 * The MPI library must implement dynamic processes (MPICH 5's ch4:ofi does, docs/HOSTS.md;
 * MPICH 4.0's ch4:ucx netmod does not: its error is returned); comm/mpi_communicator.h and
 * docs/ARCHITECTURE.md ("Two jobs that meet") give the limits. Errors:
 * SDRT_INVALID_ARGUMENT (NULL port_file or out, bad options, a port file that is not a regular
 * file, is larger than MPI_MAX_PORT_NAME or holds no port name); SDRT_DEADLINE_EXCEEDED naming the
 * port file and the wait when the other job does not come within the timeout (no port file is left
 * behind); SDRT_FAILED_PRECONDITION when another job is accepting on `port_file`, when
 * `port_file`.claimed is left from a job that died, or when MPI was already finalized;
 * SDRT_UNAVAILABLE in a build without MPI; MPI's error. */
SDRT_C_API sdrt_status_t sdrt_comm_accept(const char* port_file,
                                          const sdrt_comm_options_t* options, sdrt_comm_t* out);
SDRT_C_API sdrt_status_t sdrt_comm_connect(const char* port_file,
                                           const sdrt_comm_options_t* options, sdrt_comm_t* out);

/* Options of sdrt_comm_create_from_nccl. */
typedef struct sdrt_nccl_comm_options_t {
  size_t struct_size;
  /* The default deadline of every collective over the communicator, seconds > 0. */
  double timeout_seconds;
  /* What a call that fails or passes its deadline does to the engine's ncclComm_t.
   * 0 (default): nothing. The call returns its error, sdrt's handle is unusable from then
   * on (SDRT_FAILED_PRECONDITION; destroy it), and the ncclComm_t is the engine's to
   * recover: a collective of the failed call may still be pending on the GPU, so the engine
   * calls ncclCommAbort on it. 1: sdrt calls ncclCommAbort on it at once (as on the
   * communicators sdrt makes itself); the engine must then neither use nor destroy it. */
  int abort_on_error;
  /* A cudaStream_t on `device` that sdrt's collectives run on (borrowed: it must outlive
   * the handle); NULL: sdrt creates its own. Either way every call waits for its work on
   * that stream before returning. */
  void* stream;
} sdrt_nccl_comm_options_t;
#define SDRT_NCCL_COMM_OPTIONS_INIT {sizeof(sdrt_nccl_comm_options_t), 600.0, 0, NULL}

/* Local (no collective runs): wraps the engine's own ncclComm_t `nccl_comm` (as void*)
 * without taking it over, so sdrt's calls move CUDA tensors over the engine's ranks. `rank`,
 * `size` and `device` are what the engine believes of it and are checked against NCCL
 * (ncclCommUserRank, ncclCommCount, ncclCommCuDevice); a communicator still being created
 * non-blocking is waited for. The engine keeps ownership: sdrt_comm_destroy releases only
 * sdrt's stream and staging memory (nothing is finalised; the ncclComm_t stays usable), and
 * the engine destroys the ncclComm_t after sdrt's handle. The engine must not use the
 * ncclComm_t from another thread while an sdrt call on the handle runs (NCCL's rule).
 * Deadlines: every call is watched (polling ncclCommGetAsyncError and the stream), but a
 * blocking communicator (NCCL's default) can block the host inside NCCL, e.g. while
 * connecting to a peer that never comes, where no deadline reaches: create it with
 * ncclConfig_t.blocking = 0 for every deadline to hold. CPU tensors handed to calls on this
 * communicator are staged through the GPU; collective metadata (the agreement) moves over it
 * too, so no MPI is needed. Sub-communicators sdrt splits from it (for meshes of several
 * dims) are sdrt's own.
 * Errors: SDRT_INVALID_ARGUMENT for NULL nccl_comm or out, bad options, a rank outside
 * [0, size), a device that is not a visible CUDA device (checked before nccl_comm is
 * touched: on a machine without a GPU every device is refused), or a rank, size or device
 * that differs from NCCL's answer; SDRT_UNAVAILABLE in a build without NCCL (once nccl_comm,
 * out and options pass their checks);
 * SDRT_DEADLINE_EXCEEDED when the communicator is still initialising after the timeout;
 * NCCL's error (SDRT_INTERNAL, SDRT_UNAVAILABLE, ...) when it holds one. Nothing is aborted
 * on any of these. */
SDRT_C_API sdrt_status_t sdrt_comm_create_from_nccl(void* nccl_comm, int rank, int size,
                                                    int device,
                                                    const sdrt_nccl_comm_options_t* options,
                                                    sdrt_comm_t* out);

/* Local. This process's rank / the number of ranks. SDRT_INVALID_ARGUMENT for NULLs. */
SDRT_C_API sdrt_status_t sdrt_comm_rank(sdrt_comm_t comm, int* rank);
SDRT_C_API sdrt_status_t sdrt_comm_size(sdrt_comm_t comm, int* size);

/* Frees sdrt's duplicate communicator (local; MPI_Comm_free, unless MPI is finalized).
 * NULL is a no-op. Every state dict and plan using the communicator must no longer be in a
 * call; plans and bindings over it are SDRT_FAILED_PRECONDITION from then on (destroying
 * them still succeeds). SDRT_INVALID_ARGUMENT for a handle that is not a live
 * communicator's (a second destroy). */
SDRT_C_API sdrt_status_t sdrt_comm_destroy(sdrt_comm_t comm);

/* ------------------------------------------------------------------------------------------
 * Checkpoints (read-only views of files on disk; local)
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_checkpoint_s* sdrt_checkpoint_t;

typedef enum sdrt_checkpoint_kind_t {
  SDRT_CHECKPOINT_SAFETENSORS_FILE = 0,   /* one .safetensors file */
  SDRT_CHECKPOINT_HF_FOLDER = 1,          /* model.safetensors.index.json + shard files */
  SDRT_CHECKPOINT_SAFETENSORS_FOLDER = 2, /* *.safetensors files, no index */
  SDRT_CHECKPOINT_SHARDED_FOLDER = 3      /* an sdrt sharded folder (index.json + rank files) */
} sdrt_checkpoint_kind_t;

/* One tensor of a checkpoint. Pointers are owned by the checkpoint and valid until it is
 * closed. For a sharded folder, shape is the global shape. */
typedef struct sdrt_tensor_info_t {
  size_t struct_size;
  const char* name;
  DLDataType dtype;     /* DLPack's code, bits (4 and 6 for packed sub-byte floats), lanes 1 */
  const char* dtype_name; /* sdrt's (PyTorch's) name: "float32", "bfloat16", ... */
  int32_t ndim;
  const int64_t* shape; /* ndim elements (NULL when ndim == 0) */
  int64_t nbytes;       /* bytes of the (global) tensor */
} sdrt_tensor_info_t;
#define SDRT_TENSOR_INFO_INIT {sizeof(sdrt_tensor_info_t), NULL, {0, 0, 0}, NULL, 0, NULL, 0}

/* Local. Opens `path` (a .safetensors file, a Hugging Face folder, a folder of .safetensors
 * files, or an sdrt sharded folder; told apart by file names, then validated whole: every
 * header is parsed and checked, no tensor byte is read; a sharded folder's index is, its
 * rank files are checked when sdrt_load reads them). The checkpoint maps its files
 * until sdrt_checkpoint_close; sdrt_load with read ALL (or AUTO choosing it) opens them
 * again by path, so a file replaced since (a new checkpoint renamed over it) fails that
 * load with SDRT_DATA_LOSS, as does a sharded folder whose index.json changed (its rank
 * files are opened by sdrt_load): open the checkpoint again to load the new one. Read ROOT
 * reads rank 0's mappings, the files opened. Mirrors safetensors.safe_open /
 * transformers' index reading. Errors: SDRT_NOT_FOUND for a missing path or a file an
 * index names; SDRT_INVALID_ARGUMENT for an invalid file or folder (the message names the
 * file and the rule), NULL arguments; the errno's code when a file cannot be read. */
SDRT_C_API sdrt_status_t sdrt_checkpoint_open(const char* path, sdrt_checkpoint_t* out);
/* Local. Which layout it is. */
SDRT_C_API sdrt_status_t sdrt_checkpoint_kind(sdrt_checkpoint_t checkpoint,
                                              sdrt_checkpoint_kind_t* kind);
/* Local. The number of tensors. */
SDRT_C_API sdrt_status_t sdrt_checkpoint_num_tensors(sdrt_checkpoint_t checkpoint,
                                                     int64_t* count);
/* Local. Tensor i (0 <= i < count), in the order of the bytes in the files (sharded
 * folders: the index's order). SDRT_OUT_OF_RANGE for another i; SDRT_INVALID_ARGUMENT for
 * a bad info->struct_size (set it with SDRT_TENSOR_INFO_INIT). */
SDRT_C_API sdrt_status_t sdrt_checkpoint_tensor_info(sdrt_checkpoint_t checkpoint, int64_t i,
                                                     sdrt_tensor_info_t* info);
/* Local. Unmaps and frees; NULL is a no-op. Infos handed out become invalid.
 * SDRT_INVALID_ARGUMENT for a handle that is not a live checkpoint's (a second close). */
SDRT_C_API sdrt_status_t sdrt_checkpoint_close(sdrt_checkpoint_t checkpoint);

/* ------------------------------------------------------------------------------------------
 * State dicts: name -> tensor, in insertion order (local)
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_state_dict_s* sdrt_state_dict_t;

/* How a tensor is laid out over a device mesh: a DTensor (torch.distributed.tensor) whose
 * local tensor is the one added. */
typedef struct sdrt_dtensor_spec_t {
  size_t struct_size;
  int32_t mesh_ndim;          /* >= 1 */
  const int64_t* mesh_shape;  /* mesh_ndim sizes, e.g. {4} or {2, 2} */
  const int64_t* mesh_ranks;  /* product(mesh_shape) communicator ranks, row-major; NULL:
                                 0, 1, ..., product - 1 */
  /* One placement per mesh dim as PyTorch prints them: "S(0)", "R", "P(sum)", "_S(0, 2)",
   * "Shard(dim=1), Replicate()", brackets optional. */
  const char* placements;
  int32_t global_ndim;          /* the global tensor's rank (== the local's) */
  const int64_t* global_shape;  /* global_ndim sizes */
} sdrt_dtensor_spec_t;
#define SDRT_DTENSOR_SPEC_INIT {sizeof(sdrt_dtensor_spec_t), 0, NULL, NULL, NULL, 0, NULL}

/* Where one rank's piece of a DTensor sits in the global tensor: filled by
 * sdrt_compute_local_shape_and_global_offset. The arrays and the string are sdrt's
 * (thread-local storage), valid until the next such call on the same thread: copy them. */
typedef struct sdrt_local_shard_t {
  size_t struct_size;
  /* Entries of local_shape: the global rank, or 1 for a rank not in the mesh (PyTorch's
   * local shape (0,): it holds nothing). */
  int32_t ndim;
  const int64_t* local_shape;   /* ndim sizes; NULL when ndim == 0 */
  /* Per global dim, the first global index the rank owns along it (0 for a dim no
   * placement shards; the dim's size for an empty piece of a sharded dim); global_ndim
   * entries, NULL for a rank not in the mesh (PyTorch's ()) and for a 0-dim tensor. */
  const int64_t* global_offset;
  /* 1 when the piece is the box [global_offset, global_offset + local_shape) of the
   * global tensor (always, but for _StridedShard placements whose indices along a dim are
   * several runs: 0). */
  int32_t is_box;
  /* The placements, as PyTorch prints them ("[S(0)]", "[_S(0, 2), S(0)]"): spec's, or
   * the plan's for the tensor when spec->placements is NULL. */
  const char* placements;
} sdrt_local_shard_t;
#define SDRT_LOCAL_SHARD_INIT {sizeof(sdrt_local_shard_t), 0, NULL, NULL, 0, NULL}

/* Local (pure arithmetic, no I/O beyond reading a PLAN.json file). Where rank `rank` (a
 * communicator rank, as in spec->mesh_ranks) holds its piece of a tensor of
 * spec->global_shape laid out over spec's mesh: its local shape and the global index of its
 * first element along each dim, as torch.distributed.tensor._utils.
 * compute_local_shape_and_global_offset(global_shape, mesh, placements) returns them on
 * that rank: uneven pieces as torch.chunk cuts them (10 rows over 4 ranks: 3, 3, 3, 1 at
 * 0, 3, 6, 9; empty pieces at the dim's size), placements applied in mesh-dim order. The
 * placements are spec->placements or, when that is NULL, those the sharding plan `plan`
 * gives the tensor `name` (a dotted state-dict name): "fsdp", "hsdp", "tp", "fsdp-tp" or
 * the path of a PLAN.json file, as `sdrt shard --plan` takes them (ShardingPlan in C++).
 * `plan` and `name` must then be set, and must be NULL otherwise. The buffer an engine
 * allocates for the piece has out->local_shape; it is added with the same spec and
 * placements (out->placements) by sdrt_state_dict_add. Writes *out on SDRT_OK only.
 * Errors: SDRT_INVALID_ARGUMENT for NULL spec or out, a bad out->struct_size (set it with
 * SDRT_LOCAL_SHARD_INIT) or spec->struct_size, a bad mesh (sizes, ranks), placements that
 * do not parse or do not fit the mesh or the shape, both or neither of placements and
 * plan, a plan that is neither built in nor a valid PLAN.json (naming it) or does not fit
 * the mesh or the tensor (the message names the plan, the tensor and the mesh); the errno's
 * code for a PLAN.json that cannot be read (SDRT_NOT_FOUND for a missing file,
 * SDRT_PERMISSION_DENIED). */
SDRT_C_API sdrt_status_t sdrt_compute_local_shape_and_global_offset(
    const sdrt_dtensor_spec_t* spec, const char* plan, const char* name, int64_t rank,
    sdrt_local_shard_t* out);

/* Local (pure arithmetic). Where each of a model's `count` tensors lives when a training or
 * serving framework lays the model out over a world of ranks: ParallelLayout::Place in C++
 * (core/checkpoint/parallel_layout.h; docs/LAYOUTS.md draws each rule). `description` is
 * "megatron:tp=T,pp=P[,dp=D][,ep=E][,etp=X]", "vllm:tp=T[,pp=P][,dp=D][,ep=E]", "fsdp:dp=D"
 * or "fsdp-tp:dp=D,tp=T", over `world_size` ranks (0: dp must be given) that are the
 * global ranks first_rank .. first_rank + size - 1 (first_rank > 0: an engine's ranks
 * after its trainer's in one world). The model is names[i] (dotted state-dict names; their
 * "layers.N." and "experts.K." decide pipeline stages and expert owners, so give the whole
 * model, in its order), ndims[i] and shapes[i] (ndims[i] sizes, elements; may be NULL when
 * ndims[i] is 0); no data. Fills specs[i] (each initialised with SDRT_DTENSOR_SPEC_INIT)
 * with tensor i's mesh (its shape and global ranks: the ranks of its pipeline stage, or of
 * its expert's owners), its placements as PyTorch prints them ("[R, S(0)]"), global_ndim =
 * ndims[i] and global_shape = shapes[i] (the caller's array, which must outlive the spec's
 * use). The mesh arrays and placement strings are sdrt's (thread-local storage, one per
 * distinct mesh and string), valid until the next sdrt_parallel_layout_place on the same
 * thread. A rank holds tensor i when it is in specs[i].mesh_ranks; the buffer it allocates
 * has the local shape sdrt_compute_local_shape_and_global_offset(&specs[i], NULL, NULL,
 * rank, ...) gives, and is added with &specs[i] by sdrt_state_dict_add (for
 * sdrt_reshard_plan_create, sdrt_load). Writes specs only on SDRT_OK.
 * Errors: SDRT_INVALID_ARGUMENT for a NULL description, names, ndims, shapes or specs
 * (count > 0), count outside [0, 2^24], a NULL name, ndims[i] outside [0, 64], a NULL
 * shapes[i] with ndims[i] > 0, a negative size, a bad specs[i].struct_size, and what
 * ParallelLayout::Parse and Place refuse, naming the description or the tensor (an unknown
 * framework or key, sizes that do not divide the world, dp left out with world_size 0,
 * fewer layers than pipeline stages, a layer's expert count that ep does not divide, a
 * first_rank below 0 or putting a rank above 2^20). */
SDRT_C_API sdrt_status_t sdrt_parallel_layout_place(const char* description, int64_t world_size,
                                                    int64_t first_rank, int64_t count,
                                                    const char* const* names,
                                                    const int32_t* ndims,
                                                    const int64_t* const* shapes,
                                                    sdrt_dtensor_spec_t* specs);

/* Local. An empty state dict. */
SDRT_C_API sdrt_status_t sdrt_state_dict_create(sdrt_state_dict_t* out);

/* Local. Adds (or replaces, keeping the position) `name` -> `tensor`, borrowed: no byte is
 * copied, sdrt keeps the shape and strides (copied) and the data pointer, which must stay
 * valid, and not be freed, until the state dict is destroyed. With `spec` (may be NULL) the
 * entry is a DTensor whose local tensor is `tensor`; its shape must then be the local shape
 * the placements give this rank (checked by the calls that use it). tensor->data may be
 * NULL only for a tensor with no elements. Devices: kDLCPU, kDLCUDAHost (CPU), kDLCUDA.
 * Names are dotted paths ("layers.0.weight"), as PyTorch's _flatten_state_dict names leaves.
 * Errors: SDRT_INVALID_ARGUMENT for NULLs, an unknown dtype, lanes != 1, negative sizes or
 * strides, another device type, a bad spec (mesh, placements, global shape). */
SDRT_C_API sdrt_status_t sdrt_state_dict_add(sdrt_state_dict_t state_dict, const char* name,
                                             const DLTensor* tensor,
                                             const sdrt_dtensor_spec_t* spec);
/* Local. The number of entries. */
SDRT_C_API sdrt_status_t sdrt_state_dict_count(sdrt_state_dict_t state_dict, int64_t* count);
/* Local. Entry i's name and tensor (for a DTensor its local tensor; `is_dtensor` may be
 * NULL). Both point into the state dict, valid until it is destroyed or changed (add,
 * load with strict). The tensor's data is the borrowed buffer or memory sdrt owns (results
 * of gather and offload); it may be read and written, never freed. SDRT_OUT_OF_RANGE for a
 * bad i; SDRT_FAILED_PRECONDITION for an entry that is not a tensor (a load may replace a
 * 0-dim tensor by a value; never in practice for safetensors). */
SDRT_C_API sdrt_status_t sdrt_state_dict_get(sdrt_state_dict_t state_dict, int64_t i,
                                             const char** name, const DLTensor** tensor,
                                             int* is_dtensor);
/* Local. The index of `name`, or SDRT_NOT_FOUND. */
SDRT_C_API sdrt_status_t sdrt_state_dict_find(sdrt_state_dict_t state_dict, const char* name,
                                              int64_t* index);
/* Local. Frees sdrt's records and the memory sdrt allocated for it (never the borrowed
 * buffers). NULL is a no-op. SDRT_INVALID_ARGUMENT for a handle that is not a live state
 * dict's (a second destroy). */
SDRT_C_API sdrt_status_t sdrt_state_dict_destroy(sdrt_state_dict_t state_dict);

/* ------------------------------------------------------------------------------------------
 * Weight maps: how an engine's tensors are made from a checkpoint's or a trainer's (local)
 * ---------------------------------------------------------------------------------------- */

/* A checked, compiled weight map (WeightMap in C++, core/distributed/weight_map.h): rules over
 * the source's tensor names that rename, fuse, split or pad them, so that sdrt_load and a
 * reshard plan write straight into an inference engine's fused, padded, renamed buffers
 * (vLLM's qkv_proj and gate_up_proj: each tensor-parallel rank's local is [its q heads; its
 * k heads; its v heads]), each rank moving only its own rows, no full tensor built. Handed
 * to sdrt_load_options_t.weight_map or sdrt_reshard_options_t.weight_map, which borrow it
 * for the call only: the map may be destroyed as soon as the call returns (a reshard plan
 * keeps what it needs of it). FP8 needs no map: a float8_e4m3fn / float8_e5m2 entry (DLPack
 * type codes 10 / 12) beside a float32 entry named as it plus "_scale_inv" (a scale per
 * 128 x 128 block of the source tensor, laid out as the codes) or plus "_scale" (one
 * element) is quantized by PyTorch's recipe on the way (in a reshard by the senders: one
 * byte per element on the wire); a float8 source beside such scales into a float entry is
 * dequantized; CPU and CUDA buffers alike. */
typedef struct sdrt_weight_map_s* sdrt_weight_map_t;

/* Local. A map from its JSON text, the `length` bytes at `json` (no terminating NUL needed;
 * at most 1 MiB): {"rules": [rule, ...]}, each rule an object with one of "rename", "pad"
 * (a pattern), "fuse" (an array of patterns, one per component), "split" (a pattern), and
 * "to" (a destination name template; an array of them for split; optional for pad), "dim",
 * "interleave" ("shards": vLLM's tensor-parallel parts, or "groups": Megatron's query
 * groups), "head_size", "groups", "multiple", "sizes" (an array of integers: a split's part
 * sizes); or "regroup" (a pattern: one fused source into one fused destination of the same
 * components held another way) with "to", "from_interleave" (its source's, default
 * "groups") and "sizes" (the components', 2 to 16). Patterns are RE2's, matched against whole
 * names; the first rule whose pattern matches a source name takes it; "{i}" in a template is
 * the capture group named i, "{1}" the first group. Unknown keys are refused.
 * Errors: SDRT_INVALID_ARGUMENT for NULL json or out, more than 1 MiB, malformed JSON, a
 * field of the wrong type or out of range, a pattern RE2 refuses, a template naming a group
 * its pattern lacks, the wrong number of patterns or templates for the rule's kind (the
 * message names the rule: "weight map rule 2 (fuse): ..."), more than 10,000 rules, a
 * pattern or template of more than 4,096 bytes, a template holding a NUL byte;
 * SDRT_RESOURCE_EXHAUSTED when memory runs out. *out is the caller's to destroy. */
SDRT_C_API sdrt_status_t sdrt_weight_map_from_json(const char* json, size_t length,
                                                   sdrt_weight_map_t* out);

/* Local. A built-in map from Hugging Face Llama-family names (Llama, Mistral, Qwen2):
 *   "vllm-llama": into vLLM-style tensor-parallel buffers: model.layers.{i}.self_attn.
 *     {q,k,v}_proj.{weight,bias} fused into ...self_attn.qkv_proj (cut by whole heads of
 *     `head_size` rows; with fewer kv heads than ranks, each kv head replicated on the ranks
 *     that share it), model.layers.{i}.mlp.{gate,up}_proj.weight fused into
 *     ...mlp.gate_up_proj.weight, model.embed_tokens.weight and lm_head.weight padded with
 *     zero rows to a multiple of 64; every other name unchanged.
 *   "megatron-llama": from Megatron-core's names into Hugging Face's (linear_qkv split into
 *     q, k, v by query group; linear_fc1 into gate and up; the renames of the other tensors).
 * `head_size`: the attention head size (config.json's head_dim, or hidden_size /
 * num_attention_heads). Errors: SDRT_INVALID_ARGUMENT for NULL name or out, a name that is
 * neither (the message lists the built-in ones), a head size outside [1, 2^40];
 * SDRT_RESOURCE_EXHAUSTED when memory runs out. *out is the caller's to destroy. */
SDRT_C_API sdrt_status_t sdrt_weight_map_builtin(const char* name, int64_t head_size,
                                                 sdrt_weight_map_t* out);

/* Local. Frees the map; NULL is a no-op. Loads and plans already made with it are not
 * affected. SDRT_INVALID_ARGUMENT for a handle that is not a live weight map's (a second
 * destroy). */
SDRT_C_API sdrt_status_t sdrt_weight_map_destroy(sdrt_weight_map_t map);

/* ------------------------------------------------------------------------------------------
 * Statistics of the last call on this thread (local)
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_stats_t {
  size_t struct_size;
  int64_t bytes_read;    /* load: bytes pread returned (pieces plus gaps read through) */
  int64_t bytes_kept;    /* load: bytes of this rank's pieces */
  int64_t reads;         /* load: planned reads */
  int64_t bytes_sent;    /* gather/broadcast/reshard: tensor bytes this rank sent */
  int64_t bytes_received; /* gather/broadcast/reshard: tensor bytes this rank received */
  int64_t bytes_written; /* gather_write: bytes of the file (writing rank); offload: bytes copied */
  int64_t collectives;   /* every Communicator call, metadata ones included */
  int64_t data_collectives; /* gather/broadcast: the exchanges moving tensor bytes */
  double seconds;        /* wall time of the call */
} sdrt_stats_t;
#define SDRT_STATS_INIT {sizeof(sdrt_stats_t), 0, 0, 0, 0, 0, 0, 0, 0, 0.0}

/* The figures of the last load, gather, broadcast, distribute, reshard execute or offload
 * call on this thread (successful or not; zeros before any). Fields a call does not
 * measure are 0. SDRT_INVALID_ARGUMENT for NULL or a bad struct_size. */
SDRT_C_API sdrt_status_t sdrt_get_last_stats(sdrt_stats_t* stats);

/* ------------------------------------------------------------------------------------------
 * (1) Load a checkpoint into the engine's buffers: every rank reads its own bytes
 * ---------------------------------------------------------------------------------------- */

/* Who reads a full checkpoint (sdrt_load_options_t.read; LoadOptions::read in C++). */
typedef enum sdrt_read_t {
  SDRT_READ_AUTO = 0, /* ALL when every rank sees the same files (size, mtime, header hash),
                       * else ROOT; ALL without a communicator */
  SDRT_READ_ALL = 1,  /* every rank reads its own pieces' bytes */
  SDRT_READ_ROOT = 2  /* rank 0 reads the whole checkpoint and broadcasts the pieces */
} sdrt_read_t;

typedef struct sdrt_load_options_t {
  size_t struct_size;
  /* NULL: no communication (each rank alone; `rank` required). Else collective over it:
   * the ranks agree before reading (options, read, planning errors) and after (read
   * errors), so one rank's error is every rank's. With read ROOT or share_reads every rank
   * adds the same tensors and the meshes span exactly its ranks; with ALL and no
   * share_reads a rank adds the tensors it holds, on meshes of its ranks that hold it (a
   * pipeline stage's, sdrt_parallel_layout_place). */
  sdrt_comm_t comm;
  int32_t rank;            /* this process's rank in the meshes; -1: comm's rank */
  int32_t strict;          /* nonzero: remove entries the checkpoint lacks */
  double timeout_seconds;  /* 0: the communicator's */
  int32_t staging_buffers; /* >= 1 (read ALL) */
  int64_t staging_bytes;   /* >= 4096: the longest single read (read ALL) */
  int32_t direct_io;       /* nonzero: O_DIRECT reads (page cache bypassed; read ALL) */
  int64_t max_gap_bytes;   /* >= 0: the largest gap between kept runs read through (ALL) */
  void* stream;            /* cudaStream_t waited for before writing CUDA buffers; NULL */
  /* Filled when not NULL: the number of entries the checkpoint lacks / of checkpoint
   * tensors the state dict lacks. */
  int64_t* num_missing;
  int64_t* num_unexpected;
  int32_t read;            /* an sdrt_read_t; every rank passes the same */
  /* >= 64: the most bytes of one collective bucket: read ROOT's broadcast, a sharded
   * folder's reshard (peak extra memory three buckets per rank) */
  int64_t bucket_bytes;
  /* NULL: each entry is filled from the checkpoint tensor of its name. Else how the
   * checkpoint's tensors make the entries (sdrt_weight_map_builtin,
   * sdrt_weight_map_from_json): an entry a rule makes (a fused qkv_proj, a padded
   * embedding, a renamed tensor) is filled from the tensors the rule names (read ALL: each
   * rank reads only the rows of its own pieces, straight into its buffer; a pad's extra
   * rows are zeroed); entries no rule makes load by name. Borrowed for the call (it may be
   * destroyed once sdrt_load returns). Every rank passes the same map (compared in the
   * agreement). With read ROOT (or AUTO when it picks ROOT) rank 0 sends the checkpoint's
   * tensor list that the others lower against, and a cast from one float dtype to
   * another is refused (rank 0 sends the checkpoint's dtypes; FP8 codes are quantized and
   * dequantized as with ALL). */
  sdrt_weight_map_t weight_map;
  /* 0 to 64: reader threads per rank preading at once (read ALL), each into a staging
   * buffer of its own (pinned for CUDA buffers) or straight into the buffers; more than
   * one pays where cores are free (one rank per node) or a GPU is fed. 0 (the default):
   * chosen per call, 1 into CPU buffers, into CUDA buffers half the CPUs the process may
   * run on (its affinity mask), 1 to 4. */
  int32_t readers;
  /* Nonzero (read ALL): what several ranks of one host fill alike (a replicated tensor, a
   * data-parallel replica's pieces) is read from storage by one of them and sent to the
   * others over `comm` (the hosts by name), so each host reads its distinct bytes once;
   * without `comm`, or where `rank` is not comm's rank, it does nothing (ranks that differ
   * in this fail the agreement); every rank passes the same. Default 0: from the page cache
   * each rank reading its own bytes is faster. There is no map_results (C++
   * LoadOptions::map_results, `sdrt load --map-results`): the entries here are the engine's
   * own buffers, filled in place, which a view of the file's mapping cannot be. */
  int32_t share_reads;
} sdrt_load_options_t;
#define SDRT_LOAD_OPTIONS_INIT                                                               \
  {sizeof(sdrt_load_options_t), NULL, -1, 0, 0.0, 2, (int64_t)256 << 20, 0, (int64_t)1 << 20, \
   NULL, NULL, NULL, SDRT_READ_AUTO, (int64_t)256 << 20, NULL, 0, 0}

/* Fills the engine's buffers in `state_dict` from `checkpoint` (a safetensors file, a
 * Hugging Face folder, a folder of safetensors files or an sdrt sharded folder) in place
 * (an entry added without a spec is read whole, as a Replicate one): for every entry whose
 * name is a checkpoint tensor, this rank's piece (the whole tensor for a plain entry or a
 * Replicate placement; the owned index runs of Shard/_StridedShard placements, uneven and
 * empty pieces as PyTorch cuts them). Rank i's piece of a DTensor is the box PyTorch's
 * compute_local_shape_and_global_offset gives rank i's mesh coordinate; a rank off
 * coordinate 0 of a Partial mesh dim gets the reduction's identity.
 * Result: what torch.distributed._state_dict_utils._broadcast_state_dict(full, local)
 * leaves in local (LoadStateDict in C++), whoever reads (options->read):
 *   ALL: each piece is read with pread straight from the files into staging buffers and
 *     copied into the entry's buffer (any strides). sdrt allocates nothing visible to the
 *     caller; staging is staging_buffers x staging_bytes (at least readers + 1 buffers
 *     with readers > 1), freed on return. Nothing goes through another rank: every rank
 *     reads only its pieces' bytes (read amplification <= 1.032); with share_reads what the
 *     ranks of a host fill alike is read there once and sent to the others.
 *   ROOT: rank 0 copies the whole checkpoint out of its mapping (registered with CUDA for
 *     CUDA buffers) and broadcasts it in buckets of bucket_bytes; the other ranks' files
 *     are not read. options->comm is required.
 *   AUTO (the default): ALL when every rank sees the same files, else ROOT.
 * An sdrt sharded folder (written by `sdrt shard` or `sdrt reshard`, in any layout of any
 * number of ranks) loads into the same buffers with the same result, as a reshard from
 * the folder's layout, whatever read says but ROOT (refused): options->comm is required;
 * rank file f is mapped by rank f mod size, and each rank receives over the communicator
 * only the bytes of its pieces that its own rank files lack, in buckets of bucket_bytes
 * (peak extra memory three buckets); staging_buffers, staging_bytes and max_gap_bytes do not
 * apply, direct_io must be 0.
 * The stats give bytes_read (ALL: bytes pread returned; ROOT: the checkpoint on rank 0;
 * sharded: the pieces of the rank files it mapped), bytes_kept, reads (ALL: planned reads;
 * sharded: rank files), bytes_sent (ROOT: the broadcast's; sharded: this rank's),
 * bytes_received (sharded), collectives and data_collectives (ROOT: the broadcast's;
 * sharded: the reshard's collectives).
 * Collective over options->comm when it is set, else local. `checkpoint` must stay open and
 * its files unchanged during the call.
 * CUDA buffers: one device per call; copies run on sdrt's own stream or the broadcast's,
 * complete on return (a sharded folder: CPU buffers, with an MPI communicator).
 * Errors (with a communicator the same on every rank, but what keeps a rank from finding
 * it: see the top of this header): SDRT_INVALID_ARGUMENT for NULL handles, bad options or
 * struct_size (readers outside [0, 64]; share_reads on ranks some
 * of which pass a rank other than comm's), a read other than the sdrt_read_t values, ranks
 * passing different options, a buffer whose global shape is not the checkpoint's or whose
 * dtype is neither the checkpoint's nor a float dtype it is cast to (read ALL and sharded
 * folders convert each element as PyTorch's Tensor.to(); read ROOT casts nothing), a
 * buffer that is not this rank's local shape, a mesh that lacks the rank, has a rank
 * beyond the communicator's or (ROOT, share_reads) does not span it, ranks whose state
 * dicts differ (ROOT, share_reads), a damaged or foreign rank file of a
 * sharded folder (naming it), a sharded folder with read ROOT, with
 * direct_io or with a rank other than the communicator's, direct_io with read ROOT, a
 * weight_map that is not a live weight map handle (on every rank, before any byte moves),
 * ranks passing different maps, a map's
 * rule that cannot hold for these buffers (naming the rule and the tensor: a fused buffer
 * whose rows are not its components' pieces, a component the checkpoint lacks, heads that
 * cannot be cut into the ranks' parts, a padded buffer of the wrong size);
 * SDRT_INVALID_ARGUMENT for a weight map's cast between float dtypes with read ROOT (or
 * AUTO that picked ROOT), naming the entry;
 * SDRT_FAILED_PRECONDITION for read ROOT or a sharded folder without options->comm or
 * buffers on two CUDA devices; SDRT_UNAVAILABLE for CUDA buffers without CUDA;
 * SDRT_DATA_LOSS for a short read, or a file of the checkpoint changed since
 * sdrt_checkpoint_open (read ALL opens it again by path: another file renamed over it, or
 * its size changed; the message names it); the errno's code for a failed
 * open or pread; SDRT_RESOURCE_EXHAUSTED when staging cannot be allocated;
 * SDRT_DEADLINE_EXCEEDED past the timeout. On error buffers may be partly written. */
SDRT_C_API sdrt_status_t sdrt_load(sdrt_checkpoint_t checkpoint, sdrt_state_dict_t state_dict,
                                   const sdrt_load_options_t* options);

/* ------------------------------------------------------------------------------------------
 * (2) Gather a sharded state dict and write it as one safetensors file
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_gather_options_t {
  size_t struct_size;
  sdrt_comm_t comm;        /* required */
  double timeout_seconds;  /* 0: the communicator's */
  /* Ranks (of comm) that keep the full tensors (and, in gather_write, write the file);
   * NULL/0: every rank keeps them (gather_write: rank 0 writes). */
  const int32_t* ranks_only;
  int32_t num_ranks_only;
  int32_t cpu_offload;    /* nonzero: results on the CPU (gather_write always is) */
  int64_t bucket_bytes;   /* >= 1: the most full bytes one collective moves */
  void* stream;           /* cudaStream_t waited for before reading CUDA buffers; NULL */
} sdrt_gather_options_t;
#define SDRT_GATHER_OPTIONS_INIT \
  {sizeof(sdrt_gather_options_t), NULL, 0.0, NULL, 0, 0, (int64_t)256 << 20, NULL}

/* Collective over options->comm. Gathers every DTensor of `state_dict` into its full
 * tensor (Partial mesh dims reduced, shards placed by their owned index sets), plain
 * tensors passing through, and returns a new state dict (*out, the caller destroys it)
 * owning contiguous full tensors on the ranks in ranks_only (every rank when empty), an
 * empty one elsewhere. Mirrors _gather_state_dict(state_dict, pg, cpu_offload, ranks_only).
 * Errors, the same on every rank: SDRT_INVALID_ARGUMENT (NULLs, options, skeletons that
 * differ, a local shape that is not this rank's, meshes that do not span the communicator);
 * SDRT_DEADLINE_EXCEEDED; the backends' errors. */
SDRT_C_API sdrt_status_t sdrt_gather(sdrt_state_dict_t state_dict,
                                     const sdrt_gather_options_t* options,
                                     sdrt_state_dict_t* out);

/* Collective over options->comm. Gathers as sdrt_gather with cpu_offload, one bucket at a
 * time on ranks that do not write, and the writing rank (ranks_only[0], else 0) writes the
 * full tensors as one safetensors file at `path` (atomically: a temporary file renamed
 * into place, replacing a file there, or a symbolic link, never written through; the data
 * laid out as safetensors' Python writer does). `path` is read on the
 * writing rank only (the others may pass NULL). The status is agreed: every rank returns
 * the writer's error ("rank R: ..."). Nothing is returned but the file.
 * Errors: as sdrt_gather; the errno's code for a failed write (SDRT_NOT_FOUND for a
 * missing folder, SDRT_PERMISSION_DENIED); SDRT_INVALID_ARGUMENT for a NULL path on the
 * writing rank, more than one rank in ranks_only or a writer that is not one of the
 * communicator's ranks (each on every rank). */
SDRT_C_API sdrt_status_t sdrt_gather_write(sdrt_state_dict_t state_dict, const char* path,
                                           const sdrt_gather_options_t* options);

/* ------------------------------------------------------------------------------------------
 * (3) Broadcast and distribute
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_broadcast_options_t {
  size_t struct_size;
  sdrt_comm_t comm;        /* required */
  double timeout_seconds;  /* 0: the communicator's */
  int32_t root;            /* the rank whose `full` is sent */
  int64_t bucket_bytes;    /* >= 1 */
  void* stream;            /* cudaStream_t waited for first; NULL */
} sdrt_broadcast_options_t;
#define SDRT_BROADCAST_OPTIONS_INIT \
  {sizeof(sdrt_broadcast_options_t), NULL, 0.0, 0, (int64_t)256 << 20, NULL}

/* Collective over options->comm. `full` (full tensors, read on the root only; other ranks
 * pass any state dict, e.g. an empty one) is sent to every rank, which writes its pieces
 * into the buffers of `local` in place (entries of `local` the root lacks are untouched).
 * Mirrors _broadcast_state_dict(full, local, pg). Plain entries of `local` get the whole
 * tensor, DTensor entries their piece, in their own buffers; `full` may be NULL on the
 * other ranks. Errors, the same on every rank: SDRT_INVALID_ARGUMENT (NULLs, options, a
 * shape or dtype differing from the root's, a bad root); SDRT_DEADLINE_EXCEEDED; the
 * backends' errors. */
SDRT_C_API sdrt_status_t sdrt_broadcast(sdrt_state_dict_t full, sdrt_state_dict_t local,
                                        const sdrt_broadcast_options_t* options);

typedef struct sdrt_distribute_options_t {
  size_t struct_size;
  sdrt_comm_t comm;        /* NULL: no communication (`rank` required) */
  int32_t rank;            /* -1: comm's rank */
  double timeout_seconds;  /* 0: the communicator's */
  void* stream;            /* cudaStream_t waited for before reading CUDA buffers; NULL */
} sdrt_distribute_options_t;
#define SDRT_DISTRIBUTE_OPTIONS_INIT {sizeof(sdrt_distribute_options_t), NULL, -1, 0.0, NULL}

/* Every rank holds `full`; each copies its pieces into the buffers of `local` in place (no
 * data moves between ranks). Mirrors _distribute_state_dict(full, local). Collective over
 * options->comm when set (one metadata exchange: every rank returns the same error and
 * full state dicts that differ are found), else local. The library cuts each piece into
 * a new tensor, which sdrt then copies into the entry's buffer (one extra copy per piece).
 * Errors: SDRT_INVALID_ARGUMENT (NULLs, options, an entry of `local` that `full` lacks,
 * shapes or dtypes that differ, no comm and rank -1). */
SDRT_C_API sdrt_status_t sdrt_distribute(sdrt_state_dict_t full, sdrt_state_dict_t local,
                                         const sdrt_distribute_options_t* options);

/* ------------------------------------------------------------------------------------------
 * (4) Reshard: plan once, execute every step (peer to peer)
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_reshard_plan_s* sdrt_reshard_plan_t;

typedef struct sdrt_reshard_options_t {
  size_t struct_size;
  sdrt_comm_t comm;        /* required; spans every rank of both sides */
  double timeout_seconds;  /* 0: the communicator's */
  int64_t bucket_bytes;    /* >= 64: the most a rank sends or receives in one exchange */
  /* NULL: destination entries are matched with source entries by name. Else how the
   * destination's entries are made from the source's (renamed, fused, split, padded:
   * sdrt_weight_map_builtin, sdrt_weight_map_from_json). Borrowed for the call: the plan
   * keeps what it needs, so the map may be destroyed once sdrt_reshard_plan_create returns
   * (executes and bindings of the plan apply it). Every rank passes the same map. */
  sdrt_weight_map_t weight_map;
} sdrt_reshard_options_t;
#define SDRT_RESHARD_OPTIONS_INIT \
  {sizeof(sdrt_reshard_options_t), NULL, 0.0, (int64_t)256 << 20, NULL}

/* Collective over options->comm. Plans moving `source` (what this rank holds in the source
 * layout; may be empty) into `destination` (its buffers in the destination layout; may be
 * empty): every byte a destination rank needs and does not hold moves once, from a rank
 * that holds it. The plan keeps the communicator (which must outlive its use: once it is
 * destroyed the plan's calls are SDRT_FAILED_PRECONDITION) and the layouts, not the
 * buffers. A destination entry of another float dtype than its source (bfloat16,
 * float16, float32, float64, float8 e4m3fn / e5m2 / e8m0fnu) is cast as PyTorch's
 * Tensor.to() casts, on the CPU or the GPU, the wire carrying the narrower dtype
 * (ReshardStateDict's rules).
 * PyTorch's counterpart: DTensor.redistribute (one mesh only).
 * With options->weight_map, each destination entry a rule makes (a fused, split, padded or
 * renamed tensor) is planned from the source entries the rule names, each rank sending and
 * receiving only the rows of its pieces.
 * Errors, the same on every rank: SDRT_INVALID_ARGUMENT (NULLs, options, layouts whose
 * global shapes differ, or dtypes other than such a cast, a destination entry no source
 * holds, a weight_map that is not a live weight map handle, ranks passing different maps,
 * a map's rule that cannot hold for these layouts, naming the rule and the tensor);
 * SDRT_DEADLINE_EXCEEDED; the backends' errors. */
SDRT_C_API sdrt_status_t sdrt_reshard_plan_create(sdrt_state_dict_t source,
                                                  sdrt_state_dict_t destination,
                                                  const sdrt_reshard_options_t* options,
                                                  sdrt_reshard_plan_t* out);
typedef struct sdrt_reshard_execute_options_t {
  size_t struct_size;
  double timeout_seconds;  /* 0: the communicator's */
  void* stream;            /* cudaStream_t waited for before reading CUDA buffers; NULL */
} sdrt_reshard_execute_options_t;
#define SDRT_RESHARD_EXECUTE_OPTIONS_INIT {sizeof(sdrt_reshard_execute_options_t), 0.0, NULL}

/* Collective over the plan's communicator. Moves the current bytes of `source` into the
 * buffers of `destination`, which must have the layouts planned (the same shapes, dtypes,
 * placements and names; the buffers may be other ones): every RL step, say. `options` may
 * be NULL. Errors: SDRT_INVALID_ARGUMENT (NULLs, bad options, state dicts that are not the
 * planned layouts); SDRT_UNIMPLEMENTED (a Partial contribution to be reduced from a CUDA
 * bucket); SDRT_FAILED_PRECONDITION (the plan's communicator was destroyed);
 * SDRT_DEADLINE_EXCEEDED; the backends' errors. */
SDRT_C_API sdrt_status_t sdrt_reshard_execute(sdrt_reshard_plan_t plan, sdrt_state_dict_t source,
                                              sdrt_state_dict_t destination,
                                              const sdrt_reshard_execute_options_t* options);
/* Local. NULL is a no-op; SDRT_INVALID_ARGUMENT for a handle that is not a live plan's. */
SDRT_C_API sdrt_status_t sdrt_reshard_plan_destroy(sdrt_reshard_plan_t plan);

/* A plan bound to one source and one destination state dict's buffers: the weight sync of
 * an engine and a trainer that keep their buffers from step to step, with the per-tensor
 * work of sdrt_reshard_execute done once (BindReshard in C++). */
typedef struct sdrt_reshard_bound_s* sdrt_reshard_bound_t;

/* Collective over the plan's communicator (one agreement). Checks `source` and
 * `destination` against the plan as sdrt_reshard_execute does and binds the plan to their
 * buffers: *out (the caller destroys it) keeps sdrt's own references to them and to the
 * plan, so the state dict handles and the plan may be destroyed afterwards, but the buffers
 * themselves must stay valid and in place, and the communicator alive, until *out is
 * destroyed. It also holds the reshard's buckets (the peak extra memory of an execute)
 * for its lifetime. `options` may be NULL (only its timeout is read here). Errors, the same
 * on every rank: SDRT_INVALID_ARGUMENT (NULLs, bad options, state dicts that are not the
 * planned layouts); SDRT_RESOURCE_EXHAUSTED (the buckets); SDRT_UNIMPLEMENTED (Partial
 * sources on CUDA); SDRT_FAILED_PRECONDITION (the plan's communicator was destroyed);
 * SDRT_DEADLINE_EXCEEDED; the backends' errors. Only running out of
 * memory for the handle itself, after the agreement, is one rank's alone. */
SDRT_C_API sdrt_status_t sdrt_reshard_bind(sdrt_reshard_plan_t plan, sdrt_state_dict_t source,
                                           sdrt_state_dict_t destination,
                                           const sdrt_reshard_execute_options_t* options,
                                           sdrt_reshard_bound_t* out);

/* Collective over the plan's communicator: every rank calls it as many times, with no
 * agreement first; one call at a time per binding. Moves the bytes the bound source buffers hold now into the bound
 * destination buffers (every RL step, say); the last stats give the bytes sent and
 * received and the exchanges. `options` may be NULL; its stream is waited for before CUDA
 * buffers are read. Errors: SDRT_INVALID_ARGUMENT (NULL bound, bad options);
 * SDRT_FAILED_PRECONDITION (the plan's communicator was destroyed); SDRT_DEADLINE_EXCEEDED
 * (a rank that did not call, or whose process ended); the backends' errors. A peer that
 * ends inside a call can leave the live ranks disagreeing on whether that call completed
 * (one finished its part, another timed out waiting): before going on with a new peer,
 * agree over the ranks that remain on the last call all of them completed (as
 * examples/weight_sync does over its own job). */
SDRT_C_API sdrt_status_t sdrt_reshard_bound_execute(sdrt_reshard_bound_t bound,
                                                    const sdrt_reshard_execute_options_t* options);
/* Local. NULL is a no-op; SDRT_INVALID_ARGUMENT for a handle that is not a live binding's. */
SDRT_C_API sdrt_status_t sdrt_reshard_bound_destroy(sdrt_reshard_bound_t bound);

/* ------------------------------------------------------------------------------------------
 * (5) Offload to CPU memory
 * ---------------------------------------------------------------------------------------- */

typedef struct sdrt_offload_options_t {
  size_t struct_size;
  int32_t pin_memory;    /* nonzero: page-locked memory (needs CUDA: SDRT_UNAVAILABLE without) */
  int32_t share_memory;  /* nonzero: POSIX shared memory */
  void* stream;          /* cudaStream_t waited for before reading CUDA buffers; NULL */
} sdrt_offload_options_t;
#define SDRT_OFFLOAD_OPTIONS_INIT {sizeof(sdrt_offload_options_t), 0, 0, NULL}

/* Local. A new state dict (*out, the caller destroys it) with a CPU copy of every tensor
 * of `state_dict` (DTensors keep mesh and placements around a CPU local), all in one
 * allocation (pinned or shared when asked; 256-byte aligned slots), released when *out is
 * destroyed. CUDA copies are enqueued on `stream` (after the work already there; NULL: the
 * legacy default stream) and complete on return. Mirrors _create_cpu_state_dict then
 * _copy_state_dict (torch.distributed._state_dict_utils).
 * Errors: SDRT_INVALID_ARGUMENT (NULLs, options); SDRT_RESOURCE_EXHAUSTED when the memory
 * does not fit; SDRT_UNAVAILABLE for pinned memory or CUDA tensors without CUDA. */
SDRT_C_API sdrt_status_t sdrt_offload(sdrt_state_dict_t state_dict,
                                      const sdrt_offload_options_t* options,
                                      sdrt_state_dict_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SDRT_C_API_H_ */
