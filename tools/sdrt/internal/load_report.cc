#include "sdrt/tools/sdrt/internal/load_report.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

// The full tensors' bytes (validated by the source).
int64_t TotalBytes(const SourceOutline& outline) {
  int64_t bytes = 0;
  for (const SafetensorsTensorSpec& info : outline.tensors) {
    int64_t numel = 1;
    for (int64_t s : info.shape) numel *= s;
    bytes += BytesForElements(info.dtype, numel).value_or(0);
  }
  return bytes;
}

// Why an option of every rank reading a file did not apply.
absl::string_view UnusedBecause(const LoadFacts& f) {
  return f.outline->sharded ? "each rank reads its own rank files"
                            : "the root read SRC and broadcast it";
}

// With --read-once-per-node: the bytes the ranks of each node (0, 1, ... as LoadStats::node
// numbers them) read from storage, in all.
std::vector<int64_t> BytesReadPerNode(const LoadFacts& f) {
  std::vector<int64_t> per_node;
  for (size_t q = 0; q < f.node.size() && q < f.bytes_read.size(); ++q) {
    const auto n = static_cast<size_t>(f.node[q]);
    if (per_node.size() <= n) per_node.resize(n + 1, 0);
    per_node[n] += f.bytes_read[q];
  }
  return per_node;
}

// Why --read-once-per-node did not apply, as a summary line: it applies to a file every rank
// reads (kAll); "" where it applied or was not given.
std::string OncePerNodeUnused(const LoadFacts& f) {
  if (!f.options_read_once_per_node || (!f.outline->sharded && f.stats.read == ReadMode::kAll)) {
    return "";
  }
  return absl::StrCat("  --read-once-per-node not used: ", UnusedBecause(f), "\n");
}

// The other options of every rank reading a file that did not apply, a line each: --readers
// (when given) and, from a sharded folder, --map-results (the root's reason says it for a
// broadcast).
std::string OtherOptionsUnused(const LoadFacts& f) {
  if (!f.outline->sharded && f.stats.read == ReadMode::kAll) return "";
  std::string text;
  if (f.options_readers > 0) {
    absl::StrAppend(&text, "  --readers not used: ", UnusedBecause(f), "\n");
  }
  if (f.outline->sharded && f.options_map_results) {
    absl::StrAppend(&text, "  --map-results not used: ", UnusedBecause(f), "\n");
  }
  return text;
}

// How the read went, after the summary's first line: who read, how long, at what rate.
std::string ReadLines(const LoadFacts& f, const std::string& reason, double gbps,
                      const std::vector<double>& amplification) {
  const TransferStats& t = f.stats.transfer;
  std::string text;
  const std::string unused_options = OncePerNodeUnused(f) + OtherOptionsUnused(f);
  if (f.outline->sharded) {
    text = "  read: each rank its own rank files; bytes read per rank:";
    for (int64_t b : f.bytes_read) absl::StrAppend(&text, " ", HumanBytes(b));
    absl::StrAppend(
        &text, "\n  resharded peer to peer ", absl::StrFormat("%.3f s", f.seconds), "; wire ",
        HumanBytes(t.wire_bytes), " (the optimum: ", HumanBytes(t.optimum_bytes),
        "), kept in place ", HumanBytes(t.self_bytes), "; ", WithThousands(t.exchanges),
        t.exchanges == 1 ? " exchange, " : " exchanges, ", WithThousands(t.collectives),
        " collectives\n");
    return text + unused_options;
  }
  text = absl::StrCat("  read: ", ReadModeName(f.stats.read), " (", Printable(reason), ")\n");
  if (f.stats.read == ReadMode::kAll) {
    absl::StrAppend(&text, "  every rank read its pieces ",
                    absl::StrFormat("%.3f s, %.2f GB/s", f.seconds, gbps), "; read amplification");
    for (double a : amplification) absl::StrAppend(&text, absl::StrFormat(" %.3f", a));
    absl::StrAppend(&text, "\n");
    if (f.options_read_once_per_node) {
      const std::vector<int64_t> per_node = BytesReadPerNode(f);
      absl::StrAppend(&text, "  read once per node: ", per_node.size(),
                      per_node.size() == 1 ? " node" : " nodes", ", read there:");
      for (int64_t b : per_node) absl::StrAppend(&text, " ", HumanBytes(b));
      absl::StrAppend(&text, "; per rank, from a rank of its node:");
      for (int64_t b : f.bytes_from_node) absl::StrAppend(&text, " ", HumanBytes(b));
      absl::StrAppend(&text, "\n");
    }
    if (f.options_map_results) {
      absl::StrAppend(&text, "  mapped (views of SRC's pages, not read) per rank:");
      for (int64_t b : f.bytes_mapped) absl::StrAppend(&text, " ", HumanBytes(b));
      absl::StrAppend(&text, "\n");
    }
    return text;
  }
  return absl::StrCat(text, "  broadcast ", absl::StrFormat("%.3f s, %.2f GB/s", f.seconds, gbps),
                      "; ", t.collectives, " collectives (", t.exchanges,
                      t.exchanges == 1 ? " exchange" : " exchanges", " of at most ", f.bucket_mib,
                      " MiB per rank)\n", unused_options);
}

}  // namespace

