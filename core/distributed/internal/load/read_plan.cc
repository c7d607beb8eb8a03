// PlanReads (read_plan.h): segments of every kept box, then greedy coalescing per file.
#include "sdrt/core/distributed/internal/load/read_plan.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

class SegmentMaker {
 public:
  SegmentMaker(const ReadTensor& t, size_t index, int64_t max_read_bytes, std::vector<Segment>& out)
      : t_(t), index_(index), max_(max_read_bytes), out_(out) {}

  // Fills inner_ (elements per index of each dim); false when a size overflows.
  bool Init() {
    const size_t n = t_.shape.size();
    inner_.assign(std::max<size_t>(n, 1), 1);  // a 0-dim tensor: one element on "dim 0"
    int64_t acc = 1;
    for (size_t d = n; d-- > 0;) {
      inner_[d] = acc;
      if (MulOverflows(acc, t_.shape[d], &acc)) return false;
    }
    int64_t bits = 0;
    return !MulOverflows(acc, t_.element_bits, &bits) &&
           !__builtin_add_overflow(t_.offset, bits / 8, &bits);
  }

  // The first segment that would begin or end inside a byte (sub-byte dtypes), or "".
  const std::string& error() const { return error_; }

  // Emits the box: `prefix` (linear index of the fixed dims), [start, start + length) on
  // dim m, whole dims after m; cut to fit max_read_bytes.
  void Emit(int64_t prefix, int m, int64_t start, int64_t length) {
    const int64_t index_bits = inner_[m] * t_.element_bits;
    // Indices per cut: as many as fit a read, a multiple of those that make whole bytes.
    const int64_t granule = 8 / std::gcd<int64_t>(index_bits, 8);
    const int64_t chunk = max_ * 8 / index_bits / granule * granule;
    if (length * index_bits <= max_ * 8) {
      Push(prefix + start * inner_[m], m, length);
    } else if (chunk > 0) {  // always on the last dim: a granule (<= 32 bytes) fits a read
      for (int64_t s = start; s < start + length; s += chunk) {
        Push(prefix + s * inner_[m], m, std::min(chunk, start + length - s));
      }
    } else {  // one index is larger than a read: its sub-rows (m + 1 exists, see Plan)
      for (int64_t i = start; i < start + length; ++i) {
        Emit(prefix + i * inner_[m], m + 1, 0, t_.shape[m + 1]);
      }
    }
  }

  // Walks the kept indices of dims [0, j) and emits dim j's runs for each combination.
  void Walk(int d, int j, int64_t prefix) {
    if (d == j) {
      for (const IndexRun& r : (*t_.runs)[j]) {
        if (r.length > 0) Emit(prefix, j, r.global, r.length);
      }
      return;
    }
    for (const IndexRun& r : (*t_.runs)[d]) {
      for (int64_t i = r.global; i < r.global + r.length; ++i) {
        Walk(d + 1, j, prefix + i * inner_[d]);
      }
    }
  }

 private:
  void Push(int64_t first, int dim, int64_t length) {
    Segment s;
    s.tensor = index_;
    s.first = first;
    s.dim = dim;
    s.length = length;
    const int64_t first_bits = first * t_.element_bits;
    const int64_t bits = length * inner_[dim] * t_.element_bits;
    if ((first_bits % 8 != 0 || bits % 8 != 0) && error_.empty()) {
      error_ = absl::StrCat("the run of ", length * inner_[dim], " elements from element ", first,
                            " begins or ends inside a byte (", t_.element_bits, "-bit elements)");
    }
    s.bytes = bits / 8;
    s.file_offset = t_.offset + first_bits / 8;
    out_.push_back(s);
  }

  const ReadTensor& t_;
  size_t index_;
  int64_t max_;
  std::vector<Segment>& out_;
  IntVector inner_;
  std::string error_;
};

}  // namespace

