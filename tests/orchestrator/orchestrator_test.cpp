// Tests for include/orchmllm/orchestrator/orchestrator.hpp.
//
// Random multimodal steps (fixed seeds): 1..16 ranks, 0..6 samples per rank, 0..4 sub-items per
// sample over K = 0..3 modalities (many samples with none), sub-items of different samples
// interleaved in the local order, zero-row items, random stage declarations (cost models,
// packed/padded policies, balancers incl. locality, the three mappings), uniform and uneven
// topologies (random node maps).
//
//  1. Planning invariants (pure): valid plans over the right layouts; compose(output, input) ==
//     lifted, compose(lifted, input⁻¹) == output, gradient == output⁻¹; a sub-item's lifted rank
//     is its parent's LLM rank, in (parent's LLM slot, original order); every report figure
//     recomputed independently (balancer rerun, loads/tokens/bytes by brute force, moved and
//     inter-node bytes from the plan); llm_view against a reference built from the raw batches.
//  2. End to end on the local backend (ranks_per_node fakes nodes): payload rows encode (tag,
//     modality, global sub-item id or sample id, row index); every route is dispatched as the
//     orchestrator.hpp file comment shows and every received payload is compared byte for byte
//     with a reference computed from the raw batches (not from the routes under test): encoder
//     inputs, text, encoder outputs (composed route) — also against the naive two hops through
//     the origin — and gradients back to the encoder ranks. gather_step_metadata equals
//     make_step_metadata on every rank.
//  3. Bad input on the local backend: every rank throws the same error type with a message
//     naming the culprit, and the group is still usable afterwards (no hang: run timeout).
//
// doctest macros are not thread-safe: rank functions record failures as strings (one slot per
// rank) and every CHECK runs on the main thread after `run` returns.

#include "orchmllm/orchestrator/orchestrator.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/counting_communicator.hpp"
#include "support/test_support.hpp"

namespace {

namespace balancers = orchmllm::balancers;
namespace mappers = orchmllm::mappers;
using orchmllm::batch_layout;
using orchmllm::capacity;
using orchmllm::communication_error;
using orchmllm::encoder_stage;
using orchmllm::infeasible_error;
using orchmllm::invalid_argument_error;
using orchmllm::linear_cost;
using orchmllm::local_batch;
using orchmllm::quadratic_cost;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::stage_declarations;
using orchmllm::step_metadata;
using orchmllm::step_plan;
using orchmllm::sub_item;
using orchmllm::topology;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Random inputs.

std::vector<local_batch> random_batches(std::mt19937_64& rng, rank_t d, int k_count) {
  std::vector<local_batch> out(static_cast<std::size_t>(d));
  for (auto& b : out) {
    const auto samples = uniform(rng, 0, 6);
    std::vector<std::vector<sub_item>> per_sample(static_cast<std::size_t>(samples));
    for (std::int64_t i = 0; i < samples; ++i) {
      b.text_tokens.push_back(uniform(rng, 0, 7) == 0 ? 0 : uniform(rng, 1, 40));
      if (k_count == 0 || uniform(rng, 0, 2) == 0) continue;  // a sample with no sub-items
      const auto subs = uniform(rng, 0, 4);
      for (std::int64_t s = 0; s < subs; ++s)
        per_sample[static_cast<std::size_t>(i)].push_back(
            sub_item{.modality = static_cast<std::int32_t>(uniform(rng, 0, k_count - 1)),
                     .parent = i,
                     .encoder_length = uniform(rng, 0, 64),
                     .input_rows = uniform(rng, 0, 5),
                     .llm_tokens = uniform(rng, 0, 4)});
    }
    // Interleave the samples' lists, keeping each sample's own order.
    std::vector<std::size_t> next(per_sample.size(), 0);
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < per_sample.size(); ++i)
      if (!per_sample[i].empty()) open.push_back(i);
    while (!open.empty()) {
      const auto pick = static_cast<std::size_t>(
          uniform(rng, 0, static_cast<std::int64_t>(open.size()) - 1));
      const auto i = open[pick];
      b.sub_items.push_back(per_sample[i][next[i]++]);
      if (next[i] == per_sample[i].size()) open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }
  return out;
}

template <class Stage>
void randomize_stage(std::mt19937_64& rng, Stage& st) {
  switch (uniform(rng, 0, 2)) {
    case 0: st.cost = orchmllm::stage_cost{}; break;
    case 1: st.cost = linear_cost{uniform(rng, 1, 3)}; break;
    default:
      st.cost = quadratic_cost{0.5, 1.0, 0.01 * static_cast<double>(uniform(rng, 0, 3))};
      break;
  }
  const auto p = uniform(rng, 0, 5);
  st.policy = p == 0 ? orchmllm::padded : p == 1 ? orchmllm::padded_to_multiple(4) : orchmllm::packed;
  // A small exact search budget keeps automatic's exact step cheap under ASan.
  const balancers::automatic automatic{.exact_node_budget = 20'000};
  const orchmllm::any_balancer packed_balancers[] = {automatic,
                                                     automatic,
                                                     balancers::lpt{},
                                                     balancers::karmarkar_karp{},
                                                     balancers::locality{.base = automatic},
                                                     balancers::identity{}};
  const orchmllm::any_balancer padded_balancers[] = {automatic, balancers::padded_exact{},
                                                     balancers::lpt{},
                                                     balancers::locality{.base = automatic}};
  st.balancer = st.policy.is_padded() ? padded_balancers[uniform(rng, 0, 3)]
                                      : packed_balancers[uniform(rng, 0, 5)];
  const orchmllm::any_mapper mappings[] = {mappers::transport{}, mappers::transport{},
                                           mappers::identity{}, mappers::bottleneck{}};
  st.mapper = mappings[uniform(rng, 0, 3)];
}

stage_declarations random_decl(std::mt19937_64& rng, int k_count) {
  static const char* const names[] = {"vision", "audio", "video"};
  stage_declarations decl;
  for (int k = 0; k < k_count; ++k) {
    encoder_stage e;
    e.name = names[k];
    randomize_stage(rng, e);
    e.input_row_bytes = 24 + 8 * uniform(rng, 0, 2);
    e.output_row_bytes = 24 + 8 * uniform(rng, 0, 2);
    decl.encoders.push_back(std::move(e));
  }
  randomize_stage(rng, decl.llm);
  decl.llm.name = uniform(rng, 0, 1) == 0 ? "llm" : "llm-backbone";
  decl.llm.text_row_bytes = 24 + 8 * uniform(rng, 0, 1);
  return decl;
}

topology random_topology(std::mt19937_64& rng, rank_t d) {
  if (uniform(rng, 0, 1) == 0) return topology::uniform(d, static_cast<rank_t>(uniform(rng, 0, 5)));
  // Uneven: nodes of random sizes, ranks of one node not necessarily consecutive.
  std::vector<rank_t> node{0};
  rank_t next = 1;
  for (rank_t r = 1; r < d; ++r) {
    if (uniform(rng, 0, 2) == 0) {
      node.push_back(next++);
    } else {
      node.push_back(static_cast<rank_t>(uniform(rng, 0, next - 1)));
    }
  }
  return topology(std::move(node));
}

// ---------------------------------------------------------------------------------------------
// Reference view of a step, built straight from the raw batches (independent of
// make_step_metadata and of the plans under test).

struct reference {
  rank_t d = 0;
  int k_count = 0;
  vec sample_offsets{0};
  vec text;                                                  // per global sample
  std::vector<vec> mod_offsets;                              // [k] CSR per rank
  std::vector<vec> input_rows, llm_tokens, encoder_length;   // [k][id]
  std::vector<vec> parent;                                   // [k][id] global sample
  std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> subs;  // per sample, in order

  std::int64_t sequence_length(std::int64_t g) const {
    auto len = text[static_cast<std::size_t>(g)];
    for (const auto& [m, id] : subs[static_cast<std::size_t>(g)])
      len += llm_tokens[static_cast<std::size_t>(m)][static_cast<std::size_t>(id)];
    return len;
  }
};

reference make_reference(const std::vector<local_batch>& batches, int k_count) {
  reference ref;
  ref.d = static_cast<rank_t>(batches.size());
  ref.k_count = k_count;
  const auto kc = static_cast<std::size_t>(k_count);
  ref.mod_offsets.assign(kc, vec{0});
  ref.input_rows.resize(kc);
  ref.llm_tokens.resize(kc);
  ref.encoder_length.resize(kc);
  ref.parent.resize(kc);
  for (const auto& b : batches) {
    const auto first = static_cast<std::int64_t>(ref.text.size());
    for (auto t : b.text_tokens) ref.text.push_back(t);
    ref.sample_offsets.push_back(static_cast<std::int64_t>(ref.text.size()));
    ref.subs.resize(ref.text.size());
    for (const auto& s : b.sub_items) {
      const auto m = static_cast<std::size_t>(s.modality);
      const auto id = static_cast<std::int64_t>(ref.parent[m].size());
      ref.parent[m].push_back(first + s.parent);
      ref.input_rows[m].push_back(s.input_rows);
      ref.llm_tokens[m].push_back(s.llm_tokens);
      ref.encoder_length[m].push_back(s.encoder_length);
      ref.subs[static_cast<std::size_t>(first + s.parent)].emplace_back(s.modality, id);
    }
    for (std::size_t m = 0; m < kc; ++m)
      ref.mod_offsets[m].push_back(static_cast<std::int64_t>(ref.parent[m].size()));
  }
  return ref;
}

bool same_metadata(const step_metadata& a, const step_metadata& b) {
  if (a.ranks != b.ranks || a.sample_offsets != b.sample_offsets ||
      a.text_tokens != b.text_tokens || a.sample_sub_offsets != b.sample_sub_offsets ||
      a.sample_sub_items != b.sample_sub_items || a.modalities.size() != b.modalities.size())
    return false;
  for (std::size_t k = 0; k < a.modalities.size(); ++k) {
    const auto& x = a.modalities[k];
    const auto& y = b.modalities[k];
    if (x.offsets != y.offsets || x.parent != y.parent || x.encoder_length != y.encoder_length ||
        x.input_rows != y.input_rows || x.llm_tokens != y.llm_tokens)
      return false;
  }
  return true;
}

// The metadata must describe the raw batches exactly as the reference does.
bool matches_reference(const step_metadata& m, const reference& ref) {
  if (m.ranks != ref.d || m.sample_offsets != ref.sample_offsets || m.text_tokens != ref.text ||
      static_cast<int>(m.modalities.size()) != ref.k_count)
    return false;
  for (std::size_t k = 0; k < m.modalities.size(); ++k) {
    const auto& x = m.modalities[k];
    if (x.offsets != ref.mod_offsets[k] || x.parent != ref.parent[k] ||
        x.encoder_length != ref.encoder_length[k] || x.input_rows != ref.input_rows[k] ||
        x.llm_tokens != ref.llm_tokens[k])
      return false;
  }
  for (std::int64_t g = 0; g < m.num_samples(); ++g) {
    const auto b = m.sample_sub_offsets[static_cast<std::size_t>(g)];
    const auto e = m.sample_sub_offsets[static_cast<std::size_t>(g) + 1];
    const auto& want = ref.subs[static_cast<std::size_t>(g)];
    if (e - b != static_cast<std::int64_t>(want.size())) return false;
    for (auto i = b; i < e; ++i)
      if (m.sample_sub_items[static_cast<std::size_t>(i)] != want[static_cast<std::size_t>(i - b)])
        return false;
    if (m.sequence_length(g) != ref.sequence_length(g)) return false;
  }
  return true;
}

// For LLM rank r: its samples in slot order (the LLM plan is trusted for *where* samples go —
// its balance is checked separately — but everything else is derived from the reference).
vec llm_samples(const step_plan& plan, rank_t r) {
  vec out;
  const auto off = plan.llm.dst_offsets();
  for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h)
    out.push_back(plan.llm.source_of(h));
  return out;
}

// Modality-k sub-items an LLM rank receives, in the documented order: per LLM slot, that
// sample's modality-k sub-items in original order.
vec expected_llm_items(const reference& ref, const vec& samples, std::int32_t k) {
  vec ids;
  for (auto g : samples)
    for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(g)])
      if (m == k) ids.push_back(id);
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Payloads whose bytes say what they are: row j of item `id` starts with the words
// (tag·100 + modality, id, j), then filler bytes derived from the same three values.

