// Tests for include/orchmllm/balance/split.hpp: the splitting balancer against a brute force
// over every cut at segment boundaries and every assignment (the lower bound is valid, the
// makespan within the documented guarantee of the optimum), pieces that reassemble their items,
// random invariants, S = 1 / no splitting bit-identical to `balance`, and the errors.

#include "orchmllm/balance/split.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::any_balancer;
namespace balancers = orchmllm::balancers;
using orchmllm::batch_layout;
using orchmllm::rank_t;
using orchmllm::split_options;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;

// Quadratic integer cost per segment: attention within a segment.
struct square_plus {
  std::int64_t operator()(std::int64_t l) const { return l * l + 3 * l; }
};

// Whether the maximal runs of equal labels of one item form a valid cut: one run (the whole
// item), or k ≥ 2 runs of ≥ min segments each and k ≤ max pieces. Every valid cut with an
// assignment gives the loads of the labelling "segment -> its piece's rank", whose maximal runs
// are a coarser valid cut; so the optimum over labellings with valid runs is the optimum.
bool valid_runs(const std::vector<rank_t>& label, std::size_t a, std::size_t b,
                const split_options& s) {
  std::int64_t runs = 0, run = 0;
  std::int64_t shortest = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = a; i < b; ++i) {
    if (i > a && label[i] != label[i - 1]) {
      ++runs;
      shortest = std::min(shortest, run);
      run = 0;
    }
    ++run;
  }
  ++runs;
  shortest = std::min(shortest, run);
  return runs == 1 || (runs <= s.max_pieces && shortest >= s.min_piece_segments);
}

// The smallest makespan(label) over every labelling of the segments (label[i] = the rank of
// segment i, items' segments consecutive) whose runs are valid cuts: every cut at segment
// boundaries and every assignment. `segment_lengths` receives the segments in that order.
template <class Makespan>
std::int64_t brute_over_cuts(const batch_layout& l, const split_options& s,
                             std::vector<std::int64_t>& segment_lengths, Makespan makespan) {
  const rank_t d = l.num_ranks();
  segment_lengths.clear();
  std::vector<std::size_t> start{0};
  for (std::int64_t g = 0; g < l.num_items(); ++g) {
    for (auto x : l.segments(g)) segment_lengths.push_back(x);
    start.push_back(segment_lengths.size());
  }
  const std::size_t t = segment_lengths.size();
  std::vector<rank_t> label(t, 0);
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  while (true) {
    bool ok = true;
    for (std::size_t g = 0; g + 1 < start.size() && ok; ++g)
      ok = valid_runs(label, start[g], start[g + 1], s);
    if (ok) best = std::min(best, makespan(label));
    std::size_t i = 0;
    while (i < t && ++label[i] == d) label[i++] = 0;
    if (i == t) break;
  }
  return t == 0 ? 0 : best;
}

// The optimum over every cut at segment boundaries and every assignment (packed).
template <class C>
std::int64_t brute_optimum(const batch_layout& l, const C& cost, const split_options& s) {
  const auto d = static_cast<std::size_t>(l.num_ranks());
  std::vector<std::int64_t> seg;
  return brute_over_cuts(l, s, seg, [&](const std::vector<rank_t>& label) {
    std::vector<std::int64_t> load(d, 0);
    for (std::size_t i = 0; i < label.size(); ++i)
      load[static_cast<std::size_t>(label[i])] += cost(seg[i]);
    return *std::max_element(load.begin(), load.end());
  });
}

// The pieces of every item are contiguous ids, in segment order, and cover it exactly once;
// every piece of a cut item follows the rules.
template <class R>
void check_pieces(const batch_layout& l, const R& r, const split_options& s) {
  const auto& p = r.pieces;
  REQUIRE(p.items() == l);
  REQUIRE(p.layout().num_items() == p.num_pieces());
  REQUIRE(r.balance.plan.num_items() == p.num_pieces());
  for (std::int64_t g = 0; g < l.num_items(); ++g) {
    std::int64_t next = 0;
    const auto k = p.num_pieces_of(g);
    CHECK(k >= 1);
    CHECK(k <= std::max<std::int64_t>(1, s.max_pieces));
    for (auto q = p.first_piece(g); q < p.first_piece(g + 1); ++q) {
      CHECK(p.item_of(q) == g);
      CHECK(p.first_segment(q) == next);
      CHECK(p.last_segment(q) > p.first_segment(q));
      if (k > 1) CHECK(p.last_segment(q) - p.first_segment(q) >= s.min_piece_segments);
      next = p.last_segment(q);
      const auto dst = r.balance.plan.destination_of(q);
      CHECK(dst.rank >= 0);
      CHECK(dst.rank < l.num_ranks());
    }
    CHECK(next == l.num_segments(g));
  }
}

}  // namespace

