// Consumer of an installed orchmllm (package.find_package test), built twice: header-only and
// linked to orchmllm::compiled (where balance, compute_statistics, map_bins and plan_step come
// from the library). It uses the library as a trainer would, through the installed headers
// only: its own sample struct balanced through a projection with a lambda cost, its own
// balancer and its own padding rule, the items applied back, and plan_step with its own mapper
// and padding rule in a stage declaration; every result is checked against the invariants the
// built-ins meet.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <orchmllm/orchmllm.hpp>
#include <string>
#include <vector>

static_assert(ORCHMLLM_VERSION_MAJOR == 0, "unexpected major version");

namespace {

struct sample {
  std::string name;
  std::int64_t tokens = 0;
  std::vector<std::int64_t> images;  // patches per image
};

// The trainer's balancer: lpt's plan, then the longest item back home when that is no worse.
struct keep_longest_home {
  template <class C>
  orchmllm::balancer_plan operator()(const orchmllm::balance_problem<C>& p) const {
    orchmllm::balancer_plan plan = orchmllm::balancers::lpt{}(p);
    plan.used = "keep_longest_home";
    if (!plan.destination || p.num_items() == 0) return plan;
    auto home = *plan.destination;
    const auto longest = p.order().front();
    home[static_cast<std::size_t>(longest)] = p.layout().rank_of(longest);
    if (p.satisfies(home) && p.makespan(home) <= p.makespan(*plan.destination))
      plan.destination = home;
    return plan;
  }
};

// The trainer's padding rule: rectangular batches padded to the next power of two.
struct next_pow2 {
  std::int64_t padded_length(std::int64_t l) const {
    std::int64_t p = 1;
    while (p < l) p *= 2;
    return l == 0 ? 0 : p;
  }
  bool operator==(const next_pow2&) const = default;
  const char* name() const { return "next-pow2"; }
};

// The trainer's mapper: each bin, in order, to the free rank that sampled most of its bytes
// (ties: the lowest such rank). Deterministic, as a mapper in a stage must be.
struct most_bytes_home {
  std::vector<orchmllm::rank_t> operator()(const orchmllm::bin_mapping_problem& p) const {
    const auto d = static_cast<std::size_t>(p.num_bins());
    std::vector<std::int64_t> held(d * d, 0);  // held[b * d + r]: bytes of bin b sampled on r
    const auto& plan = p.binned();
    for (orchmllm::rank_t r = 0; r < plan.num_src_ranks(); ++r)
      for (auto g = plan.src_offsets()[r]; g < plan.src_offsets()[r + 1]; ++g)
        held[static_cast<std::size_t>(plan.dst_ranks()[g]) * d + static_cast<std::size_t>(r)] +=
            p.item_bytes()[static_cast<std::size_t>(g)];
    std::vector<orchmllm::rank_t> rank_of_bin(d, -1);
    std::vector<bool> taken(d, false);
    for (std::size_t b = 0; b < d; ++b) {
      std::size_t best = d;
      for (std::size_t r = 0; r < d; ++r)
        if (!taken[r] && (best == d || held[b * d + r] > held[b * d + best])) best = r;
      taken[best] = true;
      rank_of_bin[b] = static_cast<orchmllm::rank_t>(best);
    }
    return rank_of_bin;
  }
};

bool check(bool ok, const char* what) {
  if (!ok) std::printf("FAILED: %s\n", what);
  return ok;
}

}  // namespace