constexpr std::int64_t tag_input = 1, tag_output = 2, tag_gradient = 3, tag_text = 4;

struct item_ref {
  std::int64_t head;  // tag·100 + modality
  std::int64_t id;
  std::int64_t rows;
};

ragged_payload build_payload(const std::vector<item_ref>& items, std::int64_t width) {
  ragged_payload p;
  p.row_bytes = width;
  for (const auto& it : items) {
    p.rows.push_back(it.rows);
    for (std::int64_t j = 0; j < it.rows; ++j) {
      const std::int64_t words[3] = {it.head, it.id, j};
      const auto at = p.data.size();
      p.data.resize(at + static_cast<std::size_t>(width));
      std::memcpy(p.data.data() + at, words, sizeof words);
      for (std::int64_t b = static_cast<std::int64_t>(sizeof words); b < width; ++b)
        p.data[at + static_cast<std::size_t>(b)] =
            orchmllm::test::content_byte(it.head, it.id, j * width + b);
    }
  }
  return p;
}

// Encoder payload of modality k for items `ids` (row counts from `rows_of`).
ragged_payload modality_payload(std::int64_t tag, std::int32_t k, const vec& ids,
                                const vec& rows_of, std::int64_t width) {
  std::vector<item_ref> items;
  for (auto id : ids)
    items.push_back({tag * 100 + k, id, rows_of[static_cast<std::size_t>(id)]});
  return build_payload(items, width);
}

std::string compare(const char* what, rank_t r, std::int32_t k, const ragged_payload& got,
                    const ragged_payload& want) {
  if (got.row_bytes == want.row_bytes && got.rows == want.rows && got.data == want.data) return {};
  std::ostringstream s;
  s << what << " on rank " << r << " (modality " << k << "): got " << got.rows.size()
    << " items / " << got.data.size() << " bytes, expected " << want.rows.size() << " items / "
    << want.data.size() << " bytes";
  if (got.rows != want.rows) s << " (row counts differ)";
  return s.str();
}

// Slot-ordered items of a plan's destination rank r (source global ids).
vec received_ids(const rearrangement& p, rank_t r) {
  vec ids;
  const auto off = p.dst_offsets();
  for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h)
    ids.push_back(p.source_of(h));
  return ids;
}

vec range(std::int64_t b, std::int64_t e) {
  vec v;
  for (auto i = b; i < e; ++i) v.push_back(i);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Invariant checks of one plan (main thread).

// A trainer's balancer for stage declarations: lpt's plan, then the heaviest item of the
// fullest rank moved to rank 0 when that keeps the makespan (a toy "prefer rank 0" tweak).
struct prefer_rank_zero {
  template <class C>
  orchmllm::balancer_plan operator()(const orchmllm::balance_problem<C>& p) const {
    auto plan = orchmllm::balancers::lpt{}(p);
    plan.used = "custom";
    if (!plan.destination || p.num_items() == 0) return plan;
    auto moved = *plan.destination;
    moved[static_cast<std::size_t>(p.order().front())] = 0;
    if (p.satisfies(moved) && p.makespan(moved) <= p.makespan(*plan.destination))
      plan.destination = std::move(moved);
    return plan;
  }
};


template <class Stage>
void check_report(const Stage& st, const batch_layout& layout, const rearrangement& planned,
                  const orchmllm::stage_report& rep, const topology& topo) {
  const rank_t d = topo.num_ranks();
  CHECK(rep.name == st.name);
  // Rerun the balancer and the mapping: same choice, same plan (determinism). A locality
  // balancer without a node map gets the topology's.
  orchmllm::any_balancer builtin;
  if (st.balancer.builtin()) builtin = *st.balancer.builtin();
  if (auto* loc = builtin.get_if<balancers::locality>(); loc && loc->node_of_rank.empty())
    loc->node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
  REQUIRE(st.mapper.builtin() != nullptr);
  // The stage is balanced in its model's own value type: exact std::int64_t for integral
  // models, double otherwise.
  const auto bytes = layout.item_bytes();
  st.cost.visit([&](const auto& cost) {
    using value = decltype(cost(0));
    CHECK(std::is_integral_v<value> == st.cost.integral());
    // A stage with the application's balancer: the same balancer, directly (it must not see
    // a difference between the stage's erased model and the model itself).
    const auto balanced =
        st.balancer.custom()
            ? orchmllm::balance(layout, cost, st.policy, prefer_rank_zero{}, st.limits)
            : orchmllm::balance(layout, cost, st.policy, builtin, st.limits);
    CHECK(rep.used == balanced.used);
    const auto mapped = orchmllm::map_bins(balanced.plan, bytes, topo, *st.mapper.builtin());
    CHECK(mapped.plan == planned);
    CHECK(rep.makespan_after == static_cast<double>(balanced.makespan));
    CHECK(rep.lower_bound == static_cast<double>(balanced.lower_bound));
  });

  // Loads, tokens and bytes by brute force.
  std::vector<rank_t> origin(static_cast<std::size_t>(layout.num_items()));
  for (rank_t r = 0; r < d; ++r)
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g)
      origin[static_cast<std::size_t>(g)] = r;
  const auto before = orchmllm::test::figures(layout, origin, d, st.cost, st.policy);
  const auto after = orchmllm::test::figures(layout, planned.dst_ranks(), d, st.cost, st.policy);
  auto max_of = [](const auto& v) { return *std::max_element(v.begin(), v.end()); };
  auto imbalance = [](const std::vector<double>& v) {
    double t = 0;
    for (auto x : v) t += x;
    const double mean = t / static_cast<double>(v.size());
    return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
  };
  CHECK(rep.makespan_before == max_of(before.load));
  CHECK(rep.makespan_after == max_of(after.load));
  CHECK(rep.imbalance_before == doctest::Approx(imbalance(before.load)).epsilon(1e-12));
  CHECK(rep.imbalance_after == doctest::Approx(imbalance(after.load)).epsilon(1e-12));
  CHECK(rep.max_tokens_before == max_of(before.tokens));
  CHECK(rep.max_tokens_after == max_of(after.tokens));
  CHECK(rep.max_bytes_before == max_of(before.bytes));
  CHECK(rep.max_bytes_after == max_of(after.bytes));
  // Guaranteed: no plan beats the lower bound (a few ulps of slack for floating sums), and the
  // baseline balancer leaves the makespan unchanged (the mapping only permutes whole bins).
  CHECK(rep.makespan_after >= rep.lower_bound * (1 - 1e-12));
  if (st.balancer.builtin() && st.balancer.builtin()->template get_if<balancers::identity>())
    CHECK(rep.makespan_after == rep.makespan_before);
  // Moved and inter-node bytes from the plan itself.
  std::int64_t moved = 0, inter = 0;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    const auto from = origin[static_cast<std::size_t>(g)];
    const auto to = planned.destination_of(g).rank;
    if (from != to) moved += layout.bytes(g);
    if (!topo.same_node(from, to)) inter += layout.bytes(g);
  }
  CHECK(rep.moved_bytes == moved);
  CHECK(rep.inter_node_bytes == inter);
}