absl::Status PlanTensorSegments(const ReadTensor& t, size_t index, int64_t max_read_bytes,
                                std::vector<Segment>& out) {
  // Built only for an error message.
  const auto where = [index] { return absl::StrCat("PlanReads: tensor ", index); };
  const int n = static_cast<int>(t.shape.size());
  // max_read_bytes is the caller's staging size, any int64: no read is longer than 2^59
  // bytes anyway, and the bits of one fit int64 (a staging of 2^60 bytes overflowed here).
  max_read_bytes = std::min<int64_t>(max_read_bytes, int64_t{1} << 59);
  if (t.element_bits < 1 || t.element_bits > 8 * max_read_bytes || t.offset < 0 || t.file < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": element bits ", t.element_bits,
                                                   ", offset ", t.offset, " or file ", t.file,
                                                   " out of range"));
  }
  if (t.runs == nullptr) return absl::OkStatus();  // nothing read
  if (t.runs->size() != t.shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": runs for ", t.runs->size(), " dims, shape has ", n));
  }
  for (int d = 0; d < n; ++d) {
    if (t.shape[d] < 0) return absl::InvalidArgumentError(absl::StrCat(where(), ": negative dim"));
    for (const IndexRun& r : (*t.runs)[d]) {
      if (r.global < 0 || r.length < 0 || r.global > t.shape[d] - r.length) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": run [", r.global, ", +",
                                                       r.length,
                                                       ") outside dim ", d, " of size ",
                                                       t.shape[d]));
      }
    }
  }
  SegmentMaker maker(t, index, max_read_bytes, out);
  if (!maker.Init()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": byte size overflows"));
  }
  if (n == 0) {
    maker.Emit(0, 0, 0, 1);
    return absl::OkStatus();
  }
  if (RunsNumel(*t.runs) == 0) return absl::OkStatus();
  // The last dim not kept whole; the dims after it are one run each.
  int j = 0;
  for (int d = n - 1; d >= 0; --d) {
    const auto& rd = (*t.runs)[d];
    if (!(rd.size() == 1 && rd[0].global == 0 && rd[0].length == t.shape[d])) {
      j = d;
      break;
    }
  }
  maker.Walk(0, j, 0);
  if (!maker.error().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": ", maker.error()));
  }
  return absl::OkStatus();
}

void SegmentBox(const Segment& segment, IntSpan shape, IntVector& begin, IntVector& end) {
  const size_t n = shape.size();
  begin.assign(n, 0);
  end.assign(shape.begin(), shape.end());
  int64_t rest = segment.first;
  int64_t inner = 1;
  for (size_t d = 0; d < n; ++d) {
    inner = 1;
    for (size_t e = d + 1; e < n; ++e) inner *= shape[e];
    begin[d] = rest / inner;
    rest %= inner;
    if (static_cast<int>(d) < segment.dim) end[d] = begin[d] + 1;
    if (static_cast<int>(d) == segment.dim) end[d] = begin[d] + segment.length;
  }
}

absl::StatusOr<ReadPlan> PlanReads(const std::vector<ReadTensor>& tensors,
                                   const ReadPlanOptions& options) {
  if (options.max_gap_bytes < 0 || options.max_read_bytes < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("PlanReads: max_gap_bytes ", options.max_gap_bytes, " must be >= 0 and ",
                     "max_read_bytes ", options.max_read_bytes, " >= 16"));
  }
  ReadPlan plan;
  for (size_t i = 0; i < tensors.size(); ++i) {
    SDRT_RETURN_IF_ERROR(
        PlanTensorSegments(tensors[i], i, options.max_read_bytes, plan.segments));
  }
  const auto in_file_order = [&](const Segment& a, const Segment& b) {
    const int fa = tensors[a.tensor].file;
    const int fb = tensors[b.tensor].file;
    return fa != fb ? fa < fb : a.file_offset < b.file_offset;
  };
  // Tensors in file order (CheckpointSource::tensors()) give segments in file order: the
  // check costs a comparison per segment, the sort ~500 instructions per segment.
  if (!std::is_sorted(plan.segments.begin(), plan.segments.end(), in_file_order)) {
    std::stable_sort(plan.segments.begin(), plan.segments.end(), in_file_order);
  }
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const int file = tensors[s.tensor].file;
    plan.kept_bytes += s.bytes;
    if (!plan.reads.empty()) {
      Read& r = plan.reads.back();
      const Segment& prev = plan.segments[i - 1];
      const int64_t end = r.offset + r.bytes;
      const int64_t gap = s.file_offset - end;
      if (r.file == file && gap >= 0 && gap <= options.max_gap_bytes &&
          gap <= prev.bytes / kGapDivisor &&
          s.file_offset + s.bytes - r.offset <= options.max_read_bytes) {
        r.bytes = s.file_offset + s.bytes - r.offset;
        ++r.segment_count;
        continue;
      }
    }
    plan.reads.push_back(Read{file, s.file_offset, s.bytes, i, 1});
  }
  for (const Read& r : plan.reads) plan.read_bytes += r.bytes;
  return plan;
}

}  // namespace sdrt::internal