TEST_CASE("split: brute force over every cut and assignment") {
  std::mt19937_64 rng(2024);
  const square_plus cost;
  int cases = 0, optimal = 0, split_cases = 0;
  double worst_ratio = 1, sum_ratio = 0;
  int default_optimal = 0;  // the default options (m = 1, P unlimited, 4 rounds), automatic
  double default_worst = 1, default_sum = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 3));
    const auto n = uniform(rng, 1, 4);
    const auto l = orchmllm::test::random_segmented_layout(rng, d, n, 4, 6);
    if (l.total_segments() > (d == 3 ? 9 : 12)) continue;
    split_options s;
    s.min_piece_segments = uniform(rng, 1, 2);
    s.max_pieces = uniform(rng, 1, 4);
    s.rounds = static_cast<int>(uniform(rng, 1, 4));
    const auto opt = brute_optimum(l, cost, s);
    {
      const auto best = brute_optimum(l, cost, split_options{});
      const auto r = orchmllm::balance_split(l, cost);
      check_pieces(l, r, split_options{});
      CHECK(r.lower_bound <= best);
      CHECK(r.balance.makespan >= best);
      CHECK(r.balance.makespan <= r.guarantee);
      default_optimal += r.balance.makespan == best;
      const double ratio = best > 0 ? static_cast<double>(r.balance.makespan) / best : 1.0;
      default_worst = std::max(default_worst, ratio);
      default_sum += ratio;
    }
    for (const any_balancer& method :
         {any_balancer(balancers::lpt{}), any_balancer(balancers::automatic{})}) {
      const auto r = orchmllm::balance_split(l, cost, orchmllm::packed, method, {}, s);
      check_pieces(l, r, s);
      const auto lb = orchmllm::split_lower_bound(l, d, cost, s);
      // L, or balance's own bound (at least L) when nothing may be split.
      CHECK(lb <= r.lower_bound);
      if (s.max_pieces > 1) CHECK(lb == r.lower_bound);
      CHECK(r.lower_bound <= opt);       // a valid bound
      CHECK(r.balance.makespan >= opt);  // a real plan
      CHECK(r.largest_piece <= lb);      // p_max <= L
      CHECK(r.balance.makespan <= r.guarantee);
      // makespan − OPT <= (1 − 1/d)·p_max and makespan <= (2 − 1/d)·OPT.
      CHECK(d * (r.balance.makespan - opt) <= (d - 1) * r.largest_piece);
      CHECK(d * r.balance.makespan <= (2 * d - 1) * opt);
      // The makespan matches the loads of the pieces' plan.
      const auto loads =
          orchmllm::rank_loads(r.pieces.layout(), r.balance.plan, cost, orchmllm::packed);
      CHECK(*std::max_element(loads.begin(), loads.end()) == r.balance.makespan);
      if (method.name() == balancers::automatic::name) {
        ++cases;
        optimal += r.balance.makespan == opt;
        split_cases += !r.pieces.is_whole();
        const double ratio = opt > 0 ? static_cast<double>(r.balance.makespan) / opt : 1.0;
        worst_ratio = std::max(worst_ratio, ratio);
        sum_ratio += ratio;
      }
    }
  }
  REQUIRE(cases > 100);
  std::printf(
      "split brute force: %d cases (%d with a split), optimal in %d, mean ratio %.4f, "
      "worst %.4f; default options: optimal in %d, mean ratio %.4f, worst %.4f\n",
      cases, split_cases, optimal, sum_ratio / cases, worst_ratio, default_optimal,
      default_sum / cases, default_worst);
}