void check_plan(const stage_declarations& decl, const std::vector<local_batch>& batches,
                const topology& topo, const reference& ref) {
  const rank_t d = topo.num_ranks();
  const auto meta = orchmllm::make_step_metadata(batches, decl.num_encoders());
  REQUIRE(matches_reference(meta, ref));
  const auto plan = orchmllm::plan_step(decl, meta, topo);
  const auto kc = static_cast<std::size_t>(decl.num_encoders());
  REQUIRE(plan.encoders.size() == kc);
  REQUIRE(plan.stages.size() == kc + 1);
  CHECK(plan.alltoalls_per_step() == 3 * static_cast<int>(kc) + 1);
  CHECK(plan.plan_seconds >= 0);

  // Π_M over samples.
  CHECK_NOTHROW(plan.llm.validate());
  CHECK(std::ranges::equal(plan.llm.src_offsets(), ref.sample_offsets));
  CHECK(plan.llm.num_dst_ranks() == d);
  CHECK(std::ranges::equal(plan.llm_layout.offsets(), ref.sample_offsets));
  for (std::int64_t g = 0; g < meta.num_samples(); ++g) {
    CHECK(plan.llm_layout.length(g) == ref.sequence_length(g));
    std::int64_t b = ref.text[static_cast<std::size_t>(g)] * decl.llm.text_row_bytes;
    for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(g)])
      b += ref.llm_tokens[static_cast<std::size_t>(m)][static_cast<std::size_t>(id)] *
           decl.encoders[static_cast<std::size_t>(m)].output_row_bytes;
    CHECK(plan.llm_layout.bytes(g) == b);
  }
  // LLM slot order: increasing origin sample id on every rank.
  for (rank_t r = 0; r < d; ++r) {
    const auto s = llm_samples(plan, r);
    CHECK(std::is_sorted(s.begin(), s.end()));
  }
  check_report(decl.llm, plan.llm_layout, plan.llm, plan.stages[kc], topo);

  for (std::size_t k = 0; k < kc; ++k) {
    const auto& er = plan.encoders[k];
    const auto& st = decl.encoders[k];
    INFO("modality ", k);
    // Π_E_k over the stage's layout.
    CHECK(std::ranges::equal(er.layout.offsets(), ref.mod_offsets[k]));
    CHECK(std::ranges::equal(er.layout.lengths(), ref.encoder_length[k]));
    CHECK(std::ranges::equal(er.layout.parents(), ref.parent[k]));
    for (std::int64_t i = 0; i < er.layout.num_items(); ++i)
      CHECK(er.layout.bytes(i) == ref.input_rows[k][static_cast<std::size_t>(i)] * st.input_row_bytes);
    for (const auto* p : {&er.input, &er.lifted, &er.output, &er.gradient}) {
      CHECK_NOTHROW(p->validate());
      CHECK(p->num_src_ranks() == d);
      CHECK(p->num_dst_ranks() == d);
    }
    CHECK(std::ranges::equal(er.input.src_offsets(), ref.mod_offsets[k]));
    CHECK(std::ranges::equal(er.lifted.src_offsets(), ref.mod_offsets[k]));
    CHECK(std::ranges::equal(er.output.src_offsets(), er.input.dst_offsets()));
    CHECK(std::ranges::equal(er.output.dst_offsets(), er.lifted.dst_offsets()));
    // The algebra.
    CHECK(orchmllm::compose(er.output, er.input) == er.lifted);
    CHECK(orchmllm::compose(er.lifted, er.input.inverse()) == er.output);
    CHECK(er.gradient == er.output.inverse());
    CHECK(orchmllm::compose(er.gradient, er.output) ==
          rearrangement::identity(er.input.dst_offsets()));
    // Lifted: a sub-item goes to its parent's LLM rank, in (parent's LLM slot, original order).
    for (std::int64_t i = 0; i < er.layout.num_items(); ++i)
      CHECK(er.lifted.destination_of(i).rank ==
            plan.llm.destination_of(ref.parent[k][static_cast<std::size_t>(i)]).rank);
    for (rank_t r = 0; r < d; ++r)
      CHECK(received_ids(er.lifted, r) ==
            expected_llm_items(ref, llm_samples(plan, r), static_cast<std::int32_t>(k)));
    check_report(st, er.layout, er.input, plan.stages[k], topo);
  }

  // llm_view against the reference.
  for (rank_t r = 0; r < d; ++r) {
    const auto v = plan.llm_view(meta, r);
    const auto samples = llm_samples(plan, r);
    CHECK(v.samples == samples);
    REQUIRE(v.item_offsets.size() == kc);
    REQUIRE(v.row_offsets.size() == kc);
    REQUIRE(v.sub_item_offsets.size() == samples.size() + 1);
    std::vector<vec> received(kc);  // per modality: ids in payload order
    for (std::size_t k = 0; k < kc; ++k)
      received[k] = expected_llm_items(ref, samples, static_cast<std::int32_t>(k));
    for (std::size_t k = 0; k < kc; ++k) {
      vec items{0}, rows{0};
      for (auto g : samples) {
        std::int64_t c = 0;
        for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(g)])
          if (static_cast<std::size_t>(m) == k) {
            ++c;
            rows.push_back(rows.back() + ref.llm_tokens[k][static_cast<std::size_t>(id)]);
          }
        items.push_back(items.back() + c);
      }
      CHECK(v.item_offsets[k] == items);
      CHECK(v.row_offsets[k] == rows);
    }
    for (std::size_t s = 0; s < samples.size(); ++s) {
      const auto& want = ref.subs[static_cast<std::size_t>(samples[s])];
      const auto b = v.sub_item_offsets[s];
      REQUIRE(v.sub_item_offsets[s + 1] - b == static_cast<std::int64_t>(want.size()));
      for (std::size_t j = 0; j < want.size(); ++j) {
        const auto& [m, idx] = v.sub_items[static_cast<std::size_t>(b) + j];
        CHECK(m == want[j].first);
        // The index points at this very sub-item in modality m's payload.
        CHECK(received[static_cast<std::size_t>(m)][static_cast<std::size_t>(idx)] == want[j].second);
      }
    }
  }
  CHECK_THROWS_AS((void)plan.llm_view(meta, -1), invalid_argument_error);
  CHECK_THROWS_AS((void)plan.llm_view(meta, d), invalid_argument_error);

  // Determinism: planning again gives the same plans.
  const auto again = orchmllm::plan_step(decl, meta, topo);
  CHECK(again.llm == plan.llm);
  for (std::size_t k = 0; k < kc; ++k) {
    CHECK(again.encoders[k].input == plan.encoders[k].input);
    CHECK(again.encoders[k].output == plan.encoders[k].output);
  }
}

}  // namespace

TEST_CASE("plan_step: invariants on random multimodal steps") {
  std::mt19937_64 rng(20260501);
  int with_items = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const int k_count = static_cast<int>(trial % 4);
    const auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto topo = random_topology(rng, d);
    const auto ref = make_reference(batches, k_count);
    for (int k = 0; k < k_count; ++k)
      with_items += ref.parent[static_cast<std::size_t>(k)].empty() ? 0 : 1;
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count);
    check_plan(decl, batches, topo, ref);
  }
  CHECK(with_items > 300);  // the generator really produces sub-items
}

