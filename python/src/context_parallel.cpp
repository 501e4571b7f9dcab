// Context parallelism from Python: `orchmllm.CpCost` (the library's `cp_cost`) and
// `orchmllm.context_parallel`, the library's `balance_context_parallel` called as `orchmllm-bench
// plan --cp-sizes` calls it, returning the shards and the chunks' Plan (whose all_to_all moves
// the token rows, as any plan's does).

#include "orchmllm/balance/context_parallel.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common.hpp"
#include "orchmllm/core/text_forms.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm_py {

using namespace nb::literals;

namespace {

// A plan of context parallelism and the chunks' Plan.
struct py_cp_plan {
  orchmllm::cp_result result;
  std::shared_ptr<py_plan> chunks;  // shared with the Python Plan object `chunks` returns
  std::vector<i64> chunk_end;
  double plan_seconds = 0;
};

std::unique_ptr<py_cp_plan> context_parallel(
    const i64_in& offsets, const i64_in& lengths, std::optional<i64_in> bytes,
    const orchmllm::cp_cost& cost, const std::vector<i64>& sizes, i64 gpus_per_node,
    std::optional<i64_in> node_of_rank, bool within_node, std::optional<i64> token_cap,
    i64 min_shard_tokens, i64 micro_batches, std::optional<i64> micro_batch_tokens, int targets) {
  ORCHMLLM_REQUIRE(gpus_per_node >= 0, orchmllm::invalid_argument_error, "gpus_per_node is ",
                   gpus_per_node, ", must be >= 0 (0: every rank on one node)");
  ORCHMLLM_REQUIRE(!(node_of_rank && gpus_per_node > 0), orchmllm::invalid_argument_error,
                   "give gpus_per_node or node_of_rank, not both");
  ORCHMLLM_REQUIRE(offsets.shape(0) != 1, orchmllm::invalid_argument_error,
                   "context_parallel needs at least one rank: offsets has 1 entry");
  auto out = std::make_unique<py_cp_plan>();
  {
    nb::gil_scoped_release unlocked;
    orchmllm::batch_layout layout(to_vector(offsets), to_vector(lengths),
                                  bytes ? to_vector(*bytes) : std::vector<i64>());
    const auto d = layout.num_ranks();
    const orchmllm::topology topo =
        node_of_rank ? orchmllm::topology(std::vector<orchmllm::rank_t>(
                           node_of_rank->data(), node_of_rank->data() + node_of_rank->shape(0)))
                     : orchmllm::topology::uniform(d, static_cast<orchmllm::rank_t>(gpus_per_node));
    orchmllm::cp_options o;
    o.sizes = sizes;
    o.within_node = within_node;
    if (token_cap) o.token_cap = *token_cap;
    o.min_shard_tokens = min_shard_tokens;
    o.micro_batches = micro_batches;
    if (micro_batch_tokens) o.micro_batch_tokens = *micro_batch_tokens;
    o.targets = targets;
    const auto start = std::chrono::steady_clock::now();
    out->result = orchmllm::balance_context_parallel(layout, cost, topo, o);
    out->plan_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto p = std::make_shared<py_plan>();
    p->layout = out->result.chunks;
    p->plan = out->result.plan;
    p->algorithm = p->requested = "context-parallel";
    p->policy_text = "packed";
    p->makespan = out->result.makespan;
    p->lower_bound = out->result.lower_bound;
    p->plan_seconds = out->plan_seconds;
    const auto ranks = p->plan.dst_ranks();
    p->dst_rank.assign(ranks.begin(), ranks.end());
    const auto slots = p->plan.dst_slots();
    p->dst_slot.assign(slots.begin(), slots.end());
    out->chunks = std::move(p);
    out->chunk_end.resize(out->result.chunk_begins.size());
    for (std::size_t k = 0; k < out->chunk_end.size(); ++k)
      out->chunk_end[k] =
          out->result.chunk_begins[k] + out->result.chunks.length(static_cast<i64>(k));
  }
  return out;
}

// One rank's shards as tuples (item, group_size, position, head_begin, head_end, tail_begin,
// tail_end, first_chunk), __init__.py turns them into Shard objects.
using shard_tuple = std::tuple<i64, i64, i64, i64, i64, i64, i64, i64>;

std::vector<shard_tuple> shards_of(const py_cp_plan& p, i64 rank) {
  const auto d = p.result.plan.num_dst_ranks();
  ORCHMLLM_REQUIRE(rank >= 0 && rank < d, orchmllm::invalid_argument_error, "rank ", rank,
                   " is outside [0, ", d, ")");
  std::vector<shard_tuple> out;
  for (const auto& s : p.result.shards_of(static_cast<orchmllm::rank_t>(rank)))
    out.emplace_back(s.item, s.group_size, s.position, s.ranges[0].begin, s.ranges[0].end,
                     s.ranges[1].begin, s.ranges[1].end, s.first_chunk);
  return out;
}

}  // namespace