namespace {

// The padded optimum over every cut and assignment: a labelling's rank holds rows = its
// segments, each padded to the rank's longest segment (runs as in brute_optimum; merging two
// adjacent pieces on one rank changes no padded load either).
template <class C>
std::int64_t brute_padded_optimum(const batch_layout& l, const C& cost,
                                  orchmllm::padding_policy policy, const split_options& s) {
  const auto d = static_cast<std::size_t>(l.num_ranks());
  std::vector<std::int64_t> seg;
  return brute_over_cuts(l, s, seg, [&](const std::vector<rank_t>& label) {
    std::vector<std::int64_t> rows(d, 0), longest(d, 0);
    for (std::size_t i = 0; i < label.size(); ++i) {
      const auto r = static_cast<std::size_t>(label[i]);
      ++rows[r];
      longest[r] = std::max(longest[r], seg[i]);
    }
    std::int64_t worst = 0;
    for (std::size_t r = 0; r < d; ++r)
      if (rows[r] > 0) worst = std::max(worst, rows[r] * cost(policy.padded_length(longest[r])));
    return worst;
  });
}

}  // namespace

TEST_CASE("split: padded policies against brute force over every cut and assignment") {
  std::mt19937_64 rng(1414);
  const square_plus cost;
  const std::array<orchmllm::padding_policy, 3> policies{
      orchmllm::padded, orchmllm::padded_to_multiple(4), orchmllm::bucketed({4, 8, 16})};
  int cases = 0, optimal = 0, cut = 0, equal_cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 3));
    const auto n = uniform(rng, 1, 3);
    // Equal segments (the temporal groups of a video) in most trials, unequal in the others.
    const bool equal = trial % 4 != 3;
    batch_layout l = orchmllm::test::random_segmented_layout(rng, d, n, 4, 6);
    if (equal) {
      vec counts, lengths;
      for (std::int64_t g = 0; g < n; ++g) {
        counts.push_back(uniform(rng, 1, 4));
        lengths.push_back(counts.back() * uniform(rng, 0, 6));
      }
      l = batch_layout(vec(l.offsets().begin(), l.offsets().end()), lengths)
              .with_equal_segments(counts);
    }
    if (l.total_segments() > (d == 3 ? 8 : 11)) continue;
    const auto policy = policies[static_cast<std::size_t>(trial) % policies.size()];
    split_options s;
    s.min_piece_segments = uniform(rng, 1, 2);
    s.max_pieces = uniform(rng, 1, 4);
    const auto opt = brute_padded_optimum(l, cost, policy, s);
    std::int64_t longest = 0;
    for (auto x : l.segment_lengths()) longest = std::max(longest, x);
    if (!l.has_segments())
      for (auto x : l.lengths()) longest = std::max(longest, x);
    const std::int64_t u_max = cost(policy.padded_length(longest));
    for (const any_balancer& method :
         {any_balancer(balancers::lpt{}), any_balancer(balancers::padded_exact{}),
          any_balancer(balancers::automatic{})}) {
      CAPTURE(trial);
      CAPTURE(method.name());
      CAPTURE(s.max_pieces);
      CAPTURE(s.min_piece_segments);
      CAPTURE(d);
      CAPTURE(opt);
      CAPTURE(l.total_segments());
      CAPTURE(l.num_items());
      const auto r = orchmllm::balance_split(l, cost, policy, method, {}, s);
      check_pieces(l, r, s);
      // The reported makespan is the padded load of the pieces' plan, rows per segment.
      const auto loads = orchmllm::rank_loads(r.pieces.layout(), r.balance.plan, cost, policy);
      CHECK(*std::max_element(loads.begin(), loads.end()) == r.balance.makespan);
      CHECK(r.lower_bound <= opt);
      CHECK(r.balance.makespan >= opt);
      // (Without segments the result is balance's own, and `guarantee` the packed formula.)
      if (method.name() != balancers::lpt::name && l.has_segments()) {
        CHECK(r.balance.makespan <= r.guarantee);
        // With equal segments the guarantee is within (R − 1) · u_max of the optimum, R the
        // most segments of a piece of the finest cut (at most the most segments of an item).
        if (equal && l.has_segments()) {
          std::int64_t most = 1;
          for (std::int64_t g = 0; g < l.num_items(); ++g) {
            const auto S = l.num_segments(g);
            const auto K =
                std::max<std::int64_t>(1, std::min(s.max_pieces, S / s.min_piece_segments));
            most = std::max(most, (S + K - 1) / K);
          }
          CHECK(r.guarantee <= opt + (most - 1) * u_max);
          ++equal_cases;
        }
      }
      if (method.name() == balancers::automatic::name) {
        ++cases;
        optimal += r.balance.makespan == opt;
        cut += !r.pieces.is_whole();
      }
    }
  }
  REQUIRE(cases > 100);
  std::printf(
      "padded split brute force: %d cases (%d cut), optimal in %d, %d checked against "
      "OPT + (R - 1) u_max\n",
      cases, cut, optimal, equal_cases);
}