Report LoadReport(const LoadFacts& f) {
  const SourceOutline& outline = *f.outline;
  const int64_t bytes = TotalBytes(outline);
  const double gbps = f.seconds > 0 ? bytes / f.seconds / 1e9 : 0;
  // An explicit --read names itself where the library says "requested".
  absl::string_view notes = f.stats.read_reason;
  const std::string reason = absl::ConsumePrefix(&notes, "requested")
                                 ? absl::StrCat("--read ", f.read, notes)
                                 : f.stats.read_reason;
  const std::string against =
      !f.verify_dir.empty()  ? f.verify_dir
      : f.whole_on_each_rank ? absl::StrCat(f.src, "'s index (each rank's tensors loaded whole)")
      : !f.gathered          ? f.src
                             : absl::StrCat(f.src, outline.sharded ? "'s index" : " on rank 0",
                                            " (each tensor gathered)");
  std::vector<std::string> mismatches;
  int64_t pieces = 0;
  for (size_t q = 0; q < f.wrong.size(); ++q) {
    if (f.wrong[q].empty()) continue;
    mismatches.push_back(
        absl::StrCat(f.gathered ? "tensors" : absl::StrCat("rank ", q), ": ", f.wrong[q]));
    pieces += 1 + std::count(f.wrong[q].begin(), f.wrong[q].end(), ',');
  }
  std::vector<double> amplification;
  for (size_t q = 0; q < f.bytes_read.size(); ++q) {
    // Of the bytes kept that were read (mapped ones are not).
    const int64_t kept =
        f.bytes_kept[q] - (q < f.bytes_mapped.size() ? f.bytes_mapped[q] : int64_t{0});
    amplification.push_back(kept <= 0 ? 1.0 : static_cast<double>(f.bytes_read[q]) / kept);
  }

  Report report;
  report.json = {{"command", "load"}, {"file", f.src}};
  if (outline.sharded) {
    report.json["from"] = {{"ranks", outline.sharded_ranks},
                           {"mesh", outline.sharded_mesh},
                           {"plan", outline.sharded_plan}};
  }
  report.json.update(nlohmann::ordered_json{{"mesh", f.mesh},
                                            {"plan", f.plan},
                                            {"ranks", f.ranks},
                                            {"device", f.device},
                                            {"read", ReadModeName(f.stats.read)},
                                            {"read_reason", reason},
                                            {"tensors", outline.tensors.size()},
                                            {"bytes", bytes},
                                            {"seconds", f.seconds},
                                            {"gbps", gbps},
                                            {"verified_against", f.unchecked.empty()
                                                                     ? nlohmann::ordered_json(against)
                                                                     : nlohmann::ordered_json()},
                                            {"mismatches", mismatches},
                                            {"bit_exact", f.unchecked.empty()
                                                              ? nlohmann::ordered_json(mismatches.empty())
                                                              : nlohmann::ordered_json()},
                                            {"bytes_read", f.bytes_read},
                                            {"bytes_kept", f.bytes_kept}});
  if (f.engine_tensors >= 0) report.json["engine_tensors"] = f.engine_tensors;
  const bool once_per_node = f.options_read_once_per_node && OncePerNodeUnused(f).empty();
  if (f.options_read_once_per_node) report.json["read_once_per_node"] = once_per_node;
  if (outline.sharded) {
    report.json.update(TransferStatsJson(f.stats.transfer));
  } else {
    report.json.update(nlohmann::ordered_json{{"collectives", f.stats.transfer.collectives},
                                              {"exchanges", f.stats.transfer.exchanges},
                                              {"read_amplification", amplification}});
    if (f.options_map_results) report.json["bytes_mapped"] = f.bytes_mapped;
    if (once_per_node) {
      report.json.update(nlohmann::ordered_json{{"node_of_rank", f.node},
                                                {"bytes_read_per_node", BytesReadPerNode(f)},
                                                {"bytes_from_node", f.bytes_from_node}});
    }
  }

  const std::string from = outline.sharded ? absl::StrCat(" (", Ranks(outline.sharded_ranks), ", ",
                                                          Printable(outline.sharded_plan),
                                                          ", mesh ", outline.sharded_mesh, ")")
                                           : "";
  report.text = absl::StrCat(
      "loaded ", Counted(static_cast<int64_t>(outline.tensors.size()), "tensor"), " (",
      HumanBytes(bytes), ") from ",
      Printable(f.src), from,
      f.engine_tensors >= 0 ? absl::StrCat(" as ", f.engine_tensors, " engine tensors") : "",
      " into ", Ranks(f.ranks), ", mesh ", Printable(f.mesh), ", plan ",
      Printable(f.plan), "\n", ReadLines(f, reason, gbps, amplification),
      f.unchecked.empty()
          ? absl::StrCat("  verified against ", Printable(against), ": ",
                         mismatches.empty() ? "every piece matches" : "MISMATCH", "\n")
          : absl::StrCat("  not verified: ", f.unchecked, "\n"));
  for (const std::string& m : mismatches) {
    // At most kListedPieces names a rank in the text (a checkpoint of 100,000 tensors made
    // one line of all of them); --json lists every one.
    constexpr int kListedPieces = 16;
    size_t cut = 0;
    int listed = 0;
    while (listed < kListedPieces && (cut = m.find(',', cut + 1)) != std::string::npos) ++listed;
    const std::string line =
        cut == std::string::npos
            ? m
            : absl::StrCat(m.substr(0, cut), ", and ", std::count(m.begin() + cut, m.end(), ','),
                           " more (--json lists them all)");
    absl::StrAppend(&report.text, "    ", Printable(line), "\n");
  }
  if (!mismatches.empty()) {  // the whole list is on stdout; the verdict counts and names the first
    const std::string& first = mismatches.front();
    const std::string message =
        absl::StrCat(pieces, " piece(s) on ", mismatches.size(), " rank(s) differ from ", against,
                     "; the first: ", Utf8Prefix(first.substr(0, first.find(',')), 500));
    // Pieces that differ from SRC itself are sdrt's fault; from INDIR or an index, the data's.
    report.verdict = f.verify_dir.empty() && !outline.sharded
                         ? absl::InternalError(message)
                         : absl::InvalidArgumentError(message);
  }
  return report;
}

}  // namespace sdrt::cli
