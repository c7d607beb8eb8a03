// Golden JSON codec (test-only): the JSON form in which the Python golden scripts under
// tests/golden/ write state dict values, and its decoding into sdrt's Value tree.
//
// Every value is a JSON object with a "type":
//   {"type":"none"}   {"type":"bool","value":true}   {"type":"int","value":5}
//   {"type":"float","value":1.5}       non-finite values as "nan", "inf", "-inf"
//   {"type":"str","value":"x"}         {"type":"bytes","hex":"0a0b"}
//   {"type":"tensor","dtype":"float32","shape":[2,3],"hex":"..."}   row-major
//       little-endian bytes; meta tensors carry "device":"meta" and no "hex"
//   {"type":"dtensor","mesh_shape":[4],"placements":"[S(0)]","global_shape":[8,4],
//    "global_stride":[4,1],"local":<tensor>}        mesh over ranks 0..N-1, on "cpu"
//   {"type":"list","items":[...]}      {"type":"tuple","items":[...]}
//   {"type":"dict","items":[[key, value], ...]}      insertion order; a key is a JSON
//       string, or a JSON integer for a Python int key (decoded to its decimal string)
//   {"type":"object","name":"BytesIO"}  an opaque Python object
// Object paths (flatten mappings) are JSON arrays of strings and integers; see
// core/state_dict/flatten.h for their C++ form.
//
// Decoding is strict: unknown types, missing or mistyped fields, bad hex, a hex length
// that is not numel * element size, and integers outside int64 are InvalidArgument
// naming the field. Encoding is the inverse for every value Decode produces (dict keys
// always come back as strings); it also prints what Decode cannot read (CUDA tensors with
// "device", ShardedTensors as {"type":"sharded_tensor","repr":...}) so that test failure
// messages can show any tree.
#ifndef SDRT_TESTS_SUPPORT_GOLDEN_CODEC_H_
#define SDRT_TESTS_SUPPORT_GOLDEN_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt {
namespace testing_golden {

// Decodes one encoded value. Tensors are new CPU (or meta) tensors owning their bytes.
// An "object" becomes an Opaque with that type_name, a fresh shared object (so two
// decodes of the same JSON are distinct objects, as two Python objects are) and a clone
// function that makes another fresh object of the same name.
absl::StatusOr<Value> DecodeGoldenValue(const nlohmann::json& j);

// Encodes `v` in the format above. Non-finite doubles become "nan", "inf", "-inf";
// tensors are written contiguously (CUDA tensors through a host copy).
nlohmann::json EncodeGoldenValue(const Value& v);

// Reads and parses `SDRT_TEST_DATA_DIR/<relative_path>`. NotFound when the file cannot be
// opened, DataLoss when it is not valid JSON.
absl::StatusOr<nlohmann::json> ReadGoldenJson(const std::string& relative_path);

}  // namespace testing_golden
}  // namespace sdrt

#endif  // SDRT_TESTS_SUPPORT_GOLDEN_CODEC_H_