TEST_CASE("plan_step: stages declared with balancer objects") {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 40; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 12));
    const int k_count = 1 + static_cast<int>(trial % 2);
    auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto topo = random_topology(rng, d);
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    INFO("trial ", trial, ", d = ", d);
    // A built-in object plans exactly like a parsed any_balancer with the same knobs.
    auto typed = decl;
    typed.llm.balancer = balancers::lpt{.refine = true};
    auto parsed = decl;
    auto lpt = orchmllm::parse_balancer("lpt");
    lpt.get_if<balancers::lpt>()->refine = true;
    parsed.llm.balancer = lpt;
    CHECK(orchmllm::fingerprint(typed) == orchmllm::fingerprint(parsed));
    const auto a = orchmllm::plan_step(typed, meta, topo);
    const auto b = orchmllm::plan_step(parsed, meta, topo);
    CHECK(a.llm == b.llm);
    CHECK(a.stages.back().used == b.stages.back().used);
    CHECK(a.stages.back().used == "lpt");
    // The application's balancer on an encoder stage: every invariant of check_plan holds.
    auto custom = decl;
    if (!custom.encoders[0].policy.is_padded()) {
      custom.encoders[0].balancer = orchmllm::stage_balancer(prefer_rank_zero{}, "prefer-rank-0");
      check_plan(custom, batches, topo, make_reference(batches, k_count));
      const auto c = orchmllm::plan_step(custom, meta, topo);
      CHECK(c.stages[0].used == "custom");
      CHECK(orchmllm::fingerprint(custom) != orchmllm::fingerprint(decl));
      auto renamed = custom;
      renamed.encoders[0].balancer = orchmllm::stage_balancer(prefer_rank_zero{}, "other");
      CHECK(orchmllm::fingerprint(renamed) != orchmllm::fingerprint(custom));
      CHECK_NOTHROW(custom.validate());
    }
  }
}

TEST_CASE("plan_step: a hand-checked step") {
  // 2 ranks, one node each. Rank 0: sample 0 (text 10) with two images, sample 1 (text 1, no
  // image). Rank 1: sample 2 (text 1) with one image. LLM cost = length, packed.
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision", .input_row_bytes = 8,
                                        .output_row_bytes = 8});
  decl.llm.text_row_bytes = 8;
  local_batch r0{.text_tokens = {10, 1},
                 .sub_items = {sub_item{.modality = 0, .parent = 0, .encoder_length = 9,
                                        .input_rows = 9, .llm_tokens = 2},
                               sub_item{.modality = 0, .parent = 0, .encoder_length = 8,
                                        .input_rows = 8, .llm_tokens = 2}}};
  local_batch r1{.text_tokens = {1},
                 .sub_items = {sub_item{.modality = 0, .parent = 0, .encoder_length = 1,
                                        .input_rows = 1, .llm_tokens = 20}}};
  const auto meta = orchmllm::make_step_metadata({r0, r1}, 1);
  const auto plan = orchmllm::plan_step(decl, meta, topology::uniform(2, 1));
  // LLM lengths 14, 1, 21: the best split is {14, 1} | {21}, which is where they already are.
  CHECK(plan.llm == rearrangement::identity(plan.llm_layout));
  CHECK(plan.stages[1].makespan_before == 21);
  CHECK(plan.stages[1].makespan_after == 21);
  CHECK(plan.stages[1].moved_bytes == 0);
  // Vision lengths 9, 8 | 1: balanced as {9} | {8, 1}; the mapping keeps the most bytes in
  // place (rank 0 keeps its 9; the 8 moves to rank 1, which holds the 1).
  const auto& e = plan.encoders[0];
  CHECK(e.input.destination_of(0) == orchmllm::placement{0, 0});
  CHECK(e.input.destination_of(1) == orchmllm::placement{1, 0});
  CHECK(e.input.destination_of(2) == orchmllm::placement{1, 1});
  CHECK(plan.stages[0].moved_bytes == 64);
  CHECK(plan.stages[0].inter_node_bytes == 64);
  CHECK(plan.stages[0].makespan_before == 17);
  CHECK(plan.stages[0].makespan_after == 9);
  CHECK(plan.stages[0].imbalance_before == doctest::Approx(17.0 / 9.0));
  CHECK(plan.stages[0].imbalance_after == 1.0);
  CHECK(plan.stages[0].max_tokens_before == 17);
  CHECK(plan.stages[0].max_tokens_after == 9);
  CHECK(plan.stages[0].max_bytes_before == 136);
  CHECK(plan.stages[0].max_bytes_after == 72);
  // Lifted: both images of sample 0 to rank 0 slots 0, 1; the image of sample 2 to rank 1.
  CHECK(e.lifted.destination_of(0) == orchmllm::placement{0, 0});
  CHECK(e.lifted.destination_of(1) == orchmllm::placement{0, 1});
  CHECK(e.lifted.destination_of(2) == orchmllm::placement{1, 0});
  // Output: from the encoder ranks (rank 0 slot 0 = item 0; rank 1 slot 0 = item 1, slot 1 =
  // item 2) to the LLM ranks.
  CHECK(e.output.destination_of(0) == orchmllm::placement{0, 0});
  CHECK(e.output.destination_of(1) == orchmllm::placement{0, 1});
  CHECK(e.output.destination_of(2) == orchmllm::placement{1, 0});
  const auto v0 = plan.llm_view(meta, 0);
  CHECK(v0.samples == vec{0, 1});
  CHECK(v0.item_offsets[0] == vec{0, 2, 2});
  CHECK(v0.row_offsets[0] == vec{0, 2, 4});
  CHECK(v0.sub_item_offsets == vec{0, 2, 2});
  using item = std::pair<std::int32_t, std::int64_t>;
  CHECK(v0.sub_items == std::vector<item>{{0, 0}, {0, 1}});
  const auto v1 = plan.llm_view(meta, 1);
  CHECK(v1.samples == vec{2});
  CHECK(v1.row_offsets[0] == vec{0, 20});
}

TEST_CASE("plan_step rejects inconsistent inputs") {
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision"});
  local_batch b{.text_tokens = {3},
                .sub_items = {sub_item{.modality = 0, .parent = 0, .encoder_length = 4,
                                       .input_rows = 1, .llm_tokens = 1}}};
  const auto meta = orchmllm::make_step_metadata({b, b}, 1);
  orchmllm::test::expect_invalid([&] { (void)orchmllm::plan_step(decl, meta, topology::uniform(3, 0)); },
                                 {"metadata of 2 ranks", "topology of 3"});
  const auto meta0 = orchmllm::make_step_metadata({local_batch{}, local_batch{}}, 0);
  orchmllm::test::expect_invalid([&] { (void)orchmllm::plan_step(decl, meta0, topology::uniform(2, 0)); },
                                 {"0 modalities", "1 encoder stages"});
  auto bad = decl;
  bad.llm.name = "vision";
  orchmllm::test::expect_invalid([&] { (void)orchmllm::plan_step(bad, meta, topology::uniform(2, 0)); },
                                 {"two stages are named 'vision'"});
  // Capacities: an encoder cap below the largest item names the encoder stage; an LLM cap
  // below the longest sequence names the LLM stage.
  auto capped = decl;
  capped.encoders[0].limits.cap = capacity{capacity::measure::tokens, 3};
  orchmllm::test::expect_error<infeasible_error>(
      [&] { (void)orchmllm::plan_step(capped, meta, topology::uniform(2, 0)); },
      {"stage 'vision'", "cap of 3"});
  capped = decl;
  capped.llm.limits.cap = capacity{capacity::measure::tokens, 3};
  orchmllm::test::expect_error<infeasible_error>(
      [&] { (void)orchmllm::plan_step(capped, meta, topology::uniform(2, 0)); },
      {"stage 'llm'", "cap of 3"});
  // Item-count limits are capacities too.
  capped = decl;
  capped.llm.limits.max_items = 0;
  orchmllm::test::expect_error<infeasible_error>(
      [&] { (void)orchmllm::plan_step(capped, meta, topology::uniform(2, 0)); }, {"stage 'llm'"});
  // Several stages infeasible at once: the LLM's error, planned in parallel or not; then the
  // first encoder's by index.
  auto two = decl;
  two.encoders.push_back(encoder_stage{.name = "audio"});
  local_batch b2 = b;
  b2.sub_items.push_back(sub_item{.modality = 1, .parent = 0, .encoder_length = 9,
                                  .input_rows = 1, .llm_tokens = 1});
  const auto meta2 = orchmllm::make_step_metadata({b2, b2}, 2);
  for (const auto& mode :
       {std::pair{true, -1}, std::pair{false, -1}, std::pair{true, 1}, std::pair{false, 1}}) {
    const bool parallel = mode.first;
    const int routes_for = mode.second;
    CAPTURE(parallel);
    CAPTURE(routes_for);
    orchmllm::plan_options po;
    po.parallel_stages = parallel;
    po.routes_for = routes_for;
    // Only the LLM fails: the encoders, planned and waiting for Π_M, stop without it.
    auto llm_only = two;
    llm_only.llm.limits.cap = capacity{capacity::measure::tokens, 3};
    orchmllm::test::expect_error<infeasible_error>(
        [&] { (void)orchmllm::plan_step(llm_only, meta2, topology::uniform(2, 0), po); },
        {"stage 'llm'"});
    auto all = two;
    for (auto& e : all.encoders) e.limits.cap = capacity{capacity::measure::tokens, 3};
    all.llm.limits.cap = capacity{capacity::measure::tokens, 3};
    orchmllm::test::expect_error<infeasible_error>(
        [&] { (void)orchmllm::plan_step(all, meta2, topology::uniform(2, 0), po); },
        {"stage 'llm'"});
    all.llm.limits.cap.reset();
    orchmllm::test::expect_error<infeasible_error>(
        [&] { (void)orchmllm::plan_step(all, meta2, topology::uniform(2, 0), po); },
        {"stage 'vision'"});
  }
}

