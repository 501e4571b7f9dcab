#pragma once
// The declarations' fingerprint, included by orchestrator/stages.hpp at its end: every stage's
// name, cost model (by its values at fixed probe lengths), policy, limits, balancer and mapper
// with their knobs, row widths, split and micro-batch options, mixed in one platform-independent
// FNV-1a.

#include <array>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "orchmllm/detail/core/fnv.hpp"

namespace orchmllm::detail {

/// The lengths at which a stage's cost model enters the declarations' fingerprint (a model is
/// an arbitrary callable: it is compared by its values there). The Python package reads this
/// list for its callable costs.
inline constexpr std::array<std::int64_t, 12> fingerprint_probe_lengths{
    0, 1, 2, 3, 7, 64, 100, 1000, 4096, 12345, 65536, 1000000};

// A built-in balancer in a fingerprint: its name and every knob a plan depends on (not
// `automatic::concurrent`: plans do not depend on it).
inline void mix_balancer(fnv& f, const any_balancer& b) {
  f.mix(b.name());
  const auto automatic = [&](const balancers::automatic& a) {
    f.mix(static_cast<std::uint64_t>(a.refine_budget));
    f.mix(static_cast<std::uint64_t>(a.exact_node_budget));
    f.mix(static_cast<std::uint64_t>(a.exact_max_items));
    f.mix_double(a.gap_tolerance);
  };
  b.visit([&](const auto& x) {
    using B = std::remove_cvref_t<decltype(x)>;
    if constexpr (requires { x.refine; }) f.mix(static_cast<std::uint64_t>(x.refine));
    if constexpr (std::is_same_v<B, balancers::lpt> || std::is_same_v<B, balancers::padded_exact> ||
                  std::is_same_v<B, balancers::karmarkar_karp> ||
                  std::is_same_v<B, balancers::karmarkar_karp_equal>)
      f.mix(static_cast<std::uint64_t>(x.refine_budget));
    if constexpr (std::is_same_v<B, balancers::exact>)
      f.mix(static_cast<std::uint64_t>(x.node_budget));
    if constexpr (std::is_same_v<B, balancers::automatic>) automatic(x);
    if constexpr (std::is_same_v<B, balancers::locality>) {
      automatic(x.base);
      f.mix_double(x.tolerance);
      f.mix(static_cast<std::uint64_t>(x.node_of_rank.size()));
      for (const auto r : x.node_of_rank) f.mix(static_cast<std::uint64_t>(r));
    }
  });
}

// A built-in mapper in a fingerprint: its name and knob.
inline void mix_mapper(fnv& f, const any_mapper& m) {
  f.mix(m.name());
  if (const auto* b = m.get_if<mappers::bottleneck>())
    f.mix(static_cast<std::uint64_t>(b->step_budget));
  if (const auto* a = m.get_if<mappers::auction>()) f.mix_double(a->tolerance);
}

template <class Stage>
void mix_stage(fnv& f, const Stage& stage) {
  const stage_cost& cost = stage.cost;
  const padding_policy policy = stage.policy;
  f.mix(std::string_view(stage.name));
  // A cost model is an arbitrary callable: compare it by its values at fixed probe lengths.
  for (const std::int64_t l : fingerprint_probe_lengths)
    cost.visit([&](const auto& c) {
      if constexpr (std::is_integral_v<decltype(c(l))>) {
        f.mix(static_cast<std::uint64_t>(c(l)));
      } else {
        f.mix_double(c(l));
      }
    });
  f.mix(static_cast<std::uint64_t>(cost.integral()));
  f.mix(static_cast<std::uint64_t>(policy.is_padded()));
  f.mix(static_cast<std::uint64_t>(policy.multiple()));
  if (policy.policy_kind() == padding_policy::kind::bucketed) {
    f.mix(static_cast<std::uint64_t>(policy.buckets().size()));
    for (const auto b : policy.buckets()) f.mix(static_cast<std::uint64_t>(b));
  }
  // A trainer's padding rule, by its name.
  if (policy.policy_kind() == padding_policy::kind::custom) {
    f.mix(std::string_view("padding rule"));
    f.mix(policy.rule_name());
  }
  const constraints& l = stage.limits;
  f.mix(static_cast<std::uint64_t>(l.cap.has_value()));
  if (l.cap) {
    f.mix(static_cast<std::uint64_t>(l.cap->what));
    f.mix(static_cast<std::uint64_t>(l.cap->limit));
  }
  f.mix(static_cast<std::uint64_t>(l.min_items));
  f.mix(static_cast<std::uint64_t>(l.max_items));
  if (const auto* b = stage.balancer.builtin()) {
    mix_balancer(f, *b);
  } else {
    f.mix(std::string_view("custom balancer"));
    f.mix(stage.balancer.name());
  }
  if (const auto* m = stage.mapper.builtin()) {
    mix_mapper(f, *m);
  } else {
    f.mix(std::string_view("custom mapper"));
    f.mix(stage.mapper.name());
  }
  if (const auto& mb = stage.micro_batches) {
    f.mix(std::string_view("micro-batches"));
    const std::array<std::int64_t, 8> values = {
        mb->count,        mb->min_count,    mb->multiple_of,     mb->limits.tokens,
        mb->limits.bytes, mb->limits.items, mb->exact_max_items, mb->exact_node_budget};
    for (const auto v : values) f.mix(static_cast<std::uint64_t>(v));
    f.mix_double(mb->limits.cost);
    f.mix(static_cast<std::uint64_t>(mb->sync));
    f.mix(static_cast<std::uint64_t>(mb->allow_empty));
    f.mix(static_cast<std::uint64_t>(mb->order));
  }
}

}  // namespace orchmllm::detail

namespace orchmllm {

inline std::uint64_t fingerprint(const stage_declarations& decl) {
  detail::fnv f;
  f.mix(static_cast<std::uint64_t>(decl.encoders.size()));
  for (const auto& e : decl.encoders) {
    detail::mix_stage(f, e);
    f.mix(static_cast<std::uint64_t>(e.input_row_bytes));
    f.mix(static_cast<std::uint64_t>(e.output_row_bytes));
    if (e.split) {
      f.mix(std::string_view("split"));
      f.mix(static_cast<std::uint64_t>(e.split->min_piece_segments));
      f.mix(static_cast<std::uint64_t>(e.split->max_pieces));
      f.mix(static_cast<std::uint64_t>(e.split->rounds));
      f.mix_double(e.split->tolerance);
    }
  }
  detail::mix_stage(f, decl.llm);
  f.mix(static_cast<std::uint64_t>(decl.llm.text_row_bytes));
  return f.h;
}

}  // namespace orchmllm
