#include "sdrt/core/checkpoint/internal/strict_json.h"

#include <cstddef>
#include <new>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;

// A first, validating pass over the document as SAX events: the depth of nesting and, per
// open object, the set of its keys. Linear in the document's size (nlohmann's parser
// callback, used before, rescans an object's parent on every object end: quadratic in the
// number of siblings, minutes for a few MiB). The second pass (Json::parse) builds the
// document once this one has accepted it.
class StrictChecker final : public nlohmann::json_sax<Json> {
 public:
  const std::string& why() const { return why_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (!Enter()) return false;
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (keys_.back().insert(key).second) return true;
    why_ = absl::StrCat("duplicate key \"", absl::CHexEscape(key), "\" in one object");
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    why_ = absl::StrCat("not valid JSON: ", e.what());
    return false;
  }

 private:
  bool Enter() {
    if (++depth_ <= kMaxJsonDepth) return true;
    why_ = absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels");
    return false;
  }

  int depth_ = 0;
  std::vector<absl::flat_hash_set<std::string>> keys_;  // one set per open object
  std::string why_;
};

}  // namespace

absl::StatusOr<Json> ParseStrictJson(absl::string_view text) {
  StrictChecker checker;
  try {
    if (!Json::sax_parse(text.begin(), text.end(), &checker)) {
      return absl::InvalidArgumentError(checker.why());
    }
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory parsing ", text.size(), " bytes of JSON"));
  }
}

}  // namespace sdrt::internal