TEST_CASE("plan_step: byte and token sizes past 2^63 are errors, not wrapped sizes") {
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision", .input_row_bytes = 1 << 20,
                                        .output_row_bytes = 8});
  decl.llm.text_row_bytes = 8;
  constexpr std::int64_t big = std::int64_t{1} << 60;
  local_batch fine{.text_tokens = {3},
                   .sub_items = {sub_item{.modality = 0, .parent = 0, .encoder_length = 4,
                                          .input_rows = 1, .llm_tokens = 1}}};
  // Text bytes: 2^60 tokens × 8 bytes wraps to 0 unchecked.
  local_batch text = fine;
  text.text_tokens[0] = big;
  orchmllm::test::expect_invalid(
      [&] {
        (void)orchmllm::plan_step(decl, orchmllm::make_step_metadata({text, fine}, 1),
                                  topology::uniform(2, 0));
      },
      {"text bytes of sample 0", "exceeds 2^63 - 1"});
  // Encoder input bytes: rows × row width.
  local_batch rows = fine;
  rows.sub_items[0].input_rows = big;
  orchmllm::test::expect_invalid(
      [&] {
        (void)orchmllm::plan_step(decl, orchmllm::make_step_metadata({fine, rows}, 1),
                                  topology::uniform(2, 0));
      },
      {"stage 'vision': input bytes of item 1"});
  // Sequence length: text + the LLM tokens of the sub-items.
  local_batch seq = fine;
  seq.text_tokens[0] = INT64_MAX;
  decl.llm.text_row_bytes = 0;
  orchmllm::test::expect_invalid(
      [&] {
        (void)orchmllm::plan_step(decl, orchmllm::make_step_metadata({seq, fine}, 1),
                                  topology::uniform(2, 0));
      },
      {"sequence length of sample 0"});
}

TEST_CASE("plan_step: a step with 10^5 sub-items per modality, parallel as serial") {
  // Large enough that the composition writes its samples on two threads and the mappings
  // compute their worst-node bounds beside the solver.
  std::mt19937_64 rng(8080);
  const rank_t d = 64;
  std::vector<local_batch> batches(static_cast<std::size_t>(d));
  for (auto& b : batches) {
    for (std::int64_t i = 0; i < 1200; ++i) {
      b.text_tokens.push_back(uniform(rng, 1, 400));
      for (std::int64_t s = uniform(rng, 1, 3); s > 0; --s)
        b.sub_items.push_back(sub_item{.modality = static_cast<std::int32_t>(uniform(rng, 0, 1)),
                                       .parent = i,
                                       .encoder_length = uniform(rng, 1, 900),
                                       .input_rows = uniform(rng, 1, 9),
                                       .llm_tokens = uniform(rng, 1, 60)});
    }
  }
  const auto meta = orchmllm::make_step_metadata(batches, 2);
  REQUIRE(meta.modalities[0].parent.size() >= (std::size_t{1} << 16));
  REQUIRE(meta.modalities[1].parent.size() >= (std::size_t{1} << 16));
  stage_declarations decl;
  decl.encoders.resize(2);
  decl.encoders[0].name = "vision";
  decl.encoders[1].name = "audio";
  decl.encoders[1].policy = orchmllm::padded;
  decl.llm.mapper = mappers::auction{};
  const auto topo = topology::uniform(d, 8);
  orchmllm::plan_options serial, parallel;
  serial.parallel_stages = false;
  const auto a = orchmllm::plan_step(decl, meta, topo, parallel);
  const auto b = orchmllm::plan_step(decl, meta, topo, serial);
  CHECK(a.llm == b.llm);
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(a.encoders[k].input == b.encoders[k].input);
    CHECK(a.encoders[k].lifted == b.encoders[k].lifted);
    CHECK(a.encoders[k].output == b.encoders[k].output);
    CHECK(a.encoders[k].gradient == b.encoders[k].gradient);
  }
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(a.stages[k].makespan_after == b.stages[k].makespan_after);
    CHECK(a.stages[k].moved_bytes == b.stages[k].moved_bytes);
    CHECK(a.stages[k].inter_node_bytes == b.stages[k].inter_node_bytes);
  }
  // And the composition is the one its definition gives: the gradient undoes the output.
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(a.encoders[k].gradient == a.encoders[k].output.inverse());
    a.encoders[k].lifted.validate();
  }
}

