#include "sdrt/tools/sdrt/internal/output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sdrt::cli {

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

absl::Status InputError(const absl::Status& status) {
  if (ExitCodeFor(status) != 1 || status.code() == absl::StatusCode::kResourceExhausted ||
      status.code() == absl::StatusCode::kInternal) {
    return status;
  }
  return absl::InvalidArgumentError(status.message());
}

std::string JsonText(const nlohmann::ordered_json& json, int indent) {
  return json.dump(indent, ' ', /*ensure_ascii=*/false,
                   nlohmann::ordered_json::error_handler_t::replace);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string HumanBytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000.0 && unit < 6) {
    value /= 1000.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", bytes);
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

std::string Counted(int64_t n, absl::string_view noun) {
  return absl::StrCat(WithThousands(n), " ", noun, n == 1 ? "" : "s");
}

std::string WithThousands(int64_t value) {
  std::string digits = absl::StrFormat("%d", value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return value < 0 ? "-" + out : out;
}

int LauncherRank() {
  for (const char* name : {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID"}) {
    const char* value = std::getenv(name);
    int rank = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &rank)) return rank;
  }
  return 0;
}

void WriteStderrLine(absl::string_view line) {
  std::cerr << std::flush;  // whatever the stream holds goes first
  std::string text(line);
  text.push_back('\n');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing else can be told
    done += static_cast<size_t>(n);
  }
}

int ReportError(absl::string_view command, const absl::Status& status, int rank) {
  if (rank == 0) {
    // A message may echo a whole hostile value (a 10,000-character placement): the line
    // keeps its first kMaxErrorBytes and says how long it was.
    std::string message = Printable(status.message());
    if (message.size() > kMaxErrorBytes) {
      message = absl::StrCat(Utf8Prefix(message, kMaxErrorBytes), "... (", message.size(),
                             " bytes in all)");
    }
    WriteStderrLine(absl::StrCat("sdrt", command.empty() ? "" : " ", command, ": ", message));
  }
  return ExitCodeFor(status);
}

namespace {

// The length of the valid UTF-8 sequence at the start of `text` (1 to 4 bytes), or 0 when
// it does not start with one (a stray continuation byte, an overlong form, a surrogate, a
// code point above U+10FFFF, a cut sequence).
size_t Utf8Length(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80;  // the allowed range of the second byte
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
  }
  return length;
}

}  // namespace

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t length = Utf8Length(text.substr(i));
    if (length == 0 || c < 0x20 || c == 0x7f) {  // C0, DEL, not UTF-8
      out += absl::StrFormat("\\x%02x", c);
      ++i;
    } else if (length == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[i + 1]));  // C1
      i += 2;
    } else {
      out.append(text.data() + i, length);
      i += length;
    }
  }
  return out;
}

std::string Utf8Prefix(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Step back over continuation bytes (10xxxxxx) to the start of a character.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

Table::Table(std::vector<std::string> header, std::vector<bool> right_aligned)
    : header_(std::move(header)), right_aligned_(std::move(right_aligned)) {
  right_aligned_.resize(header_.size(), false);
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size());
  // Widths in code points (UTF-8 lead bytes), so non-ASCII names stay aligned.
  auto columns = [](const std::string& cell) {
    return static_cast<size_t>(std::count_if(cell.begin(), cell.end(), [](char ch) {
      return (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    }));
  };
  for (size_t c = 0; c < header_.size(); ++c) width[c] = columns(header_[c]);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], columns(row[c]));
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - columns(row[c]), ' ');
      if (c > 0) line += "  ";
      line += right_aligned_[c] ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
    }
    out << line << "\n";
  };
  print_row(header_);
  std::vector<std::string> rule(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) rule[c] = std::string(width[c], '-');
  print_row(rule);
  for (const auto& row : rows_) print_row(row);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::function<void(int64_t, int64_t)> ProgressLine(const std::string& what, bool enabled,
                                                   bool force) {
  const bool terminal = isatty(STDERR_FILENO) != 0;
  if (!enabled || (!terminal && !force)) return {};
  const double start = NowSeconds();
  double last = -1.0;  // when the last whole line was written
  bool ended = false;  // the final line is written: later calls (exchanges that move none
                       // of this rank's bytes) print nothing
  return [what, start, terminal, last, ended](int64_t done, int64_t total) mutable {
    const double now = NowSeconds();
    const bool end = done >= total;
    if (ended || (!terminal && !end && last >= 0 && now - last < 1.0)) return;
    ended = end;
    last = now;
    const double seconds = now - start;
    const char* ending = "\n";  // a whole line in a file
    if (terminal) ending = end ? "   \n" : "   ";
    std::fprintf(stderr, "%s%s: %s of %s, %.2f GB/s%s", terminal ? "\r" : "", what.c_str(),
                 HumanBytes(done).c_str(), HumanBytes(total).c_str(),
                 seconds > 0 ? done / seconds / 1e9 : 0.0, ending);
    std::fflush(stderr);
  };
}

}  // namespace sdrt::cli
