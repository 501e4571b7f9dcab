#pragma once
// plan_step's per-stage step (orchestrator/orchestrator.hpp): balance one stage with its
// balancer, map the bins with its mapper, and fill the stage's report. Not compiled in units
// that use the compiled library (ORCHMLLM_USE_COMPILED): plan_step's body is there.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/balance/split.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/pieces.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/core/parallel.hpp"
#include "orchmllm/detail/topology/mapping_problem.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/orchestrator/step_plan.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

#if !ORCHMLLM_USE_COMPILED
namespace detail {

// Balance + map one stage; fills its report and, when the stage declares micro-batches, `cells`.
// `bytes` are the layout's item bytes. With `split` (an encoder stage that splits), the stage is
// balanced by balance_split, the cut goes to `*pieces`, and the plan, mapping and report are
// over the pieces. With `parallel` (and at least `parallel_min_items` items) the report is
// computed on a thread of its own beside the mapping, and automatic may run its kk beside its
// lpt (`balancers::automatic::concurrent`, the same plan): the report's figures are maxima and
// sums over ranks of what each bin holds (in canonical slot order either way), which the
// mapping only permutes, so it reads the balanced plan and gives the mapped plan's figures.
template <class Stage>
rearrangement plan_stage(const Stage& stage, const batch_layout& layout, const topology& topo,
                         stage_report& rep, stage_micro_batches& cells, bool parallel,
                         const split_options* split = nullptr,
                         std::optional<piece_layout>* pieces = nullptr) {
  // A built-in balancer, with the topology's nodes for a locality balancer that names none and,
  // planning in parallel, automatic's kk beside its lpt (the same plan).
  any_balancer builtin = stage.balancer.builtin() ? *stage.balancer.builtin() : any_balancer{};
  if (auto* loc = builtin.get_if<balancers::locality>()) {
    ORCHMLLM_REQUIRE(loc->node_of_rank.empty() ||
                         loc->node_of_rank.size() == static_cast<std::size_t>(topo.num_ranks()),
                     invalid_argument_error, "stage '", stage.name, "': node_of_rank has ",
                     loc->node_of_rank.size(), " entries for ", topo.num_ranks(), " ranks");
    if (loc->node_of_rank.empty())
      loc->node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
    loc->base.concurrent = loc->base.concurrent || parallel;
  }
  if (auto* a = builtin.get_if<balancers::automatic>()) a->concurrent = a->concurrent || parallel;
  // Balance in the model's own computation type (exact integers for integral models); the
  // report carries the figures as double.
  mapping_result mapped = stage.cost.visit([&](const auto& cost) {
    using Cost = cost_type_t<std::remove_cvref_t<decltype(cost)>>;
    // The application's balancer sees the stage's model type-erased (stage_balancer); the
    // driver around it (checks, fallback) runs on the stage's own model type, so it shares its
    // instantiations with the built-in path.
    const auto custom = [&](const auto& p) {
      const cost_ref<Cost> erased(p.cost_model());
      return stage.balancer(balance_problem<cost_ref<Cost>>(p.input(), erased, p.lower_bound()));
    };
    auto t0 = std::chrono::steady_clock::now();
    const auto lap = [](std::chrono::steady_clock::time_point& t) {
      const auto t1 = std::chrono::steady_clock::now();
      return std::chrono::duration<double>(t1 - std::exchange(t, t1)).count();
    };
    std::optional<Cost> split_bound;
    std::optional<micro_batch_result<Cost>> micro;
    const auto balanced = [&] {
      if (stage.micro_batches) {
        micro = balance_micro_batches(layout, cost, stage.policy, *stage.micro_batches, builtin,
                                      stage.limits);
        return std::move(micro->balance);
      }
      if (split) {
        auto s = balance_split(layout, cost, stage.policy, builtin, stage.limits, *split);
        *pieces = std::move(s.pieces);
        split_bound = s.lower_bound;
        return std::move(s.balance);
      }
      return stage.balancer.custom() ? balance(layout, cost, stage.policy, custom, stage.limits)
                                     : balance(layout, cost, stage.policy, builtin, stage.limits);
    }();
    const batch_layout& units = split ? (*pieces)->layout() : layout;
    const std::span<const std::int64_t> bytes = units.item_bytes();
    const bool beside_map =
        parallel && static_cast<std::size_t>(units.num_items()) >= parallel_min_items;
    rep.balance_seconds = lap(t0);
    // The bound is known already: the balance's (the same layout, model, policy and limits)
    // or, split, the bound that lets items be cut (reported instead of the pieces' own).
    const Cost known_bound = split_bound ? *split_bound : balanced.lower_bound;
    const auto report = [&] {
      auto t = std::chrono::steady_clock::now();
      auto stats = detail::with_normal_cost(cost, [&](const auto& c) {
        return detail::compute_statistics_impl(units, balanced.plan, c, stage.policy, stage.limits,
                                               std::optional<Cost>(known_bound));
      });
      rep.report_seconds = lap(t);
      return stats;
    };
    auto beside = beside_map ? std::async(std::launch::async, report)
                             : std::future<std::invoke_result_t<decltype(report)>>{};
    // A custom mapper (the application's, GLPK's) runs behind the stage's std::function; a
    // built-in one on the gathered problem. A built-in mapping of a stage without items is
    // skipped: any bijection gives the same empty plan and moves nothing (and it would still
    // cost O(d + N · G³) at scale); so is one whose bins stay home (below). The problem's
    // worst-node bound (mapping_result::worst_node_bytes_lower_bound) is not part of a stage
    // report, so only the mapper that reads it, `bottleneck` (its stopping test), gets it:
    // through map_bins, as the application would call it. The other built-ins never read it
    // and skip its O(d + nnz) pass; their ranks are the same either way.
    const auto map = [&] {
      const any_mapper* m = stage.mapper.builtin();
      if (!m) return map_bins(balanced.plan, bytes, topo, stage.mapper);
      if (units.num_items() == 0) {
        mapping_result empty;
        empty.plan = balanced.plan;
        return empty;
      }
      // Bins that already sit on their own ranks (an already balanced stage): every built-in
      // mapper returns bin b → rank b, its unique optimum (detail::stays_home).
      if (detail::stays_home(balanced.plan, bytes)) return detail::home_mapping(balanced.plan);
      if (m->get_if<mappers::bottleneck>()) return map_bins(balanced.plan, bytes, topo, *m);
      const auto problem = detail::build_mapping_problem(balanced.plan, bytes, topo, false);
      return detail::result_from_ranks(problem, detail::rank_of_bin(problem, *m));
    };
    auto m = map();
    rep.map_seconds = lap(t0);
    if (micro) {
      // Every item kept its slot, so bin b's cells are rank_of_bin[b]'s.
      cells.count = micro->micro_batches;
      cells.offsets =
          cell_offsets_on_ranks(micro->cell_offsets, micro->micro_batches, m.rank_of_bin);
      rep.micro_batches = micro->micro_batches;
      rep.objective_after = static_cast<double>(micro->objective);
      rep.objective_lower_bound = static_cast<double>(micro->objective_lower_bound);
      rep.objective_before = static_cast<double>(
          micro_batch_objective_as_sampled(layout, cost, stage.policy, *stage.micro_batches));
    }
    const auto after = beside.valid() ? beside.get() : report();
    rep.used = balanced.used;
    rep.makespan_before = static_cast<double>(after.makespan_before);
    rep.makespan_after = static_cast<double>(after.makespan);
    // With splitting, the bound that lets items be cut (pieces counted whole can exceed it).
    rep.lower_bound = static_cast<double>(after.lower_bound);
    rep.imbalance_before = after.imbalance_before;
    rep.imbalance_after = after.imbalance_after;
    rep.max_tokens_before = after.max_tokens_before;
    rep.max_tokens_after = after.max_tokens;
    rep.max_bytes_before = after.max_bytes_before;
    rep.max_bytes_after = after.max_bytes;
    return m;
  });
  rep.name = stage.name;
  rep.moved_bytes = mapped.moved_bytes;
  rep.inter_node_bytes = mapped.inter_node_bytes;
  return std::move(mapped.plan);
}

}  // namespace detail
#endif

}  // namespace orchmllm