TEST_CASE("plan_step: stages and routes planned in parallel give the serial ones") {
  std::mt19937_64 rng(777);
  for (int trial = 0; trial < 60; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const int k_count = 1 + static_cast<int>(trial % 3);
    const auto decl = random_decl(rng, k_count);
    const auto meta = orchmllm::make_step_metadata(random_batches(rng, d, k_count), k_count);
    const auto topo = random_topology(rng, d);
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count);
    // Routes too: built on threads by default, one after another when serial.
    const auto me = static_cast<rank_t>(uniform(rng, 0, d - 1));
    orchmllm::plan_options serial, parallel;
    serial.parallel_stages = false;
    serial.routes_for = parallel.routes_for = me;
    const auto a = orchmllm::plan_step(decl, meta, topo, parallel);
    const auto b = orchmllm::plan_step(decl, meta, topo, serial);
    REQUIRE(a.routes.all.size() == b.routes.all.size());
    CHECK(a.routes.all.size() == 3 * a.encoders.size() + 1);
    for (std::size_t i = 0; i < a.routes.all.size(); ++i) {
      const auto& x = a.routes.all[i];
      const auto& y = b.routes.all[i];
      CHECK(x.fingerprint() == y.fingerprint());
      CHECK(x.used() == y.used());
      CHECK(x.sent() == y.sent());
      CHECK(x.input_bytes() == y.input_bytes());
      CHECK(x.output_bytes() == y.output_bytes());
      REQUIRE(x.hops().size() == y.hops().size());
      for (std::size_t h = 0; h < x.hops().size(); ++h) {
        CHECK(x.hops()[h].send_counts == y.hops()[h].send_counts);
        CHECK(x.hops()[h].recv_counts == y.hops()[h].recv_counts);
      }
    }
    CHECK(a.llm == b.llm);
    REQUIRE(a.encoders.size() == b.encoders.size());
    for (std::size_t k = 0; k < a.encoders.size(); ++k) {
      CHECK(a.encoders[k].input == b.encoders[k].input);
      CHECK(a.encoders[k].output == b.encoders[k].output);
      CHECK(a.encoders[k].gradient == b.encoders[k].gradient);
    }
    REQUIRE(a.stages.size() == b.stages.size());
    for (std::size_t k = 0; k < a.stages.size(); ++k) {
      CHECK(a.stages[k].name == b.stages[k].name);
      CHECK(a.stages[k].makespan_after == b.stages[k].makespan_after);
      CHECK(a.stages[k].moved_bytes == b.stages[k].moved_bytes);
      CHECK(a.stages[k].max_bytes_after == b.stages[k].max_bytes_after);
    }
    // The reports (computed from the balanced plans, beside the mappings) are the mapped
    // plans' own figures.
    const auto llm_stats =
        orchmllm::compute_statistics(a.llm_layout, a.llm, decl.llm.cost, decl.llm.policy);
    CHECK(a.stages.back().makespan_after == static_cast<double>(llm_stats.makespan));
    CHECK(a.stages.back().max_tokens_after == llm_stats.max_tokens);
    CHECK(a.stages.back().max_bytes_after == llm_stats.max_bytes);
    for (std::size_t k = 0; k < a.encoders.size(); ++k) {
      const auto& er = a.encoders[k];
      const auto st = orchmllm::compute_statistics(er.units(), er.input, decl.encoders[k].cost,
                                                   decl.encoders[k].policy);
      CHECK(a.stages[k].makespan_after == static_cast<double>(st.makespan));
      CHECK(a.stages[k].max_tokens_after == st.max_tokens);
      CHECK(a.stages[k].max_bytes_after == st.max_bytes);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// End to end on the local backend.

namespace {

struct rank_outcome {
  std::vector<std::string> failures;
  step_metadata meta;
  std::uint64_t plan_print = 0;
};

std::uint64_t plan_fingerprint(const step_plan& p) {
  std::uint64_t h = orchmllm::fingerprint(p.llm);
  for (const auto& e : p.encoders)
    h = h * 31 + orchmllm::fingerprint(e.input) * 7 + orchmllm::fingerprint(e.output);
  return h;
}

// Rank r's text payload (its samples in origin order) and what it must receive along Π_M (the
// samples of its LLM slots, in slot order), rows of width w.
std::pair<ragged_payload, ragged_payload> text_payloads(const reference& ref, rank_t r,
                                                        const vec& samples, std::int64_t w) {
  std::vector<item_ref> mine, want;
  for (auto g : range(ref.sample_offsets[static_cast<std::size_t>(r)],
                      ref.sample_offsets[static_cast<std::size_t>(r) + 1]))
    mine.push_back({tag_text * 100, g, ref.text[static_cast<std::size_t>(g)]});
  for (auto g : samples) want.push_back({tag_text * 100, g, ref.text[static_cast<std::size_t>(g)]});
  return {build_payload(mine, w), build_payload(want, w)};
}

// One rank's step: every route as the orchestrator.hpp file comment shows it, each payload
// checked against the reference.
void run_step(orchmllm::local::communicator& comm, const stage_declarations& decl,
              const std::vector<local_batch>& batches, const reference& ref, const topology& topo,
              rank_outcome& out) {
  const rank_t r = comm.rank();
  auto fail = [&](std::string s) {
    if (!s.empty()) out.failures.push_back(std::move(s));
  };
  out.meta = orchmllm::gather_step_metadata(comm, decl, batches[static_cast<std::size_t>(r)]);
  const auto plan = orchmllm::plan_step(decl, out.meta, topo);
  out.plan_print = plan_fingerprint(plan);
  const auto view = plan.llm_view(out.meta, r);
  const auto samples = llm_samples(plan, r);
  if (view.samples != samples) fail("llm_view samples differ from the plan's slots");

  // Text: origin → Π_M, arriving in LLM slot order.
  {
    const auto [mine, want] = text_payloads(ref, r, samples, decl.llm.text_row_bytes);
    fail(compare("text", r, -1, orchmllm::dispatch(comm, plan.llm, mine), want));
  }

  for (std::int32_t k = 0; k < decl.num_encoders(); ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto& er = plan.encoders[uk];
    const auto w_in = decl.encoders[uk].input_row_bytes;
    const auto w_out = decl.encoders[uk].output_row_bytes;
    const auto mine = range(ref.mod_offsets[uk][static_cast<std::size_t>(r)],
                            ref.mod_offsets[uk][static_cast<std::size_t>(r) + 1]);
    // Encoder inputs: origin → Π_E_k.
    const auto at_encoder = received_ids(er.input, r);
    const auto pixels = orchmllm::dispatch(
        comm, er.input, modality_payload(tag_input, k, mine, ref.input_rows[uk], w_in));
    fail(compare("encoder input", r, k,
                 pixels, modality_payload(tag_input, k, at_encoder, ref.input_rows[uk], w_in)));
    // "Encoder forward": one output row per LLM token of every item this rank encoded.
    const auto enc_out = modality_payload(tag_output, k, at_encoder, ref.llm_tokens[uk], w_out);
    // Composed route: Π_E_k → Π_M, in the documented order (reference, not the route).
    const auto llm_ids = expected_llm_items(ref, samples, k);
    const auto emb = orchmllm::dispatch(comm, er.output, enc_out);
    fail(compare("encoder output", r, k, emb,
                 modality_payload(tag_output, k, llm_ids, ref.llm_tokens[uk], w_out)));
    // The view's row offsets locate every item in the received payload.
    if (view.row_offsets[uk].size() != emb.rows.size() + 1) {
      fail("llm_view row offsets have the wrong size");
    } else {
      for (std::size_t i = 0; i < emb.rows.size(); ++i)
        if (view.row_offsets[uk][i + 1] - view.row_offsets[uk][i] != emb.rows[i])
          fail("llm_view row offsets disagree with the received rows");
    }
    // Assemble every sample's encoder rows through the view and compare with the reference:
    // the rows of its sub-items of modality k, in original order.
    for (std::size_t s = 0; s < samples.size(); ++s) {
      std::vector<std::byte> got, want;
      for (auto j = view.sub_item_offsets[s]; j < view.sub_item_offsets[s + 1]; ++j) {
        const auto& [m, idx] = view.sub_items[static_cast<std::size_t>(j)];
        if (m != k) continue;
        const auto b = view.row_offsets[uk][static_cast<std::size_t>(idx)] * w_out;
        const auto e = view.row_offsets[uk][static_cast<std::size_t>(idx) + 1] * w_out;
        got.insert(got.end(), emb.data.begin() + b, emb.data.begin() + e);
      }
      vec ids;
      for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(samples[s])])
        if (m == k) ids.push_back(id);
      want = modality_payload(tag_output, k, ids, ref.llm_tokens[uk], w_out).data;
      if (got != want) fail("sample assembled through llm_view differs (slot " + std::to_string(s) + ")");
    }
    // Naive two hops: back to the origin along Π_E_k, then along the lifted plan.
    const auto at_origin = orchmllm::combine(comm, er.input, enc_out);
    fail(compare("outputs combined to the origin", r, k, at_origin,
                 modality_payload(tag_output, k, mine, ref.llm_tokens[uk], w_out)));
    const auto two_hops = orchmllm::dispatch(comm, er.lifted, at_origin);
    fail(compare("two hops vs composed route", r, k, two_hops, emb));
    // Backward: gradients of the outputs go back to where the encoder ran.
    const auto grads = orchmllm::dispatch(
        comm, er.gradient, modality_payload(tag_gradient, k, llm_ids, ref.llm_tokens[uk], w_out));
    fail(compare("gradient", r, k, grads,
                 modality_payload(tag_gradient, k, at_encoder, ref.llm_tokens[uk], w_out)));
    // And the embeddings themselves come back byte-identical.
    fail(compare("outputs sent back", r, k, orchmllm::dispatch(comm, er.gradient, emb), enc_out));
  }
}

}  // namespace

TEST_CASE("end to end on the local backend: every route delivers the documented bytes") {
  std::mt19937_64 rng(77001);
  int cases = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const auto d = static_cast<rank_t>(trial < 4 ? trial + 1 : uniform(rng, 1, 16));
    const int k_count = static_cast<int>(trial % 4);
    const auto rpn = static_cast<rank_t>(uniform(rng, 0, 5));
    const auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto ref = make_reference(batches, k_count);
    // The plan's topology: the group's own nodes, or (odd trials) another, uneven one — the
    // routes are correct for any topology; it only steers the mapping.
    const auto topo = trial % 2 == 0 ? topology::uniform(d, rpn) : random_topology(rng, d);
    std::vector<rank_outcome> outcomes(static_cast<std::size_t>(d));
    orchmllm::local::run(
        d,
        [&](orchmllm::local::communicator& comm) {
          run_step(comm, decl, batches, ref, topo, outcomes[static_cast<std::size_t>(comm.rank())]);
        },
        {.ranks_per_node = rpn, .timeout = 60s});
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count, ", ranks per node = ", rpn);
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    // The reference receive lists partition every modality's sub-items: each arrives exactly
    // once, on one rank.
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    for (std::int32_t k = 0; k < k_count; ++k) {
      vec all;
      for (rank_t r = 0; r < d; ++r) {
        const auto ids = expected_llm_items(ref, llm_samples(plan, r), k);
        all.insert(all.end(), ids.begin(), ids.end());
      }
      std::sort(all.begin(), all.end());
      CHECK(all == range(0, static_cast<std::int64_t>(ref.parent[static_cast<std::size_t>(k)].size())));
    }
    for (rank_t r = 0; r < d; ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      INFO("rank ", r, ": ", o.failures.empty() ? std::string("ok") : o.failures.front());
      CHECK(o.failures.empty());
      CHECK(same_metadata(o.meta, meta));
      CHECK(o.plan_print == plan_fingerprint(plan));
    }
    ++cases;
  }
  CHECK(cases == 48);
}

// ---------------------------------------------------------------------------------------------
// Prebuilt routes: the collective plan_step agrees once, then every transfer of the step is its
// hops' all-to-alls and nothing else, delivering what the plan dispatches deliver.

