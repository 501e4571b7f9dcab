#pragma once
// Shared by the native module's files (python/src/*.cpp): the array types Python hands over,
// numpy conversions, the cost models of a plan, the Plan object (`py_plan`) and the arrays of
// one rank's all_to_all_single along a route. Not in an anonymous namespace: nanobind binds
// `py_plan` and `all_to_all_arrays` once, and every file must name the same types.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/step_plan.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm_py {

namespace nb = nanobind;

using i64 = std::int64_t;
// What __init__.py hands over: 1-D, C-contiguous int64 (it converted and checked the dtype).
using i64_in = nb::ndarray<const i64, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using f64_in = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using np_array = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

inline std::vector<i64> to_vector(const i64_in& a) { return {a.data(), a.data() + a.shape(0)}; }

// The micro-batching of balance() and of a stage declaration from their Python arguments: none
// unless one of them is given (the CLI's rule for its flags); count 0 is "auto". Throws
// invalid_argument_error as the library's check does.
inline std::optional<orchmllm::micro_batching> to_micro_batching(
    std::optional<i64> count, std::optional<i64> max_tokens, i64 multiple, i64 min_count,
    const std::optional<std::string>& sync) {
  if (!count && !max_tokens && !sync && multiple == 1 && min_count == 1) return std::nullopt;
  orchmllm::micro_batching m;
  m.count = count.value_or(0);
  if (max_tokens) m.limits.tokens = *max_tokens;
  m.multiple_of = multiple;
  m.min_count = min_count;
  if (sync) m.sync = orchmllm::parse_sync_model(*sync);
  orchmllm::detail::check_micro_batching(m);
  return m;
}

// A fresh numpy array owning `v` (writable: torch.from_numpy takes it without a warning).
template <class T>
inline np_array<T> to_numpy(std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return np_array<T>(heap->data(), {heap->size()}, owner);
}

// A read-only numpy view of `v`, kept alive by `owner` (the Python object holding `v`).
using np_view = nb::ndarray<nb::numpy, const i64, nb::ndim<1>, nb::ro>;
inline np_view view(const std::vector<i64>& v, nb::handle owner) {
  return np_view(v.data(), {v.size()}, owner);
}

// ---------------------------------------------------------------------------------------------
// Cost models. Linear costs balance in exact int64; every floating model (quadratic, and a
// Python callable's table) goes through one double-valued type, so the balancers are compiled
// twice, not once per model. A quadratic cost evaluates exactly as `quadratic_cost` does, so
// plans are bit-identical to the C++ API's and the CLI's.

// A Python callable's values on the distinct lengths (and padded lengths) of one input,
// sorted by length. __init__.py evaluates the callable once and checks the values.
struct cost_table {
  std::vector<i64> lengths;
  std::vector<double> values;
};

struct double_cost {
  orchmllm::quadratic_cost quadratic{};
  const cost_table* table = nullptr;  // set: look the length up instead

  [[nodiscard]] double operator()(i64 length) const {
    if (table == nullptr) return quadratic(length);
    const auto it = std::lower_bound(table->lengths.begin(), table->lengths.end(), length);
    ORCHMLLM_REQUIRE(it != table->lengths.end() && *it == length, orchmllm::invalid_argument_error,
                     "the cost callable was not evaluated at ", "length ", length,
                     " (its table holds the items' lengths and padded lengths)");
    return table->values[static_cast<std::size_t>(it - table->lengths.begin())];
  }
};

using model = std::variant<orchmllm::linear_cost, double_cost>;

// The cost argument as Python gives it (after __init__.py): text, a cost object or a table.
using cost_arg = std::variant<std::string, orchmllm::linear_cost, orchmllm::quadratic_cost,
                              std::shared_ptr<cost_table>>;

// ---------------------------------------------------------------------------------------------
// A plan and what Python reads of it.

struct py_plan {
  orchmllm::batch_layout layout;
  orchmllm::rearrangement plan;
  model cost;
  std::shared_ptr<cost_table> table;  // keeps a callable's table alive for the statistics
  orchmllm::padding_policy policy = orchmllm::packed;
  orchmllm::constraints limits{};
  std::vector<i64> dst_rank, dst_slot;  // int64 copies of the plan's arrays
  std::string algorithm, requested, policy_text;
  std::optional<std::string> cost_text;
  double makespan = 0, lower_bound = 0, plan_seconds = 0;
  bool proven_optimal = false, fallback = false;
  // Set by map_bins: the bin → rank mapping and its figures (the CLI's JSON keys).
  struct mapping_info {
    std::string method;
    std::vector<i64> node_of_rank, rank_of_bin;
    orchmllm::mapping_result figures;  // its `plan` is the remapped plan (also in `plan` above)
    double seconds = 0;
    i64 gpus_per_node = 0;
  };
  std::optional<mapping_info> mapping;
  // Set by balance with micro-batches: the cells (rank, micro-batch) and their figures.
  struct micro_info {
    orchmllm::micro_batching options;
    orchmllm::stage_micro_batches cells;  // M and the d·M + 1 cell offsets in destination ids
    std::vector<i64> dst_micro_batch;     // per item, by global id
    double objective = 0, objective_before = 0, objective_lower_bound = 0, objective_ratio = 1;
    bool objective_proven_optimal = false;
  };
  std::optional<micro_info> micro;
};

