// Tests for include/orchmllm/core/text_forms.hpp: the text forms of cost models and padding
// policies (what orchmllm-bench --cost/--policy and the Python package read): every accepted
// form, the canonical spelling and its round trip, and every rejection with its message.

#include "orchmllm/core/text_forms.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <variant>

#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"

namespace {

// The message (without the location) of the invalid_argument_error that `f` throws.
template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const orchmllm::invalid_argument_error& e) {
    return e.message();
  }
  return "(no error)";
}

// A trainer's own padding rule: lengths rounded up to a multiple of 100.
struct round_to_100 {
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const { return (l + 99) / 100 * 100; }
  [[nodiscard]] const char* name() const { return "round100"; }
  bool operator==(const round_to_100&) const = default;
};

}  // namespace

TEST_CASE("cost text: linear and quadratic, canonical spelling and round trip") {
  const auto lin = orchmllm::parse_cost_model("linear");
  REQUIRE(std::holds_alternative<orchmllm::linear_cost>(lin));
  CHECK(std::get<orchmllm::linear_cost>(lin) == orchmllm::linear_cost{});
  CHECK(orchmllm::to_text(lin) == "linear");

  const auto q = orchmllm::parse_cost_model("quadratic:1,1.3e-5");
  REQUIRE(std::holds_alternative<orchmllm::quadratic_cost>(q));
  CHECK(std::get<orchmllm::quadratic_cost>(q) == orchmllm::quadratic_cost{0.0, 1.0, 1.3e-5});
  CHECK(orchmllm::to_text(q) == "quadratic:1,1.3e-05");
  CHECK(orchmllm::to_text(orchmllm::parse_cost_model("quadratic:0,2e-3")) == "quadratic:0,0.002");
  // The shortest spelling that reads back as the same double, not %.17g's.
  CHECK(orchmllm::to_text(orchmllm::quadratic_cost{0.0, 1.0, 0.0005}) == "quadratic:1,0.0005");
  // A per-item constant: a third coefficient, printed only when it is not 0.
  const auto qc = orchmllm::parse_cost_model("quadratic:2e-4,1e-7,0.01");
  CHECK(std::get<orchmllm::quadratic_cost>(qc) == orchmllm::quadratic_cost{0.01, 2e-4, 1e-7});
  CHECK(orchmllm::to_text(qc) == "quadratic:0.0002,1e-07,0.01");
  CHECK(orchmllm::to_text(orchmllm::parse_cost_model("quadratic:1,2,0")) == "quadratic:1,2");
  for (const char* text : {"linear", "quadratic:1,0.0005", "quadratic:0.1,0.3", "quadratic:0,0",
                           "quadratic:3,1e-300", "quadratic:1,0.5,0.25", "quadratic:0,0,7"}) {
    CAPTURE(text);
    const auto c = orchmllm::parse_cost_model(text);
    CHECK(orchmllm::parse_cost_model(orchmllm::to_text(c)) == c);
  }
}

TEST_CASE("cost text: rejections name the text and the reason") {
  const std::string shape =
      ", expected 'linear' or 'quadratic:A,B[,C]' (cost(l) = A*l + B*l^2 + C)";
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("cubic"); }) == "cost is 'cubic'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1"); }) ==
        "cost is 'quadratic:1'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model(""); }) == "cost is ''" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("Linear"); }) ==
        "cost is 'Linear'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1,x"); }) ==
        "cost expects a finite number, got 'x' (in 'quadratic:1,x')");
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:,1"); }) ==
        "cost expects a finite number, got '' (in 'quadratic:,1')");
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1,inf"); }) ==
        "cost expects a finite number, got 'inf' (in 'quadratic:1,inf')");
  // Four coefficients (or more) are the wrong shape, named as the whole text; an empty third
  // is not a number.
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1,2,3,4"); }) ==
        "cost is 'quadratic:1,2,3,4'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1,2,3,"); }) ==
        "cost is 'quadratic:1,2,3,'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:,,,"); }) ==
        "cost is 'quadratic:,,,'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1,2,"); }) ==
        "cost expects a finite number, got '' (in 'quadratic:1,2,')");
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:1,2,-3"); }) ==
        "cost 'quadratic:1,2,-3': quadratic_cost constant coefficient is -3, must be finite and "
        ">= 0");
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("quadratic:-1,0"); }) ==
        "cost 'quadratic:-1,0': quadratic_cost linear coefficient is -1, must be finite and >= 0");
  // User text is echoed printable: control bytes escaped, never raw.
  CHECK(message_of([] { (void)orchmllm::parse_cost_model("a\nb"); }) ==
        "cost is 'a\\x0ab'" + shape);
  // Models without a text form.
  CHECK(message_of([] { (void)orchmllm::to_text(orchmllm::linear_cost{2}); }) ==
        "linear_cost of weight 2 has no text form (only weight 1: 'linear')");
}

