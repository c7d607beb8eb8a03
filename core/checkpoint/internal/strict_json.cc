#include "sdrt/core/checkpoint/internal/strict_json.h"

#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;

// The document built from the parser's SAX events in one pass, checking as it goes: the
// depth of nesting and, per open object, the set of its keys. Linear in the document's size:
// a member is appended to its object (its key is known to be new), never looked up, where
// nlohmann's own DOM builder looks each key up in the ordered map (quadratic in an object's
// member count: seconds at 80,000 tensors of an index) and its parser callback rescanned an
// object's parent on every object end.
class StrictBuilder final : public nlohmann::json_sax<Json> {
 public:
  const std::string& why() const { return why_; }
  Json& root() { return root_; }

  bool null() override { return Put(Json(nullptr)) != nullptr; }
  bool boolean(bool b) override { return Put(Json(b)) != nullptr; }
  bool number_integer(number_integer_t n) override { return Put(Json(n)) != nullptr; }
  bool number_unsigned(number_unsigned_t n) override { return Put(Json(n)) != nullptr; }
  bool number_float(number_float_t n, const string_t&) override {
    return Put(Json(n)) != nullptr;
  }
  bool string(string_t& s) override { return Put(Json(std::move(s))) != nullptr; }
  bool binary(binary_t& b) override { return Put(Json::binary(std::move(b))) != nullptr; }
  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool key(string_t& key) override {
    if (!open_.back().keys.insert(key).second) {
      why_ = absl::StrCat("duplicate key \"", absl::CHexEscape(key), "\" in one object");
      return false;
    }
    key_ = std::move(key);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    why_ = absl::StrCat("not valid JSON: ", e.what());
    return false;
  }

 private:
  // An open object or array: where it is, and an object's keys so far.
  struct Open_ {
    Json* value;
    absl::flat_hash_set<std::string> keys;
  };

  // `value` where the parser is: the document, the open array's next element, or the open
  // object's member under the last key (appended: key() has checked that it is new). The
  // place of the value; a place stays valid while it is open, since only values inside it
  // are added until it closes.
  Json* Put(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *open_.back().value;
    if (parent.is_array()) {
      Json::array_t& elements = parent.get_ref<Json::array_t&>();
      elements.push_back(std::move(value));
      return &elements.back();
    }
    Json::object_t::Container& members = parent.get_ref<Json::object_t&>();
    members.emplace_back(std::move(key_), std::move(value));
    return &members.back().second;
  }
  bool Open(Json empty) {
    if (static_cast<int>(open_.size()) >= kMaxJsonDepth) {
      why_ = absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels");
      return false;
    }
    Json* const at = Put(std::move(empty));
    open_.push_back({at, {}});
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Json root_;
  std::vector<Open_> open_;
  std::string key_;
  std::string why_;
};

}  // namespace

absl::StatusOr<Json> ParseStrictJson(absl::string_view text) {
  StrictBuilder builder;
  try {
    if (!Json::sax_parse(text.begin(), text.end(), &builder)) {
      return absl::InvalidArgumentError(builder.why());
    }
    return std::move(builder.root());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory parsing ", text.size(), " bytes of JSON"));
  }
}

void AppendNewMember(nlohmann::ordered_json& object, std::string key,
                     nlohmann::ordered_json value) {
  Json::object_t::Container& members = object.get_ref<Json::object_t&>();
  members.emplace_back(std::move(key), std::move(value));
}

}  // namespace sdrt::internal