TEST_CASE("split: the smallest largest piece of one item against brute force") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const auto s = uniform(rng, 1, 9);
    std::vector<std::int64_t> costs(static_cast<std::size_t>(s));
    for (auto& c : costs) c = uniform(rng, 0, 20);
    std::vector<std::int64_t> prefix{0};
    for (auto c : costs) prefix.push_back(prefix.back() + c);
    const auto m = uniform(rng, 1, 3);
    const auto k_max = uniform(rng, 1, 5);
    const orchmllm::detail::item_cutter<std::int64_t> cut{prefix, m, k_max};
    // Brute force over the 2^(s−1) cuts.
    std::int64_t best = prefix.back();
    for (std::uint32_t mask = 0; mask < (1u << (s - 1)); ++mask) {
      std::int64_t runs = 1, run = 1, shortest = std::numeric_limits<std::int64_t>::max(),
                   largest = 0, acc = costs[0];
      for (std::int64_t i = 1; i < s; ++i) {
        if (mask & (1u << (i - 1))) {
          shortest = std::min(shortest, run);
          largest = std::max(largest, acc);
          ++runs;
          run = 0;
          acc = 0;
        }
        ++run;
        acc += costs[static_cast<std::size_t>(i)];
      }
      shortest = std::min(shortest, run);
      largest = std::max(largest, acc);
      if (runs == 1 || (runs <= k_max && shortest >= m)) best = std::min(best, largest);
    }
    CHECK(cut.smallest_largest(cut.piece_limit()) == best);
    if (cut.piece_limit() == 1) continue;  // whole: never cut
    // The fewest pieces under that target is a valid cut no larger than the limit.
    std::vector<std::int64_t> firsts;
    const auto k = cut.fewest(best, &firsts);
    CHECK(k <= cut.piece_limit());
    REQUIRE(static_cast<std::int64_t>(firsts.size()) == k);
    CHECK(firsts.front() == 0);
  }
}

TEST_CASE("split: random inputs keep every invariant") {
  std::mt19937_64 rng(99);
  const orchmllm::quadratic_cost qc{0.5, 1.0, 0.01};
  for (int trial = 0; trial < 150; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const auto n = uniform(rng, 0, 60);
    const auto l = orchmllm::test::random_segmented_layout(rng, d, n, 12, 50);
    split_options s;
    s.min_piece_segments = uniform(rng, 1, 3);
    s.max_pieces = uniform(rng, 1, 8);
    const auto r = orchmllm::balance_split(l, square_plus{}, orchmllm::packed, {}, {}, s);
    check_pieces(l, r, s);
    CHECK(r.balance.makespan >= r.lower_bound);
    CHECK(r.balance.makespan <= r.guarantee);
    CHECK(r.largest_piece <= r.lower_bound);
    // Determinism: the same call, the same pieces and plan.
    const auto again = orchmllm::balance_split(l, square_plus{}, orchmllm::packed, {}, {}, s);
    CHECK(again.pieces == r.pieces);
    CHECK(again.balance.plan == r.balance.plan);
    // Floating costs: the guarantee within a relative 1e-9.
    const auto f = orchmllm::balance_split(l, qc, orchmllm::packed, {}, {}, s);
    check_pieces(l, f, s);
    CHECK(f.balance.makespan <= f.guarantee * (1 + 1e-9));
    CHECK(f.balance.makespan >= f.lower_bound * (1 - 1e-9));
  }
}