namespace {

struct routes_outcome {
  std::vector<std::string> failures;
  std::int64_t planning_calls = -1;  // collectives of the collective plan_step
  std::int64_t transfers = 0;
  std::uint64_t plan_print = 0;
};

void run_step_routes(orchmllm::local::communicator& comm, const stage_declarations& decl,
                     const std::vector<local_batch>& batches, const reference& ref,
                     const topology& topo, orchmllm::schedule sched, routes_outcome& out) {
  const rank_t r = comm.rank();
  auto fail = [&](std::string s) {
    if (!s.empty()) out.failures.push_back(std::move(s));
  };
  orchmllm::test::counting_communicator counted{comm};
  const auto meta =
      orchmllm::gather_step_metadata(counted, decl, batches[static_cast<std::size_t>(r)]);
  counted.reset();
  const auto step = orchmllm::plan_step(counted, decl, meta, topo, {.sched = sched});
  out.planning_calls = counted.total();
  out.plan_print = plan_fingerprint(step);
  const auto& routes = step.routes;
  if (routes.rank != r || routes.num_encoders() != decl.num_encoders())
    fail("the step's routes are not this rank's");
  // One transfer: only its hops' all-to-alls; the schedule asked for.
  auto move = [&](const orchmllm::route& rt, const ragged_payload& p) {
    counted.reset();
    auto moved = orchmllm::dispatch(counted, rt, p);
    ++out.transfers;
    if (counted.total() != static_cast<std::int64_t>(rt.hops().size()) ||
        counted.all_to_allvs != counted.total())
      fail("a transfer issued " + std::to_string(counted.total()) + " collectives for " +
           std::to_string(rt.hops().size()) + " hops");
    if (sched != orchmllm::schedule::automatic && rt.used() != sched)
      fail("a route does not use the schedule asked for");
    return moved;
  };
  const auto samples = llm_samples(step, r);
  {
    const auto [mine, want] = text_payloads(ref, r, samples, decl.llm.text_row_bytes);
    fail(compare("text", r, -1, move(routes.text(), mine), want));
  }
  for (std::int32_t k = 0; k < decl.num_encoders(); ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto w_in = decl.encoders[uk].input_row_bytes;
    const auto w_out = decl.encoders[uk].output_row_bytes;
    const auto mine = range(ref.mod_offsets[uk][static_cast<std::size_t>(r)],
                            ref.mod_offsets[uk][static_cast<std::size_t>(r) + 1]);
    const auto at_encoder = received_ids(step.encoders[uk].input, r);
    fail(compare("encoder input", r, k,
                 move(routes.encoder_input(k),
                      modality_payload(tag_input, k, mine, ref.input_rows[uk], w_in)),
                 modality_payload(tag_input, k, at_encoder, ref.input_rows[uk], w_in)));
    const auto llm_ids = expected_llm_items(ref, samples, k);
    fail(compare("encoder output", r, k,
                 move(routes.encoder_output(k),
                      modality_payload(tag_output, k, at_encoder, ref.llm_tokens[uk], w_out)),
                 modality_payload(tag_output, k, llm_ids, ref.llm_tokens[uk], w_out)));
    fail(compare("gradient", r, k,
                 move(routes.encoder_gradient(k),
                      modality_payload(tag_gradient, k, llm_ids, ref.llm_tokens[uk], w_out)),
                 modality_payload(tag_gradient, k, at_encoder, ref.llm_tokens[uk], w_out)));
  }
}

}  // namespace

TEST_CASE("prebuilt routes: one agreement per step, one all-to-all(v) per hop, the same bytes") {
  std::mt19937_64 rng(77003);
  for (int trial = 0; trial < 24; ++trial) {
    const auto d = static_cast<rank_t>(trial < 3 ? trial + 1 : uniform(rng, 1, 12));
    const int k_count = static_cast<int>(trial % 4);
    const auto rpn = static_cast<rank_t>(uniform(rng, 0, 4));
    const auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto ref = make_reference(batches, k_count);
    const auto topo = topology::uniform(d, rpn);
    const auto sched = static_cast<orchmllm::schedule>(trial % 3);
    std::vector<routes_outcome> outcomes(static_cast<std::size_t>(d));
    orchmllm::local::run(
        d,
        [&](orchmllm::local::communicator& comm) {
          run_step_routes(comm, decl, batches, ref, topo, sched,
                          outcomes[static_cast<std::size_t>(comm.rank())]);
        },
        {.ranks_per_node = rpn, .timeout = 60s});
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count, ", ranks per node = ", rpn,
         ", schedule ", std::string(to_string(sched)));
    // The plans are the pure plan_step's; its routes are route::build's for this rank.
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    CHECK(plan.routes.empty());
    const auto with_routes =
        orchmllm::plan_step(decl, meta, topo, {.routes_for = d - 1, .sched = sched});
    REQUIRE(with_routes.routes.all.size() == static_cast<std::size_t>(3 * k_count + 1));
    // The phase timers are laps of one clock inside plan_step's own time.
    const auto& w = with_routes;
    CHECK(w.layout_seconds >= 0);
    CHECK(w.stages_seconds >= 0);
    CHECK(w.compose_seconds >= 0);
    CHECK(w.routes_seconds >= 0);
    CHECK(w.layout_seconds + w.stages_seconds + w.compose_seconds + w.routes_seconds <=
          w.plan_seconds * (1 + 1e-9) + 1e-12);  // (rounding of four sums of nanoseconds)
    for (const auto& st : w.stages)
      CHECK((st.balance_seconds >= 0 && st.map_seconds >= 0 && st.report_seconds >= 0));
    CHECK(with_routes.routes.text().fingerprint() ==
          orchmllm::route::build(plan.llm,
                                 [&] {
                                   vec b;
                                   for (auto t : meta.text_tokens)
                                     b.push_back(t * decl.llm.text_row_bytes);
                                   return b;
                                 }(),
                                 topo, d - 1, sched)
              .fingerprint());
    for (rank_t r = 0; r < d; ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      INFO("rank ", r, ": ", o.failures.empty() ? std::string("ok") : o.failures.front());
      CHECK(o.failures.empty());
      CHECK(o.planning_calls == 1);
      CHECK(o.transfers == 3 * k_count + 1);
      CHECK(o.plan_print == plan_fingerprint(plan));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: the same error on every rank, never a hang.

namespace {

enum class kind { none, invalid, infeasible, communication, other };

struct caught {
  kind type = kind::none;
  std::string message;
  bool recovered = false;  // a valid gather afterwards worked
};

template <class F>
std::vector<caught> run_bad(rank_t d, F&& body, const stage_declarations& good_decl,
                            const std::vector<local_batch>& good) {
  std::vector<caught> out(static_cast<std::size_t>(d));
  orchmllm::local::run(
      d,
      [&](orchmllm::local::communicator& comm) {
        auto& c = out[static_cast<std::size_t>(comm.rank())];
        try {
          body(comm);
        } catch (const infeasible_error& e) {
          c = {kind::infeasible, e.what()};
        } catch (const invalid_argument_error& e) {
          c = {kind::invalid, e.what()};
        } catch (const communication_error& e) {
          c = {kind::communication, e.what()};
        } catch (const std::exception& e) {
          c = {kind::other, e.what()};
        }
        // The group is still usable: a valid step's gather works on every rank.
        try {
          const auto m = orchmllm::gather_step_metadata(
              comm, good_decl, good[static_cast<std::size_t>(comm.rank())]);
          c.recovered = m.ranks == d;
        } catch (...) {
          c.recovered = false;
        }
      },
      {.ranks_per_node = 2, .timeout = 30s});
  return out;
}

void expect_everywhere(const std::vector<caught>& got, kind type,
                       const std::vector<std::string>& needles) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    INFO("rank ", r, ": ", got[r].message);
    CHECK(got[r].type == type);
    CHECK(got[r].message == got[0].message);
    CHECK(got[r].recovered);
    for (const auto& n : needles) {
      INFO("expected to contain: ", n);
      CHECK(got[r].message.find(n) != std::string::npos);
    }
  }
}

}  // namespace

