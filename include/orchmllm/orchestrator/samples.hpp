#pragma once
/// @file samples.hpp
/// The orchestrator's `local_batch` straight from the trainer's own sample type, without a
/// hand-written adapter: `make_local_batch` through projections (one for the text tokens, one
/// `modality(items, size)` per encoder stage, in the style of std::ranges) or through a
/// `sample_traits` specialisation (for samples whose modalities interleave). Nothing is
/// validated here; `gather_step_metadata` and `make_step_metadata` check the batch on every
/// rank alike. Pure functions; the batch follows the samples' iteration order. See
/// docs/orchestrator.md, "Walkthrough: one step of a trainer".

#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>

#include "orchmllm/orchestrator/stages.hpp"

namespace orchmllm {

/// The sizes of one sub-item (see `sub_item`).
struct sub_item_size {
  std::int64_t encoder_length = 0;  ///< what the encoder's cost model reads
  std::int64_t input_rows = 0;      ///< encoder input rows that travel to the encoder
  std::int64_t llm_tokens = 0;      ///< encoder output rows (LLM tokens) it becomes
  std::int64_t segments = 1;        ///< equal segments S (`sub_item::segments`); 1: none
};

/// How to read one modality's sub-items from a sample: `std::invoke(items, sample)` gives them
/// (a range, a `std::optional`, a pointer that may be null, or a single object), and
/// `std::invoke(size, sub_item)` gives a `sub_item_size`. Build it with `modality(items, size)`.
template <class Items, class Size>
struct modality_projection {
  Items items;  ///< sample → its sub-items of this modality
  Size size;    ///< sub-item → `sub_item_size`
};

/// `modality_projection{items, size}` (spelled as a function so both types are deduced).
template <class Items, class Size>
constexpr modality_projection<Items, Size> modality(Items items, Size size) {
  return {std::move(items), std::move(size)};
}

/// Customisation point: a trainer specialises it for its sample type with
///   static std::int64_t text_tokens(const Sample&);
///   template <class Emit> static void sub_items(const Sample&, Emit&& emit);
/// where `sub_items` calls `emit(int modality, sub_item_size)` once per sub-item, in the
/// sample's order. Not defined for other types.
template <class Sample>
struct sample_traits;

namespace detail {

// What `sample_traits<S>::sub_items` is checked against.
struct sub_item_sink {
  void operator()(int, sub_item_size) const noexcept {}
};

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// Calls f on each sub-item that `x` (a range, an optional, a pointer or one object) stands for.
template <class X, class F>
void for_each_sub_item(X&& x, F&& f) {
  using V = std::remove_cvref_t<X>;
  if constexpr (std::ranges::input_range<X>) {
    for (auto&& item : x) f(item);
  } else if constexpr (is_optional<V>::value || std::is_pointer_v<V>) {
    if (x) f(*x);
  } else {
    f(x);
  }
}

}  // namespace detail

/// Whether `sample_traits<S>` is specialised as described there.
template <class S>
concept has_sample_traits = requires(const S& s, const detail::sub_item_sink& sink) {
  { sample_traits<S>::text_tokens(s) } -> std::convertible_to<std::int64_t>;
  sample_traits<S>::sub_items(s, sink);
};

/// The local batch of a range of the trainer's samples through projections: `text(sample)` its
/// text token count, `modalities[k]` its modality-k sub-items (`modality(items, size)`:
/// `items` reads a sample's sub-items of that modality, a member pointer or a callable returning
/// a range, a `std::optional`, a pointer or one object; `size` reads one sub-item's
/// `sub_item_size`), in declaration order:
///
///   struct Sample { std::int64_t text; std::vector<Image> images; std::optional<Audio> audio; };
///   auto batch = orchmllm::make_local_batch(samples, &Sample::text,
///       orchmllm::modality(&Sample::images, [](const Image& i) { return i.size(); }),
///       orchmllm::modality(&Sample::audio, [](const Audio& a) { return a.size(); }));
///
/// A sample's sub-items come modality by modality (its images, then its audio), each modality in
/// its own order; that is the order `step_plan::llm_view` hands them back in, and the order of
/// the per-modality payloads the trainer sends (for modality k: every sample's modality-k
/// sub-items, sample by sample). O(samples + sub-items) projection calls. Deterministic.
/// Throws what the projections throw.
template <std::ranges::input_range Samples, class Text, class... Items, class... Size>
requires std::invocable<const Text&, std::ranges::range_reference_t<Samples>> local_batch
make_local_batch(Samples&& samples, Text text,
                 const modality_projection<Items, Size>&... modalities) {
  local_batch b;
  std::int64_t parent = 0;
  for (auto&& sample : samples) {
    b.text_tokens.push_back(static_cast<std::int64_t>(std::invoke(text, sample)));
    std::int32_t k = 0;
    const auto add = [&](const auto& m) {
      detail::for_each_sub_item(std::invoke(m.items, sample), [&](const auto& item) {
        const sub_item_size s = std::invoke(m.size, item);
        b.sub_items.push_back(
            {k, parent, s.encoder_length, s.input_rows, s.llm_tokens, s.segments});
      });
      ++k;
    };
    (add(modalities), ...);
    ++parent;
  }
  return b;
}

/// The local batch of a range of samples whose type specialises `sample_traits`. Sub-items keep
/// the order `sample_traits::sub_items` emits them in. O(samples + sub-items).
/// Throws what the traits throw.
template <std::ranges::input_range Samples>
requires has_sample_traits<std::ranges::range_value_t<Samples>> local_batch
make_local_batch(Samples&& samples) {
  using traits = sample_traits<std::ranges::range_value_t<Samples>>;
  local_batch b;
  std::int64_t parent = 0;
  for (auto&& sample : samples) {
    b.text_tokens.push_back(static_cast<std::int64_t>(traits::text_tokens(sample)));
    traits::sub_items(sample, [&](int modality, const sub_item_size& s) {
      b.sub_items.push_back({static_cast<std::int32_t>(modality), parent, s.encoder_length,
                             s.input_rows, s.llm_tokens, s.segments});
    });
    ++parent;
  }
  return b;
}

}  // namespace orchmllm