// What rank `rank` passes to torch.distributed.all_to_all_single to move its items (or their
// rows) along the plan: the library's direct route with every item's size in rows (1 row per
// item when `rows` is absent). The route orders each peer's block by destination id and the
// receive buffer by source rank, exactly as all_to_all_single delivers it.
struct all_to_all_arrays {
  np_array<i64> send_splits, recv_splits, send_order, recv_order;
  np_array<i64> output_items;     // global ids of the items the rank holds after, in slot order
  std::uint64_t fingerprint = 0;  // the route's: equal on every rank of the same exchange
  i64 rank = 0;                   // the rank it was built for
};

// The same as plain vectors, computed without the GIL.
struct route_vectors {
  std::vector<i64> send_splits, recv_splits, send_order, recv_order;
  std::uint64_t fingerprint = 0;
  i64 rank = 0;
};

// The gather `out[dst + i] = in[src + i]` of a segment list, as an index array.
inline std::vector<i64> gather_index(const orchmllm::detail::segment_list& s, i64 total,
                                     bool identity) {
  std::vector<i64> index(static_cast<std::size_t>(total));
  if (identity) {
    for (i64 i = 0; i < total; ++i) index[static_cast<std::size_t>(i)] = i;
    return index;
  }
  for (std::size_t k = 0; k < s.size(); ++k)
    for (i64 i = 0; i < s.bytes[k]; ++i)
      index[static_cast<std::size_t>(s.dst[k] + i)] = s.src[k] + i;
  return index;
}

// A direct route's (at most one hop) exchange as rows: `width` bytes per row (every item's
// bytes are rows x width, so every count and offset of the route divides by it). No GIL needed.
inline route_vectors route_rows(const orchmllm::route& route, i64 width) {
  ORCHMLLM_REQUIRE(route.hops().size() <= 1, orchmllm::invalid_argument_error, "a route of ",
                   route.hops().size(), " hops; all_to_all needs the direct schedule");
  ORCHMLLM_REQUIRE(width >= 1, orchmllm::invalid_argument_error, "row width ", width,
                   ", must be >= 1");
  // One int64 index per row: rows past what a vector can hold are refused by name (below
  // that, an index that does not fit in memory raises MemoryError).
  const auto max_rows = static_cast<i64>(std::vector<i64>().max_size());
  ORCHMLLM_REQUIRE(
      route.input_bytes() / width <= max_rows && route.output_bytes() / width <= max_rows,
      orchmllm::invalid_argument_error, "rank ", route.rank(), " sends ",
      route.input_bytes() / width, " and receives ", route.output_bytes() / width,
      " rows; all_to_all's index arrays (one int64 per row) hold at most ", max_rows);
  const auto d = static_cast<std::size_t>(route.num_ranks());
  const auto rank = static_cast<std::size_t>(route.rank());
  auto scaled = [width](orchmllm::detail::segment_list s) {
    for (std::size_t k = 0; k < s.size(); ++k) {
      s.src[k] /= width;
      s.dst[k] /= width;
      s.bytes[k] /= width;
    }
    return s;
  };
  route_vectors v;
  v.fingerprint = route.fingerprint();
  v.rank = route.rank();
  if (route.hops().empty()) {
    // No item changes rank anywhere: every rank sends its rows to itself.
    v.send_splits.assign(d, 0);
    v.send_splits[rank] = route.input_bytes() / width;
    v.recv_splits = v.send_splits;
    v.send_order = gather_index({}, route.input_bytes() / width, true);
  } else {
    const auto& hop = route.hops()[0];
    v.send_splits = hop.send_counts;
    v.recv_splits = hop.recv_counts;
    for (auto& c : v.send_splits) c /= width;
    for (auto& c : v.recv_splits) c /= width;
    v.send_order = gather_index(scaled(hop.pack), hop.send_bytes / width, hop.pack_identity);
  }
  v.recv_order =
      gather_index(scaled(route.unpack()), route.output_bytes() / width, route.unpack_identity());
  return v;
}

// The Python object of a rank's exchange; `output_items`: the destination items' global ids.
inline all_to_all_arrays to_python(route_vectors&& v, std::vector<i64>&& output_items) {
  return {to_numpy(std::move(v.send_splits)),
          to_numpy(std::move(v.recv_splits)),
          to_numpy(std::move(v.send_order)),
          to_numpy(std::move(v.recv_order)),
          to_numpy(std::move(output_items)),
          v.fingerprint,
          v.rank};
}

// The global ids of the items `plan` puts on rank r, in destination slot order.
inline std::vector<i64> output_items(const orchmllm::rearrangement& plan, orchmllm::rank_t r) {
  const auto off = plan.dst_offsets();
  const auto src = plan.sources();
  return {src.begin() + off[static_cast<std::size_t>(r)],
          src.begin() + off[static_cast<std::size_t>(r) + 1]};
}

// Python classes for the library's exceptions (made once at import, orchmllm_ext.cpp).
struct exception_types {
  nb::handle error, invalid_argument, parse, infeasible, communication;
};
extern exception_types exceptions;

// Plan.mapping: the figures of map_bins as a dict (None for a plan that was not mapped).
nb::object mapping_dict(const py_plan& p);

// The bindings of the other files, called from NB_MODULE.
void bind_mapping(nb::module_& m);
void bind_step(nb::module_& m);
void bind_context_parallel(nb::module_& m);

}  // namespace orchmllm_py
