// DLPack interop: hand sdrt tensors to other frameworks and take theirs, zero copy.
//
// Both directions keep the bytes alive through the owner's deleter: an exported
// DLManagedTensor holds a reference to the sdrt Storage until its deleter runs; an
// imported one is released (its deleter called) when the last sdrt tensor viewing it
// goes away. Dtypes map through the table in tensor/dtype.h (DLPack 1.1 codes).
#ifndef SDRT_TENSOR_BACKEND_DLPACK_H_
#define SDRT_TENSOR_BACKEND_DLPACK_H_

#include <dlpack/dlpack.h>

#include "absl/status/statusor.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// Exports `tensor` (any strides, CPU or CUDA) as a newly allocated DLManagedTensor. The
// DLPack 0.6 struct has no read-only flag: exporting a tensor that views read-only memory
// (a zero-copy SafetensorsFile tensor maps its file PROT_READ) hands the consumer memory
// it must not write; Clone() such tensors first when the consumer may write. The
// caller (the consumer) owns the result and must call its deleter exactly once. The
// DLTensor's data is tensor.data_ptr() with byte_offset 0; shape and strides are in
// elements. Sub-byte dtypes are exported as DLPack 1.1 describes them (bits 4 or 6, packed,
// shape and strides in elements). Pinned host storage is reported as kDLCUDAHost. FailedPrecondition for
// undefined and meta tensors (DLPack has no storage-less device).
absl::StatusOr<DLManagedTensor*> ToDLPack(const Tensor& tensor);

// Imports `managed` without copying. On success sdrt takes ownership and calls
// managed->deleter(managed) when the last tensor sharing the bytes is destroyed (a null
// deleter is allowed). On error ownership stays with the caller. Accepted devices:
// kDLCPU and kDLCUDAHost (-> CPU), kDLCUDA and kDLCUDAManaged (-> CUDA:device_id). A
// kDLCUDAHost storage is pinned (is_pinned()) but not owned: PinStorage leaves it alone and
// nothing is unregistered when it is released.
// InvalidArgument for null input, unknown dtypes, lanes != 1, negative sizes or strides,
// other device types, and sub-byte views whose runs begin or end inside a byte (Tensor's
// rule).
absl::StatusOr<Tensor> FromDLPack(DLManagedTensor* managed);

}  // namespace sdrt

#endif  // SDRT_TENSOR_BACKEND_DLPACK_H_