int main() {
  const char* v = orchmllm::version_string();
#if defined(ORCHMLLM_COMPILED)
  const char* mode = "compiled";
#else
  const char* mode = "header-only";
#endif
  bool ok = v != nullptr && std::strlen(v) > 0;

  // 1. The trainer's samples, per rank, balanced through a projection and a lambda cost.
  std::vector<std::vector<sample>> ranks{{{"a", 900, {64}}, {"b", 20, {}}, {"c", 30, {16, 16}}},
                                         {{"d", 10, {}}},
                                         {},
                                         {{"e", 700, {}}}};
  const auto cost = [](std::int64_t l) { return l + l * l / 512; };
  const auto layout = orchmllm::make_layout(ranks, &sample::tokens);
  const auto mine =
      orchmllm::balance(ranks, cost, &sample::tokens, orchmllm::packed, keep_longest_home{});
  const auto lpt = orchmllm::balance(layout, cost, orchmllm::packed, orchmllm::balancers::lpt{});
  const auto s = orchmllm::compute_statistics(layout, mine.plan, cost, orchmllm::packed);
  ok &= check(mine.used == "keep_longest_home", "custom balancer reported by its name");
  ok &= check(mine.makespan <= lpt.makespan, "custom balancer no worse than lpt");
  ok &= check(mine.makespan >= mine.lower_bound, "makespan at least the lower bound");
  ok &= check(s.makespan == mine.makespan, "statistics agree with the balancer");
  ok &= check(mine.plan.destination_of(0).rank == 0, "longest item kept home");
  // 1b. The same samples as rectangular batches under the trainer's padding rule: the exact
  //     padded algorithm is optimal for it, and a rank's load is count × cost(pad(longest)).
  const orchmllm::padding_policy pow2 = next_pow2{};
  const auto exact =
      orchmllm::balance(ranks, cost, &sample::tokens, pow2, orchmllm::balancers::padded_exact{});
  const auto own = orchmllm::balance(ranks, cost, &sample::tokens, pow2, keep_longest_home{});
  ok &= check(exact.proven_optimal, "padded_exact proven optimal under the trainer's rule");
  ok &= check(own.makespan >= exact.makespan, "no balancer beats the exact one");
  ok &=
      check(orchmllm::compute_statistics(layout, exact.plan, cost, pow2).makespan == exact.makespan,
            "statistics agree under the trainer's rule");
  std::int64_t worst = 0;
  for (const auto& r : orchmllm::apply_by_rank(exact.plan, ranks)) {
    std::int64_t longest = 0;
    for (const auto& x : r) longest = std::max(longest, x.tokens);
    const auto n = static_cast<std::int64_t>(r.size());
    worst = std::max(worst, n == 0 ? 0 : n * cost(next_pow2{}.padded_length(longest)));
  }
  ok &= check(worst == exact.makespan, "padded loads recomputed by hand");

  const auto moved = orchmllm::apply_by_rank(mine.plan, std::move(ranks));
  std::size_t count = 0;
  for (std::size_t r = 0; r < moved.size(); ++r) {
    std::int64_t load = 0;
    for (const auto& x : moved[r]) load += cost(x.tokens);
    ok &= check(load <= mine.makespan, "applied items within the makespan");
    count += moved[r].size();
  }
  ok &= check(count == 5, "every sample arrives once");

  // 2. A step with the trainer's mapper in a stage declaration (single process: the metadata
  //    of all four ranks built in one place).
  orchmllm::stage_declarations decl;
  decl.encoders.resize(1);
  decl.encoders[0].name = "vision";
  decl.encoders[0].cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 1024};
  decl.encoders[0].mapper = orchmllm::stage_mapper(most_bytes_home{}, "most-bytes-home");
  decl.encoders[0].policy = next_pow2{};
  decl.llm.cost = cost;
  std::vector<orchmllm::local_batch> batches;
  for (const auto& r : moved)
    batches.push_back(orchmllm::make_local_batch(
        r, &sample::tokens, orchmllm::modality(&sample::images, [](std::int64_t patches) {
          return orchmllm::sub_item_size{patches, patches, patches / 4};
        })));
  const auto meta = orchmllm::make_step_metadata(batches, 1);
  const auto topo = orchmllm::topology::uniform(4, 2);
  const auto step = orchmllm::plan_step(decl, meta, topo);
  const auto& vision = step.encoders[0];
  vision.input.validate();
  ok &= check(vision.input.num_items() == 3, "every image planned");
  ok &= check(orchmllm::compose(vision.output, vision.input) == vision.lifted,
              "encoder outputs reach their sample's LLM rank");
  ok &= check(step.stages[0].makespan_after >= step.stages[0].lower_bound,
              "vision makespan at least its lower bound");

  std::printf("orchmllm %s (find_package, %s): makespan %lld -> %lld, vision %.1f -> %.1f\n", v,
              mode, static_cast<long long>(s.makespan_before), static_cast<long long>(s.makespan),
              step.stages[0].makespan_before, step.stages[0].makespan_after);
  return ok ? 0 : 1;
}
