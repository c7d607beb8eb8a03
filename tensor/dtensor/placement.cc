#include "sdrt/tensor/dtensor/placement.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("cannot parse placement '", text, "': ", why));
}

// Splits "name(a, b)" into name and its comma-separated arguments ("dim=0" -> "0").
bool SplitCall(absl::string_view text, absl::string_view* name, std::vector<std::string>* args) {
  const size_t open = text.find('(');
  if (open == absl::string_view::npos) {
    *name = text;
    return true;
  }
  if (text.back() != ')') return false;
  *name = text.substr(0, open);
  absl::string_view inner = text.substr(open + 1, text.size() - open - 2);
  if (absl::StripAsciiWhitespace(inner).empty()) return true;
  for (absl::string_view arg : absl::StrSplit(inner, ',')) {
    arg = absl::StripAsciiWhitespace(arg);
    const size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) arg = absl::StripAsciiWhitespace(arg.substr(eq + 1));
    args->emplace_back(arg);
  }
  return true;
}

}  // namespace

std::string Placement::ToString() const {
  switch (kind_) {
    case Kind::kReplicate:
      return "R";
    case Kind::kShard:
      return absl::StrCat("S(", dim_, ")");
    case Kind::kPartial:
      return absl::StrCat("P(", ReduceOpName(reduce_op_), ")");
    case Kind::kStridedShard:
      return absl::StrCat("_S(", dim_, ", ", split_factor_, ")");
  }
  return "invalid";
}

absl::StatusOr<Placement> ParsePlacement(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  absl::string_view name;
  std::vector<std::string> args;
  if (text.empty() || !SplitCall(text, &name, &args)) return Bad(text, "malformed");
  if (name == "R" || name == "Replicate") {
    if (!args.empty()) return Bad(text, "Replicate takes no argument");
    return Placement::Replicate();
  }
  if (name == "P" || name == "Partial") {
    if (args.size() > 1) return Bad(text, "Partial takes one reduce op");
    if (args.empty()) return Placement::Partial();
    absl::StatusOr<ReduceOp> op = ParseReduceOp(args[0]);
    if (!op.ok()) return Bad(text, op.status().message());
    return Placement::Partial(*op);
  }
  const bool strided = name == "_S" || name == "_StridedShard";
  if (name == "S" || name == "Shard" || strided) {
    int dim = 0;
    if (args.empty() || !absl::SimpleAtoi(args[0], &dim) || dim < 0) {
      return Bad(text, "needs a non-negative tensor dim");
    }
    if (!strided) {
      if (args.size() != 1) return Bad(text, "Shard takes one dim");
      return Placement::Shard(dim);
    }
    int64_t split_factor = 0;
    if (args.size() != 2 || !absl::SimpleAtoi(args[1], &split_factor) || split_factor < 1 ||
        split_factor > kMaxSplitFactor) {
      return Bad(text, absl::StrCat("_StridedShard needs a dim and a split factor in [1, ",
                                    kMaxSplitFactor, "]"));
    }
    return Placement::StridedShard(dim, split_factor);
  }
  return Bad(text, "unknown placement");
}

std::string PlacementsToString(const std::vector<Placement>& placements) {
  return absl::StrCat(
      "[",
      absl::StrJoin(placements, ", ",
                    [](std::string* out, const Placement& p) { out->append(p.ToString()); }),
      "]");
}

absl::StatusOr<std::vector<Placement>> ParsePlacements(absl::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  absl::ConsumePrefix(&body, "[");
  absl::ConsumeSuffix(&body, "]");
  std::vector<Placement> out;
  if (absl::StripAsciiWhitespace(body).empty()) return out;
  // Split on commas that are not inside parentheses.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    if (i < body.size() && body[i] == '(') ++depth;
    if (i < body.size() && body[i] == ')') --depth;
    if (i == body.size() || (body[i] == ',' && depth == 0)) {
      SDRT_ASSIGN_OR_RETURN(Placement p, ParsePlacement(body.substr(start, i - start)));
      out.push_back(p);
      start = i + 1;
    }
  }
  return out;
}

}  // namespace sdrt