TEST_CASE("bad input: a clear error on every rank, no hang") {
  constexpr rank_t d = 5;
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision", .cost = quadratic_cost{0, 1, 0.01},
                                        .input_row_bytes = 24, .output_row_bytes = 32});
  decl.encoders.push_back(encoder_stage{.name = "audio", .policy = orchmllm::padded,
                                        .input_row_bytes = 16, .output_row_bytes = 32});
  decl.llm.text_row_bytes = 8;
  std::mt19937_64 rng(4242);
  auto good = random_batches(rng, d, 2);
  for (auto& b : good) {  // every rank has a sample and one sub-item of each modality
    b.text_tokens.push_back(5);
    const auto p = static_cast<std::int64_t>(b.text_tokens.size()) - 1;
    b.sub_items.push_back(sub_item{.modality = 0, .parent = p, .encoder_length = 50,
                                   .input_rows = 2, .llm_tokens = 3});
    b.sub_items.push_back(sub_item{.modality = 1, .parent = p, .encoder_length = 30,
                                   .input_rows = 2, .llm_tokens = 3});
  }

  auto gather_with = [&](const std::vector<local_batch>& batches) {
    return run_bad(
        d,
        [&](orchmllm::local::communicator& comm) {
          const auto m = orchmllm::gather_step_metadata(
              comm, decl, batches[static_cast<std::size_t>(comm.rank())]);
          (void)orchmllm::plan_step(decl, m, topology::uniform(d, 2));
        },
        decl, good);
  };

  SUBCASE("valid input plans everywhere") {
    expect_everywhere(gather_with(good), kind::none, {});
  }
  SUBCASE("a sub-item whose parent does not exist") {
    auto bad = good;
    bad[2].sub_items.back().parent = static_cast<std::int64_t>(bad[2].text_tokens.size());
    expect_everywhere(gather_with(bad), kind::invalid,
                      {"rank 2", "parent sample " + std::to_string(bad[2].text_tokens.size()),
                       "does not exist"});
  }
  SUBCASE("a sub-item on a rank without samples") {
    auto bad = good;
    bad[4].text_tokens.clear();
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 4", "does not exist"});
  }
  SUBCASE("a modality out of range") {
    auto bad = good;
    bad[3].sub_items.front().modality = 2;
    expect_everywhere(gather_with(bad), kind::invalid,
                      {"rank 3", "sub-item 0", "modality 2", "2 encoder stages"});
  }
  SUBCASE("negative counts") {
    auto bad = good;
    bad[1].text_tokens.back() = -3;
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 1", "-3 text tokens"});
    bad = good;
    bad[4].sub_items.back().input_rows = -1;
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 4", "negative"});
  }
  SUBCASE("declarations that differ across ranks") {
    // Rank 3 has another cost model for the vision encoder.
    auto other = decl;
    other.encoders[0].cost = quadratic_cost{0, 1, 0.02};
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            (void)orchmllm::gather_step_metadata(
                                comm, comm.rank() == 3 ? other : decl,
                                good[static_cast<std::size_t>(comm.rank())]);
                          },
                          decl, good),
                      kind::invalid, {"rank 3", "declared other stages"});
    // Rank 0 has another LLM row width: the first rank that differs from it is named.
    other = decl;
    other.llm.text_row_bytes = 16;
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            (void)orchmllm::gather_step_metadata(
                                comm, comm.rank() == 0 ? other : decl,
                                good[static_cast<std::size_t>(comm.rank())]);
                          },
                          decl, good),
                      kind::invalid, {"rank 1", "declared other stages"});
    // Rank 4 has one encoder fewer (its batch has no audio then).
    other = decl;
    other.encoders.pop_back();
    auto batches = good;
    std::erase_if(batches[4].sub_items, [](const sub_item& s) { return s.modality == 1; });
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            (void)orchmllm::gather_step_metadata(
                                comm, comm.rank() == 4 ? other : decl,
                                batches[static_cast<std::size_t>(comm.rank())]);
                          },
                          decl, good),
                      kind::invalid, {"rank 4", "declared other stages"});
  }
  SUBCASE("an infeasible capacity") {
    // A per-rank token cap below the largest vision item (length 50).
    auto capped = decl;
    capped.encoders[0].limits.cap = capacity{capacity::measure::tokens, 49};
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            const auto m = orchmllm::gather_step_metadata(
                                comm, capped, good[static_cast<std::size_t>(comm.rank())]);
                            (void)orchmllm::plan_step(capped, m, topology::uniform(d, 2));
                          },
                          decl, good),
                      kind::infeasible, {"stage 'vision'", "cap of 49"});
    // The LLM stage: a cap below the longest sequence.
    capped = decl;
    capped.llm.limits.cap = capacity{capacity::measure::tokens, 10};
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            const auto m = orchmllm::gather_step_metadata(
                                comm, capped, good[static_cast<std::size_t>(comm.rank())]);
                            (void)orchmllm::plan_step(capped, m, topology::uniform(d, 2));
                          },
                          decl, good),
                      kind::infeasible, {"stage 'llm'", "cap of 10"});
    // The collective plan_step: every rank raises the planning error itself.
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            const auto m = orchmllm::gather_step_metadata(
                                comm, capped, good[static_cast<std::size_t>(comm.rank())]);
                            (void)orchmllm::plan_step(comm, capped, m, topology::uniform(d, 2));
                          },
                          decl, good),
                      kind::infeasible, {"stage 'llm'", "cap of 10"});
  }
  SUBCASE("the collective plan_step: ranks that plan different steps fail together") {
    // Rank 3 asks for another schedule; rank 1 maps onto another topology.
    for (int which = 0; which < 2; ++which) {
      expect_everywhere(
          run_bad(
              d,
              [&](orchmllm::local::communicator& comm) {
                const auto m = orchmllm::gather_step_metadata(
                    comm, decl, good[static_cast<std::size_t>(comm.rank())]);
                auto sched = orchmllm::schedule::direct;
                auto topo = topology::uniform(d, 2);
                if (which == 0 && comm.rank() == 3) sched = orchmllm::schedule::node_wise;
                if (which == 1 && comm.rank() == 1) topo = topology::uniform(d, 1);
                (void)orchmllm::plan_step(comm, decl, m, topo, {.sched = sched});
              },
              decl, good),
          kind::communication, {"ranks planned different steps", "digest"});
    }
  }
}

TEST_CASE("gather_step_metadata: a topology that does not match the communicator fails everywhere") {
  const rank_t d = 4;
  std::mt19937_64 rng(5);
  const auto decl = random_decl(rng, 1);
  const auto batches = random_batches(rng, d, 1);
  // The communicator puts ranks {0,1} and {2,3} on two nodes (ranks_per_node = 2).
  auto run_with = [&](auto make_topology) {
    std::vector<std::string> errors(static_cast<std::size_t>(d));
    std::vector<int> ok(static_cast<std::size_t>(d), 0);
    orchmllm::local::run(
        d,
        [&](orchmllm::local::communicator& comm) {
          const auto r = static_cast<std::size_t>(comm.rank());
          try {
            const orchmllm::topology topo = make_topology(comm);
            const auto meta = orchmllm::gather_step_metadata(comm, decl, batches[r], topo);
            (void)orchmllm::plan_step(decl, meta, topo);
            ok[r] = 1;
          } catch (const orchmllm::invalid_argument_error& e) {
            errors[r] = e.what();
          }
          // The group is still usable.
          (void)orchmllm::gather_step_metadata(comm, decl, batches[r]);
        },
        {.ranks_per_node = 2, .timeout = 30s});
    return std::make_pair(ok, errors);
  };
  SUBCASE("gathered: accepted") {
    const auto [ok, errors] = run_with([](auto& comm) { return orchmllm::gather_topology(comm); });
    for (const int o : ok) CHECK(o == 1);
  }
  SUBCASE("another node split") {
    const auto [ok, errors] =
        run_with([](auto&) { return orchmllm::topology(std::vector<rank_t>{0, 0, 0, 1}); });
    for (const auto& e : errors) {
      CHECK(e == errors[0]);
      CHECK(e.find("rank 2 is on node 1 of the communicator but on node 0 of the topology") !=
            std::string::npos);
    }
  }
  SUBCASE("another size") {
    const auto [ok, errors] = run_with([](auto&) { return orchmllm::topology::uniform(8, 2); });
    for (const auto& e : errors)
      CHECK(e.find("the topology has 8 ranks but the communicator 4") != std::string::npos);
  }
  SUBCASE("ranks disagree") {
    const auto [ok, errors] = run_with([](auto& comm) {
      auto t = orchmllm::topology::uniform(4, 2);
      if (comm.rank() == 3) t.links.inter_bandwidth = 1e9;
      return t;
    });
    for (const auto& e : errors)
      CHECK(e.find("rank 3 passed another topology than rank 0") != std::string::npos);
  }
}


TEST_CASE("a trainer's topology model passes wherever a topology does, with the same results") {
  // Two hosts of two ranks each, named by sparse ids the way a launcher might number them.
  struct pairs_model {
    [[nodiscard]] rank_t num_ranks() const { return 4; }
    [[nodiscard]] std::int64_t node_of(rank_t r) const { return 1000 - 7 * (r / 2); }
  };
  const auto shipped = orchmllm::topology::uniform(4, 2);
  const rank_t d = 4;
  std::mt19937_64 rng(0x70b1);
  const auto decl = random_decl(rng, 2);
  const auto batches = random_batches(rng, d, 2);
  const auto meta = orchmllm::make_step_metadata(batches, 2);
  // The planner and the mappers.
  const auto a = orchmllm::plan_step(decl, meta, pairs_model{});
  const auto b = orchmllm::plan_step(decl, meta, shipped);
  CHECK(a.llm == b.llm);
  for (std::size_t k = 0; k < a.encoders.size(); ++k) {
    CHECK(a.encoders[k].input == b.encoders[k].input);
    CHECK(a.encoders[k].output == b.encoders[k].output);
    CHECK(a.stages[k].inter_node_bytes == b.stages[k].inter_node_bytes);
  }
  const auto bytes = a.llm_layout.item_bytes();
  const auto mapped = orchmllm::map_bins(a.llm, bytes, pairs_model{});
  CHECK(mapped.rank_of_bin == orchmllm::map_bins(a.llm, bytes, shipped).rank_of_bin);
  // The routes.
  for (rank_t r = 0; r < d; ++r) {
    const auto ra = orchmllm::route::build(a.llm, bytes, pairs_model{}, r);
    const auto rb = orchmllm::route::build(a.llm, bytes, shipped, r);
    CHECK(ra.used() == rb.used());
    CHECK(ra.input_bytes() == rb.input_bytes());
  }
  // The metadata gather checks the model against the communicator like a topology.
  std::vector<int> ok(static_cast<std::size_t>(d), 0);
  orchmllm::local::run(
      d,
      [&](orchmllm::local::communicator& comm) {
        const auto r = static_cast<std::size_t>(comm.rank());
        const auto m = orchmllm::gather_step_metadata(comm, decl, batches[r], pairs_model{});
        ok[r] = orchmllm::plan_step(decl, m, pairs_model{}).llm == b.llm ? 1 : 0;
      },
      {.ranks_per_node = 2, .timeout = 30s});
  for (const int o : ok) CHECK(o == 1);
}