TEST_CASE("policy text: packed, padded with a multiple, bucketed; round trip") {
  CHECK(orchmllm::parse_padding_policy("packed") == orchmllm::packed);
  CHECK(orchmllm::parse_padding_policy("padded") == orchmllm::padded);
  CHECK(orchmllm::parse_padding_policy("padded", 64) == orchmllm::padded_to_multiple(64));
  const auto b = orchmllm::parse_padding_policy("bucketed:512,1024,4096");
  CHECK(b == orchmllm::bucketed({512, 1024, 4096}));
  CHECK(orchmllm::parse_padding_policy("bucketed:7") == orchmllm::bucketed({7}));
  CHECK(orchmllm::to_text(b) == "bucketed:512,1024,4096");
  CHECK(orchmllm::to_text(orchmllm::packed) == "packed");
  CHECK(orchmllm::to_text(orchmllm::padded_to_multiple(8)) == "padded");  // multiple beside it
  for (const auto& p : {orchmllm::packed, orchmllm::padded, orchmllm::padded_to_multiple(16),
                        orchmllm::bucketed({1, 2, 3}), orchmllm::bucketed({9000})}) {
    CHECK(orchmllm::parse_padding_policy(orchmllm::to_text(p), p.multiple()) == p);
  }
}

TEST_CASE("policy text: rejections name the text and the reason") {
  const std::string shape = ", expected 'packed', 'padded' or 'bucketed:B1,B2,...'";
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("ragged"); }) ==
        "policy is 'ragged'" + shape);
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed"); }) ==
        "policy is 'bucketed'" + shape);
  // A bad bucket length is named, and so is the whole text it came from.
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:8,x"); }) ==
        "policy expects an integer, got 'x' (in 'bucketed:8,x')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:"); }) ==
        "policy expects an integer, got '' (in 'bucketed:')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:8,"); }) ==
        "policy expects an integer, got '' (in 'bucketed:8,')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:8,,16"); }) ==
        "policy expects an integer, got '' (in 'bucketed:8,,16')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:99999999999999999999"); }) ==
        "policy expects an integer, got '99999999999999999999' (in "
        "'bucketed:99999999999999999999')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:0"); }) ==
        "policy is 0, must be in [1, 2^63) (in 'bucketed:0')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:8,-3"); }) ==
        "policy is -3, must be in [1, 2^63) (in 'bucketed:8,-3')");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:8,4"); }) ==
        "policy 'bucketed:8,4': bucket lengths must be strictly increasing: 8 then 4");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("packed", 8); }) ==
        "pad multiple 8 needs the padded policy, not 'packed'");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("bucketed:8", 2); }) ==
        "pad multiple 2 needs the padded policy, not 'bucketed:8'");
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("padded", 0); }) ==
        "padding multiple is 0, must be >= 1");
  // An unknown name is reported as such even with a pad multiple.
  CHECK(message_of([] { (void)orchmllm::parse_padding_policy("ragged", 8); }) ==
        "policy is 'ragged'" + shape);
}

TEST_CASE("policy text: a custom padding rule has no text form") {
  const orchmllm::padding_policy p = round_to_100{};
  CHECK(message_of([&] { (void)orchmllm::to_text(p); }) ==
        "the custom padding policy 'round100' has no text form");
}
