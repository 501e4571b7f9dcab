// Prints a fingerprint of the plans and floating costs the library computes on random inputs.
// tests/CMakeLists.txt builds this file twice, at -O0 and at -O3 -march=native
// -ffp-contract=fast (FMA contraction allowed), and ctest determinism.build_flags requires the
// two outputs to be equal: ranks built with different flags must agree on every plan.
// Not a doctest program: its output is the test.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <vector>

namespace {

using namespace orchmllm;

// The library's FNV-1a over 64-bit words: order-sensitive, platform-independent.
struct digest : detail::fnv {
  void add(std::uint64_t v) { mix(v); }
  void add(double v) { mix_double(v); }
};

// Inputs come from integer operations and exact power-of-two scalings only: the program's
// own arithmetic must not differ between the two builds, only the library's may.
std::int64_t log_uniform_length(std::mt19937_64& rng) {  // 1 .. 2^15, log-uniform-ish
  const int bits = static_cast<int>(rng() % 15);
  return 1 + static_cast<std::int64_t>(rng() % (std::uint64_t{1} << bits));
}
double full_mantissa(std::mt19937_64& rng, int exponent) {  // [1, 2) · 2^exponent, 53 bits
  return std::ldexp(static_cast<double>((rng() >> 11) | (std::uint64_t{1} << 52)), exponent - 52);
}

template <class C, class B>
void add_plan(digest& f, const batch_layout& layout, const C& cost, padding_policy policy,
              const B& balancer, const constraints& limits = {}) {
  const auto res = balance(layout, cost, policy, balancer, limits);
  for (const rank_t r : res.plan.dst_ranks()) f.add(static_cast<std::uint64_t>(r));
  f.add(static_cast<double>(res.makespan));
  f.add(static_cast<double>(res.lower_bound));
}

}  // namespace

int main() {
  std::mt19937_64 rng(0x0fc0'e7a1);
  int lines = 0;
  for (int round = 0; round < 40; ++round) {
    const auto d = static_cast<rank_t>(std::uniform_int_distribution<int>(2, 32)(rng));
    const auto n = std::uniform_int_distribution<std::int64_t>(d, 40 * d)(rng);
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
    for (auto& l : lengths) l = log_uniform_length(rng);
    std::vector<std::int64_t> offsets;
    for (rank_t r = 0; r < d; ++r) offsets.push_back(n * r / d);
    offsets.push_back(n);
    const batch_layout layout(offsets, lengths);

    // Coefficients with full mantissas, so a fused multiply-add rounds differently.
    const int e = static_cast<int>(rng() % 8);
    const quadratic_cost quad{full_mantissa(rng, e + 2), full_mantissa(rng, e - 4),
                              full_mantissa(rng, e - 18)};
    transformer_config config;
    config.hidden = 128 * std::uniform_int_distribution<std::int64_t>(4, 64)(rng);
    config.heads = config.hidden / 128;
    config.layers = std::uniform_int_distribution<std::int64_t>(1, 80)(rng);
    config.ffn_hidden = std::uniform_int_distribution<std::int64_t>(1000, 30000)(rng);
    config.passes = full_mantissa(rng, 0);
    const transformer_flops_cost flops(config);

    digest costs;
    for (const auto l : lengths) {
      costs.add(quad(l));
      costs.add(flops(l));
    }
    digest plans;
    for (const any_balancer& b :
         {any_balancer(balancers::lpt{}), any_balancer(balancers::karmarkar_karp{}),
          any_balancer(balancers::karmarkar_karp_equal{}), any_balancer(balancers::automatic{})}) {
      add_plan(plans, layout, quad, packed, b);
      add_plan(plans, layout, flops, packed, b);
    }
    add_plan(plans, layout, quad, padded, balancers::padded_exact{});
    add_plan(plans, layout, quad, padded_to_multiple(64), balancers::padded_exact{});
    constraints capped;  // the constrained first-fit search under a token cap
    capped.cap = capacity{capacity::measure::tokens, 0};
    std::int64_t total = 0, longest = 0;
    for (const auto l : lengths) total += l, longest = std::max(longest, l);
    capped.cap->limit = total / d + longest;  // first fit always finds room below it
    add_plan(plans, layout, quad, packed, balancers::lpt{}, capped);

    // A profile fit, as a trainer would run on every rank from the same timings.
    std::vector<double> seconds;
    for (const auto l : lengths)
      seconds.push_back(quad(l) * full_mantissa(rng, 0));  // a product, never added to here
    const auto fit = fit_quadratic_cost(lengths, seconds);
    digest fitted;
    fitted.add(fit.constant);
    fitted.add(fit.linear);
    fitted.add(fit.quadratic);

    // Context parallelism: the shard times, the bound and the placements in double.
    cp_options cp;
    cp.sizes = {1, 2, 4};
    cp.micro_batches = 2;
    const cp_cost per_shard = cp_cost::from_transformer(config, full_mantissa(rng, 40));
    const cp_result sharded =
        balance_context_parallel(layout, per_shard, topology::uniform(d, 4), cp);
    for (const rank_t r : sharded.plan.dst_ranks()) plans.add(static_cast<std::uint64_t>(r));
    for (const auto m : sharded.micro_batch) plans.add(static_cast<std::uint64_t>(m));
    plans.add(sharded.makespan);
    plans.add(sharded.lower_bound);
    plans.add(sharded.objective);

    std::printf("round %2d d=%2d n=%4lld costs %016llx plans %016llx fit %016llx\n", round,
                static_cast<int>(d), static_cast<long long>(n),
                static_cast<unsigned long long>(costs.h), static_cast<unsigned long long>(plans.h),
                static_cast<unsigned long long>(fitted.h));
    ++lines;
  }
  return lines == 40 ? 0 : 1;
}
