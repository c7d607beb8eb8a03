// The installed-package check's program (scripts/install-check.sh): through the umbrella
// header alone, writes a small safetensors file, reads it back, checks every value and its
// slice view, loads one row of it as rank 1 of a 2-rank mesh without a communicator
// (LoadStateDict), reshards that over a world of one (ReshardStateDict over a
// SelfCommunicator: any build, no MPI needed), and prints the library's version. Exit code
// 0 when all of it holds.
#include <sdrt/sdrt.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: consumer FOLDER");
  if (std::strcmp(sdrt::Version(), SDRT_VERSION_STRING) != 0) {
    return Fail(std::string("library version ") + sdrt::Version() + " != header version " +
                SDRT_VERSION_STRING);
  }
  if (sdrt::AbiVersion() != SDRT_ABI_VERSION) return Fail("ABI version mismatch");

  absl::StatusOr<sdrt::Tensor> w = sdrt::Tensor::Empty({2, 3}, sdrt::DType::kFloat32);
  if (!w.ok()) return Fail(w.status().ToString());
  for (int i = 0; i < 6; ++i) w->data<float>()[i] = 0.5f * static_cast<float>(i);
  absl::StatusOr<sdrt::Tensor> b = sdrt::Tensor::Zeros({4}, sdrt::DType::kInt64);
  if (!b.ok()) return Fail(b.status().ToString());
  b->data<int64_t>()[3] = 42;

  const std::string path = std::string(argv[1]) + "/consumer.safetensors";
  std::vector<std::pair<std::string, sdrt::Tensor>> tensors = {{"layer.w", *w}, {"layer.b", *b}};
  absl::Status written = sdrt::WriteSafetensors(path, tensors, {{"format", "pt"}});
  if (!written.ok()) return Fail(written.ToString());

  absl::StatusOr<sdrt::SafetensorsFile> file = sdrt::SafetensorsFile::Open(path);
  if (!file.ok()) return Fail(file.status().ToString());
  if (file->entries().size() != 2) return Fail("expected 2 tensors");
  absl::StatusOr<sdrt::Tensor> w2 = file->Get("layer.w");
  absl::StatusOr<sdrt::Tensor> b2 = file->Get("layer.b");
  if (!w2.ok() || !b2.ok()) return Fail("Get failed");
  if (w2->dtype() != sdrt::DType::kFloat32 || w2->numel() != 6) return Fail(w2->ToString());
  for (int i = 0; i < 6; ++i) {
    if (w2->data<float>()[i] != 0.5f * static_cast<float>(i)) return Fail("layer.w differs");
  }
  if (b2->data<int64_t>()[3] != 42 || b2->data<int64_t>()[0] != 0) return Fail("layer.b differs");
  absl::StatusOr<sdrt::Tensor> row = w2->Select(0, 1);  // a view: [1.5, 2, 2.5]
  if (!row.ok()) return Fail(row.status().ToString());
  absl::StatusOr<sdrt::Tensor> copy = row->Contiguous();
  if (!copy.ok() || copy->data<float>()[2] != 2.5f) return Fail("view of row 1 differs");

  // LoadStateDict (sdrt/core/distributed/load_state_dict.h), no communicator: rank 1 of
  // a Shard(0) mesh of 2 ranks reads row 1 of layer.w into a fresh local.
  absl::StatusOr<sdrt::CheckpointSource> source = sdrt::CheckpointSource::Open(path);
  if (!source.ok()) return Fail(source.status().ToString());
  absl::StatusOr<sdrt::DeviceMesh> mesh2 = sdrt::DeviceMesh::Create({2});
  absl::StatusOr<sdrt::Tensor> meta = sdrt::Tensor::Meta({1, 3}, sdrt::DType::kFloat32);
  if (!mesh2.ok() || !meta.ok()) return Fail("DeviceMesh::Create or Tensor::Meta failed");
  absl::StatusOr<sdrt::DTensor> row_piece = sdrt::DTensor::Make(
      *meta, std::make_shared<const sdrt::DeviceMesh>(*mesh2), {sdrt::Placement::Shard(0)}, {2, 3});
  if (!row_piece.ok()) return Fail(row_piece.status().ToString());
  sdrt::Map local;
  local.Set("layer.w", sdrt::Value(*row_piece));
  sdrt::LoadOptions load;
  load.rank = 1;
  absl::StatusOr<sdrt::LoadResult> loaded = sdrt::LoadStateDict(*source, local, load);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  const sdrt::Tensor& got = local.Find("layer.w")->as_dtensor().local();
  if (got.numel() != 3 || got.data<float>()[0] != 1.5f || got.data<float>()[2] != 2.5f) {
    return Fail("LoadStateDict: rank 1's row of layer.w differs: " + got.ToString());
  }

  // ReshardStateDict (sdrt/core/distributed/reshard_state_dict.h) over a world of one: the
  // loaded row, Shard(0) over one rank, into a Replicate copy.
  sdrt::SelfCommunicator self;
  auto mesh1 = std::make_shared<const sdrt::DeviceMesh>(*sdrt::DeviceMesh::Create({1}));
  absl::StatusOr<sdrt::Tensor> zeros = sdrt::Tensor::Zeros({1, 3}, sdrt::DType::kFloat32);
  if (!zeros.ok()) return Fail(zeros.status().ToString());
  absl::StatusOr<sdrt::DTensor> from =
      sdrt::DTensor::Make(got, mesh1, {sdrt::Placement::Shard(0)}, {1, 3});
  absl::StatusOr<sdrt::DTensor> to =
      sdrt::DTensor::Make(*zeros, mesh1, {sdrt::Placement::Replicate()}, {1, 3});
  if (!from.ok() || !to.ok()) return Fail("DTensor::Make failed");
  sdrt::Map source_sd;
  source_sd.Set("row", sdrt::Value(*from));
  sdrt::Map destination;
  destination.Set("row", sdrt::Value(*to));
  sdrt::ReshardOptions reshard;
  reshard.comm = &self;
  absl::Status resharded = sdrt::ReshardStateDict(source_sd, destination, reshard);
  if (!resharded.ok()) return Fail(resharded.ToString());
  if (zeros->data<float>()[1] != 2.0f) return Fail("ReshardStateDict: the copy differs");

  std::printf("sdrt %s (ABI %d): wrote and read back %s (%s, %s), loaded and resharded row 1\n",
              sdrt::Version(), sdrt::AbiVersion(), path.c_str(), w2->ToString().c_str(),
              b2->ToString().c_str());
  return 0;
}
