#include "sdrt/tools/sdrt/internal/output.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

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

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string HumanBytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000.0 && unit < 4) {
    value /= 1000.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", bytes);
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
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

std::string Printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
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

std::function<void(int64_t, int64_t)> ProgressLine(const std::string& what, bool enabled) {
  if (!enabled || isatty(STDERR_FILENO) == 0) return {};
  const double start = NowSeconds();
  return [what, start](int64_t done, int64_t total) {
    const double seconds = NowSeconds() - start;
    std::fprintf(stderr, "\r%s: %s of %s, %.2f GB/s   %s", what.c_str(), HumanBytes(done).c_str(),
                 HumanBytes(total).c_str(), seconds > 0 ? done / seconds / 1e9 : 0.0,
                 done >= total ? "\n" : "");
    std::fflush(stderr);
  };
}

}  // namespace sdrt::cli