TEST_CASE("split: the pieces' rows move along the plan and reassemble every item in order") {
  // The items' rows laid out item by item are the pieces' rows laid out piece by piece, so the
  // plan of the pieces moves them as ragged rows; gathering an item's pieces at their
  // destinations in piece order gives back its rows, and the inverse plan the whole buffer.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 60; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto l = orchmllm::test::random_segmented_layout(rng, d, uniform(rng, 0, 30), 10, 20);
    const auto r = orchmllm::balance_split(l, square_plus{});
    const auto& pl = r.pieces.layout();
    orchmllm::ragged_rows<std::int64_t> in;
    in.row_offsets = {0};
    for (std::int64_t p = 0; p < pl.num_items(); ++p)
      in.row_offsets.push_back(in.row_offsets.back() + pl.length(p));
    for (std::int64_t g = 0; g < l.num_items(); ++g)
      for (std::int64_t row = 0; row < l.length(g); ++row) in.rows.push_back(g * 1000 + row);
    const auto out = orchmllm::apply(r.balance.plan, in);
    for (std::int64_t g = 0; g < l.num_items(); ++g) {
      vec rows;
      for (auto p = r.pieces.first_piece(g); p < r.pieces.first_piece(g + 1); ++p) {
        const auto h = static_cast<std::size_t>(r.balance.plan.destination_id(p));
        rows.insert(rows.end(), out.rows.begin() + out.row_offsets[h],
                    out.rows.begin() + out.row_offsets[h + 1]);
      }
      vec want(static_cast<std::size_t>(l.length(g)));
      for (std::size_t row = 0; row < want.size(); ++row)
        want[row] = g * 1000 + static_cast<std::int64_t>(row);
      CHECK(rows == want);
    }
    CHECK(orchmllm::apply(r.balance.plan.inverse(), out).rows == in.rows);
  }
}

TEST_CASE("split: a long video is cut only as much as needed") {
  // 4 ranks; one item of 8 equal segments costing 10 each (80), four items of 10 elsewhere.
  const batch_layout items({0, 1, 3, 4, 5}, {80, 10, 10, 10, 10});
  const vec counts{8, 1, 1, 1, 1};
  const auto l = items.with_equal_segments(counts);
  const orchmllm::linear_cost lin{};
  const auto r = orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, {});
  CHECK(r.lower_bound == 30);             // (80 + 40) / 4
  CHECK(r.balance.makespan == 30);        // optimal
  CHECK(r.pieces.num_pieces_of(0) == 3);  // 80 -> 30 + 30 + 20: the fewest pieces under 30
  for (std::int64_t g = 1; g < 5; ++g) CHECK(r.pieces.num_pieces_of(g) == 1);
  // Without splitting the video sets the makespan.
  split_options none;
  none.max_pieces = 1;
  const auto whole = orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, none);
  CHECK(whole.balance.makespan == 80);
  CHECK(whole.pieces.is_whole());
  // A minimum piece of 3 segments: 80 -> at most 2 pieces (8 / 3), 40 + 40.
  split_options min3;
  min3.min_piece_segments = 3;
  const auto r3 = orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, min3);
  CHECK(r3.lower_bound == 40);
  CHECK(r3.balance.makespan == 40);
  CHECK(r3.pieces.num_pieces_of(0) == 2);
}

