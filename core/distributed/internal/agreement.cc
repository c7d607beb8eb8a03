#include "sdrt/core/distributed/internal/agreement.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#define XXH_INLINE_ALL  // header-only use of libxxhash-dev
#include "xxhash.h"
#include "sdrt/core/distributed/internal/byte_codec.h"

namespace sdrt::internal {
namespace {

// The largest absl::StatusCode.
constexpr uint64_t kMaxStatusCode = static_cast<uint64_t>(absl::StatusCode::kUnauthenticated);

}  // namespace

std::string AgreementDescriber::operator()(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kTensor: {
      const Tensor& t = value.as_tensor();
      return absl::StrCat("Tensor ", DTypeName(t.dtype()), ShapeToString(t.shape()));
    }
    case ValueKind::kDTensor: {
      const DTensor& d = value.as_dtensor();
      if (last_placements_text_.empty() || d.placements() != last_placements_) {
        last_placements_ = d.placements();
        last_placements_text_ = PlacementsToString(d.placements());
      }
      absl::string_view mesh = "no mesh";
      if (d.mesh() != nullptr) {
        auto [it, inserted] = meshes_.try_emplace(d.mesh().get());
        if (inserted) it->second = d.mesh()->ToString();
        mesh = it->second;
      }
      std::string out;
      out.reserve(24 + 8 * d.global_shape().size() + last_placements_text_.size() + mesh.size());
      absl::StrAppend(&out, "DTensor ", DTypeName(d.dtype()));
      AppendShape(&out, d.global_shape());
      absl::StrAppend(&out, " ", last_placements_text_, " on ", mesh);
      return out;
    }
    case ValueKind::kShardedTensor: {
      const ShardedTensor& s = value.as_sharded();
      return absl::StrCat("ShardedTensor ", DTypeName(s.dtype()), ShapeToString(s.global_shape()));
    }
    default:
      return std::string(ValueKindName(value.kind()));
  }
}

struct SkeletonHasher::State {
  XXH64_state_t xxh;
};

SkeletonHasher::SkeletonHasher() : state_(std::make_unique<State>()) {
  XXH64_reset(&state_->xxh, 0);
}

SkeletonHasher::~SkeletonHasher() = default;

uint64_t SkeletonHasher::MeshDigest(const DeviceMesh& mesh) {
  auto [it, inserted] = meshes_.try_emplace(&mesh, 0);
  if (!inserted) return it->second;
  std::string bytes;  // once per mesh: length-prefixed fields, hashed in one call
  PutString(&bytes, mesh.device_type());
  PutU64(&bytes, mesh.shape().size());
  for (int64_t n : mesh.shape()) PutU64(&bytes, static_cast<uint64_t>(n));
  PutU64(&bytes, mesh.ranks().size());
  for (int64_t r : mesh.ranks()) PutU64(&bytes, static_cast<uint64_t>(r));
  PutU64(&bytes, mesh.dim_names().size());
  for (const std::string& name : mesh.dim_names()) PutString(&bytes, name);
  it->second = XXH64(bytes.data(), bytes.size(), 0);
  return it->second;
}

void SkeletonHasher::Add(absl::string_view path, const Value& value) {
  std::vector<uint64_t>& r = record_;
  r.clear();
  r.push_back(path.size());
  r.push_back(static_cast<uint64_t>(value.kind()));
  const auto add_shape = [&r](DType dtype, IntSpan shape) {
    r.push_back(static_cast<uint64_t>(dtype));
    r.push_back(shape.size());
    for (int64_t n : shape) r.push_back(static_cast<uint64_t>(n));
  };
  switch (value.kind()) {
    case ValueKind::kTensor:
      add_shape(value.as_tensor().dtype(), value.as_tensor().shape());
      break;
    case ValueKind::kDTensor: {
      const DTensor& d = value.as_dtensor();
      add_shape(d.dtype(), d.global_shape());
      r.push_back(d.placements().size());
      for (const Placement& p : d.placements()) {
        r.push_back(static_cast<uint64_t>(p.kind()));
        r.push_back(static_cast<uint64_t>(p.dim()));
        r.push_back(static_cast<uint64_t>(p.split_factor()));
        r.push_back(static_cast<uint64_t>(p.reduce_op()));
      }
      r.push_back(d.mesh() == nullptr ? 0 : 1);
      if (d.mesh() != nullptr) r.push_back(MeshDigest(*d.mesh()));
      break;
    }
    case ValueKind::kShardedTensor:
      add_shape(value.as_sharded().dtype(), value.as_sharded().global_shape());
      break;
    default:
      break;
  }
  XXH64_update(&state_->xxh, path.data(), path.size());
  XXH64_update(&state_->xxh, r.data(), r.size() * sizeof(uint64_t));
}

uint64_t SkeletonHasher::Digest() const { return XXH64_digest(&state_->xxh); }

std::string EncodeAgreementMessage(const AgreementMessage& message) {
  std::string out;
  out.reserve(6 * sizeof(uint64_t) + message.error.size() + message.options.size() +
              message.payload.size());
  PutU64(&out, message.skeleton_hash);
  PutU64(&out, static_cast<uint64_t>(message.code));
  PutU64(&out, message.verdict ? 1 : 0);
  PutString(&out, message.error);
  PutString(&out, message.options);
  PutString(&out, message.payload);
  return out;
}

std::optional<AgreementMessage> DecodeAgreementMessage(absl::string_view bytes) {
  ByteReader reader(bytes);
  AgreementMessage message;
  uint64_t code = 0, verdict = 0;
  if (!reader.U64(&message.skeleton_hash) || !reader.U64(&code) || code > kMaxStatusCode ||
      !reader.U64(&verdict) || verdict > 1 || !reader.String(&message.error) ||
      !reader.String(&message.options) || !reader.String(&message.payload) || !reader.AtEnd()) {
    return std::nullopt;
  }
  message.code = static_cast<absl::StatusCode>(code);
  message.verdict = verdict == 1;
  return message;
}

std::string EncodeSkeleton(const AgreementSkeleton& skeleton) {
  std::string out;
  PutU64(&out, skeleton.size());
  for (const auto& [path, description] : skeleton) {
    PutString(&out, path);
    PutString(&out, description);
  }
  return out;
}

uint64_t HashEncodedSkeleton(absl::string_view encoded) {
  return XXH64(encoded.data(), encoded.size(), 0);
}

std::optional<AgreementSkeleton> DecodeSkeleton(absl::string_view bytes) {
  ByteReader reader(bytes);
  uint64_t count = 0;
  // Every entry takes two length prefixes at least.
  if (!reader.U64(&count) || count > reader.Remaining() / (2 * sizeof(uint64_t))) {
    return std::nullopt;
  }
  AgreementSkeleton skeleton(static_cast<size_t>(count));
  for (auto& [path, description] : skeleton) {
    if (!reader.String(&path) || !reader.String(&description)) return std::nullopt;
  }
  if (!reader.AtEnd()) return std::nullopt;
  return skeleton;
}

}  // namespace sdrt::internal
