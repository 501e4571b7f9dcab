// map_bins: a balanced plan's bins onto the ranks of a topology (nodes of GPUs) so that fewer
// bytes cross nodes; the library's `orchmllm::map_bins`, called as `orchmllm-bench plan
// --gpus-per-node G --mapping M` calls it. The result is a new Plan with the remapped
// destinations (same balance: mapping permutes whole bins) and the mapping's figures.

#include "orchmllm/topology/mapping.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm_py {

using namespace nb::literals;

namespace {

// `plan` remapped: the topology is `node_of_rank` (a node id per rank) when given, else
// consecutive blocks of `gpus_per_node` ranks (0: one node). Item bytes: `bytes` when given,
// else the plan's (balance's `bytes`, default the lengths).
std::unique_ptr<py_plan> map_plan(const py_plan& p, const std::string& method, i64 gpus_per_node,
                                  std::optional<i64_in> node_of_rank, std::optional<i64_in> bytes) {
  const orchmllm::any_mapper m = orchmllm::parse_mapper(method);
  const auto d = p.plan.num_src_ranks();
  ORCHMLLM_REQUIRE(p.plan.num_dst_ranks() == d, orchmllm::invalid_argument_error,
                   "map_bins needs a plan onto the same ranks, got ", d, " -> ",
                   p.plan.num_dst_ranks());
  ORCHMLLM_REQUIRE(gpus_per_node >= 0, orchmllm::invalid_argument_error, "gpus_per_node is ",
                   gpus_per_node, ", must be >= 0 (0: every rank on one node)");
  ORCHMLLM_REQUIRE(!(node_of_rank && gpus_per_node > 0), orchmllm::invalid_argument_error,
                   "give gpus_per_node or node_of_rank, not both");
  auto out = std::make_unique<py_plan>(p);
  py_plan::mapping_info info;
  info.method = std::string(m.name());
  info.gpus_per_node = gpus_per_node;
  {
    nb::gil_scoped_release unlocked;
    const orchmllm::topology topo =
        node_of_rank ? orchmllm::topology(std::vector<orchmllm::rank_t>(
                           node_of_rank->data(), node_of_rank->data() + node_of_rank->shape(0)))
                     : orchmllm::topology::uniform(d, static_cast<orchmllm::rank_t>(gpus_per_node));
    ORCHMLLM_REQUIRE(topo.num_ranks() == d, orchmllm::invalid_argument_error, "node_of_rank has ",
                     topo.num_ranks(), " entries, the plan ", d, " ranks");
    const std::vector<i64> item_bytes =
        bytes ? to_vector(*bytes)
              : std::vector<i64>(p.layout.item_bytes().begin(), p.layout.item_bytes().end());
    const auto start = std::chrono::steady_clock::now();
    info.figures = orchmllm::map_bins(p.plan, item_bytes, topo, m);
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    info.node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
    info.rank_of_bin.assign(info.figures.rank_of_bin.begin(), info.figures.rank_of_bin.end());
    out->plan = info.figures.plan;
    const auto ranks = out->plan.dst_ranks();
    out->dst_rank.assign(ranks.begin(), ranks.end());
    const auto slots = out->plan.dst_slots();
    out->dst_slot.assign(slots.begin(), slots.end());
    // Every item keeps its slot, so the cells move with their bins.
    if (out->micro)
      out->micro->cells.offsets = orchmllm::cell_offsets_on_ranks(
          out->micro->cells.offsets, out->micro->cells.count, info.figures.rank_of_bin);
  }
  out->mapping = std::move(info);
  return out;
}

}  // namespace

nb::object mapping_dict(const py_plan& p) {
  if (!p.mapping) return nb::none();
  const auto& m = *p.mapping;
  const auto& f = m.figures;
  nb::dict out;
  out["mapping"] = m.method;
  out["gpus_per_node"] = m.gpus_per_node;  // as given; 0 with node_of_rank or one node
  out["moved_bytes"] = f.moved_bytes;
  out["inter_node_bytes"] = f.inter_node_bytes;
  out["inter_node_bytes_lower_bound"] = f.inter_node_bytes_lower_bound;
  out["max_node_egress_bytes"] = f.max_node_egress_bytes;
  out["max_node_ingress_bytes"] = f.max_node_ingress_bytes;
  out["worst_node_bytes_lower_bound"] = f.worst_node_bytes_lower_bound;
  out["mapping_seconds"] = m.seconds;
  out["node_of_rank"] = to_numpy(std::vector<i64>(m.node_of_rank));
  out["rank_of_bin"] = to_numpy(std::vector<i64>(m.rank_of_bin));
  return out;
}

void bind_mapping(nb::module_& m) {
  m.def("_map_bins", &map_plan, "plan"_a, "method"_a, "gpus_per_node"_a, "node_of_rank"_a.none(),
        "bytes"_a.none());
}

}  // namespace orchmllm_py