TEST_CASE("split: S = 1 and no splitting give the plans of balance, bit for bit") {
  std::mt19937_64 rng(17);
  const orchmllm::quadratic_cost qc{1.0, 2.0, 0.003};
  for (int trial = 0; trial < 40; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 32));
    const auto n = uniform(rng, 0, 300);
    vec lengths(static_cast<std::size_t>(n));
    for (auto& x : lengths) x = uniform(rng, 0, 4000);
    const batch_layout plain(orchmllm::test::random_offsets(rng, d, n), lengths);
    const vec ones(static_cast<std::size_t>(n), 1);
    const auto single = plain.with_equal_segments(ones);
    REQUIRE(single == plain);
    for (const any_balancer& method :
         {any_balancer(balancers::automatic{}), any_balancer(balancers::lpt{}),
          any_balancer(balancers::karmarkar_karp{}),
          any_balancer(balancers::karmarkar_karp_equal{})}) {
      const auto a = orchmllm::balance(plain, qc, orchmllm::packed, method);
      const auto b = orchmllm::balance(single, qc, orchmllm::packed, method);
      CHECK(a.plan == b.plan);
      CHECK(a.makespan == b.makespan);
      const auto c = orchmllm::balance_split(single, qc, orchmllm::packed, method, {}, {});
      CHECK(c.pieces.is_whole());
      CHECK(c.pieces.layout() == plain);
      CHECK(c.balance.plan == a.plan);
      CHECK(c.balance.makespan == a.makespan);
      CHECK(c.balance.lower_bound == a.lower_bound);
    }
    const auto p = orchmllm::balance(plain, qc, orchmllm::padded, {});
    const auto q = orchmllm::balance(single, qc, orchmllm::padded, {});
    CHECK(p.plan == q.plan);
    // Real segments with splitting disabled: the plan of balance on the segmented layout.
    const auto seg = orchmllm::test::random_segmented_layout(rng, d, n, 5, 30);
    split_options off;
    off.max_pieces = 1;
    const auto x = orchmllm::balance_split(seg, qc, orchmllm::packed, {}, {}, off);
    const auto y = orchmllm::balance(seg, qc, orchmllm::packed, {});
    CHECK(x.balance.plan == y.plan);
    CHECK(x.pieces.layout() == seg);
  }
}

TEST_CASE("split: segmented costs in balance and the splitting-aware bound") {
  // Item costs are sums over segments: 2 segments of 3 cost 2·9 under l², not 36 (the
  // statistics' side is in tests/core/statistics_test.cpp).
  const batch_layout l({0, 1, 2}, {6, 6}, {}, {}, {0, 2, 3}, {3, 3, 6});
  const auto sq = [](std::int64_t x) { return x * x; };
  const auto r = orchmllm::balance(l, sq, orchmllm::packed);
  CHECK(r.makespan == 36);
  CHECK(orchmllm::split_lower_bound(l, 2, sq) == 36);  // item 1 is one segment of cost 36
  const batch_layout l2({0, 1, 2}, {6, 6}, {}, {}, {0, 2, 4}, {3, 3, 3, 3});
  CHECK(orchmllm::split_lower_bound(l2, 3, sq) == 12);            // average 36 / 3, pieces of 9
  CHECK(orchmllm::balance_split(l2, sq).balance.makespan == 18);  // 4 pieces of 9 on 3 ranks
}

TEST_CASE("split: bad input raises clear errors") {
  const batch_layout l({0, 2}, {6, 3}, {}, {}, {0, 3, 4}, {2, 2, 2, 3});
  const orchmllm::linear_cost lin{};
  split_options s;
  s.min_piece_segments = 0;
  expect_invalid([&] { (void)orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, s); },
                 {"min_piece_segments is 0", ">= 1"});
  s = {};
  s.max_pieces = 0;
  expect_invalid([&] { (void)orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, s); },
                 {"max_pieces is 0"});
  s = {};
  s.rounds = 0;
  expect_invalid([&] { (void)orchmllm::split_lower_bound(l, 1, lin, s); }, {"rounds is 0"});
  s = {};
  s.tolerance = -0.5;
  expect_invalid([&] { (void)orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, s); },
                 {"split tolerance is -0.5"});
  // `balance` takes the same layout under a padded policy (its items whole, segments as rows).
  CHECK(orchmllm::balance(l, lin, orchmllm::padded).plan.num_items() == l.num_items());
  const auto negative = [](std::int64_t x) { return x == 3 ? -1 : x; };
  expect_invalid([&] { (void)orchmllm::balance(l, negative, orchmllm::packed); },
                 {"cost of segment 0 of item 1", "must be >= 0"});
  expect_invalid([&] { (void)orchmllm::balance_split(l, negative, orchmllm::packed, {}, {}, {}); },
                 {"cost of segment 0 of item 1"});
  expect_invalid([&] { (void)orchmllm::split_lower_bound(l, 0, lin); }, {"on 0 ranks"});
  // An item of S < min piece segments is not an error: it stays whole.
  s = {};
  s.min_piece_segments = 5;
  const auto r = orchmllm::balance_split(l, lin, orchmllm::packed, {}, {}, s);
  CHECK(r.pieces.is_whole());
}