void bind_context_parallel(nb::module_& m) {
  nb::class_<orchmllm::cp_cost>(
      m, "CpCost",
      "Seconds of a sequence, or of one rank's shard of it under context parallelism:\n"
      "constant + linear * tokens + attention * causal entries, plus for a shard over c >= 2\n"
      "ranks ring_rounds * (c - 1) steps moving kv_bytes_per_token * the largest shard's\n"
      "tokens over the group's link (the library's cp_cost).")
      .def(
          "__init__",
          [](orchmllm::cp_cost* self, double constant, double linear, double attention,
             double kv_bytes_per_token, double ring_rounds) {
            new (self) orchmllm::cp_cost{
                orchmllm::cp_cost{constant, linear, attention, kv_bytes_per_token, ring_rounds}
                    .validated()};
          },
          "constant"_a = 0.0, "linear"_a = 0.0, "attention"_a = 0.0, "kv_bytes_per_token"_a = 0.0,
          "ring_rounds"_a = 0.0)
      .def_static(
          "from_transformer",
          [](double flops_per_second, i64 hidden, i64 layers, i64 heads, i64 kv_heads,
             i64 ffn_hidden, bool gated_ffn, i64 vocab, double passes, double bytes_per_element) {
            orchmllm::transformer_config c;
            c.hidden = hidden;
            c.layers = layers;
            c.heads = heads;
            c.kv_heads = kv_heads;
            c.ffn_hidden = ffn_hidden;
            c.gated_ffn = gated_ffn;
            c.vocab = vocab;
            c.passes = passes;
            return orchmllm::cp_cost::from_transformer(c, flops_per_second, bytes_per_element);
          },
          "flops_per_second"_a, nb::kw_only(), "hidden"_a = 4096, "layers"_a = 32, "heads"_a = 32,
          "kv_heads"_a = 0, "ffn_hidden"_a = 11008, "gated_ffn"_a = true, "vocab"_a = 0,
          "passes"_a = 3.0, "bytes_per_element"_a = 2.0,
          "The model of a causal transformer (orchmllm::transformer_config's fields, their\n"
          "defaults) on GPUs that sustain flops_per_second; K and V of bytes_per_element each.")
      .def_ro("constant", &orchmllm::cp_cost::constant)
      .def_ro("linear", &orchmllm::cp_cost::linear)
      .def_ro("attention", &orchmllm::cp_cost::attention)
      .def_ro("kv_bytes_per_token", &orchmllm::cp_cost::kv_bytes_per_token)
      .def_ro("ring_rounds", &orchmllm::cp_cost::ring_rounds)
      .def("__call__", &orchmllm::cp_cost::operator(), "length"_a)
      .def("__repr__", [](const orchmllm::cp_cost& c) {
        const auto t = [](double v) { return orchmllm::detail::shortest_text(v); };
        return "CpCost(constant=" + t(c.constant) + ", linear=" + t(c.linear) +
               ", attention=" + t(c.attention) + ", kv_bytes_per_token=" + t(c.kv_bytes_per_token) +
               ", ring_rounds=" + t(c.ring_rounds) + ")";
      });

  nb::class_<py_cp_plan>(m, "_CpPlan")
      .def_prop_ro("chunks", [](const py_cp_plan& p) { return p.chunks; })
      .def_prop_ro(
          "group_size",
          [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.result.group_size)); },
          nb::rv_policy::reference)
      .def_prop_ro(
          "chunk_offsets",
          [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.result.chunk_offsets)); },
          nb::rv_policy::reference)
      .def_prop_ro(
          "chunk_begin",
          [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.result.chunk_begins)); },
          nb::rv_policy::reference)
      .def_prop_ro(
          "chunk_end", [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.chunk_end)); },
          nb::rv_policy::reference)
      .def_prop_ro(
          "loads",
          [](const py_cp_plan& p) { return to_numpy(std::vector<double>(p.result.loads)); },
          nb::rv_policy::reference)
      .def_prop_ro(
          "tokens", [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.result.tokens)); },
          nb::rv_policy::reference)
      .def_prop_ro("makespan", [](const py_cp_plan& p) { return p.result.makespan; })
      .def_prop_ro("lower_bound", [](const py_cp_plan& p) { return p.result.lower_bound; })
      .def_prop_ro("sharded", [](const py_cp_plan& p) { return p.result.sharded; })
      .def_prop_ro("micro_batches", [](const py_cp_plan& p) { return p.result.micro_batches; })
      .def_prop_ro(
          "micro_batch",
          [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.result.micro_batch)); },
          nb::rv_policy::reference)
      .def_prop_ro(
          "cell_offsets",
          [](const py_cp_plan& p) { return to_numpy(std::vector<i64>(p.result.cell_offsets)); },
          nb::rv_policy::reference)
      .def_prop_ro("objective", [](const py_cp_plan& p) { return p.result.objective; })
      .def_ro("plan_seconds", &py_cp_plan::plan_seconds)
      .def("shards", &shards_of, "rank"_a);

  m.def("_context_parallel", &context_parallel, "offsets"_a, "lengths"_a, "bytes"_a.none(),
        "cost"_a, "sizes"_a, "gpus_per_node"_a, "node_of_rank"_a.none(), "within_node"_a,
        "token_cap"_a.none(), "min_shard_tokens"_a, "micro_batches"_a,
        "micro_batch_tokens"_a.none(), "targets"_a);
}

}  // namespace orchmllm_py
