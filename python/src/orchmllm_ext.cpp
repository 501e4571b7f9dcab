// The native module of the `orchmllm` Python package (orchmllm._orchmllm): the planning layer
// over numpy arrays. python/orchmllm/__init__.py checks and converts the arguments (dtypes,
// shapes, contiguity, the Python cost callable) and calls `balance` here with exact int64
// arrays; everything else (the balancers, the statistics, the routes that give the
// all_to_all_single splits) is the header-only library, called as the C++ API is. The GIL is
// released while the library runs.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/cost_fit.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/core/text_forms.hpp"
#include "orchmllm/detail/core/statistics_fields.hpp"
#include "orchmllm/topology/topology.hpp"
#include "orchmllm/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace orchmllm_py {
exception_types exceptions;
}  // namespace orchmllm_py

namespace {

using namespace orchmllm_py;

// The figures of `compute_statistics`, as Python floats and ints: the shared ones under their
// shared keys (detail/core/statistics_fields.hpp), those in the cost's unit (makespans, the
// bound, the smallest load) always as float, whatever the cost's value type.
nb::dict statistics(const py_plan& p) {
  nb::dict out;
  out["algorithm"] = p.algorithm;
  out["requested"] = p.requested;
  out["items"] = p.plan.num_items();
  out["ranks"] = static_cast<i64>(p.plan.num_src_ranks());
  out["policy"] = p.policy_text;
  out["pad_multiple"] = p.policy.multiple();
  out["cost"] = p.cost_text ? nb::cast(*p.cost_text) : nb::none();
  out["plan_seconds"] = p.plan_seconds;
  out["proven_optimal"] = p.proven_optimal;
  std::visit(
      [&](const auto& c) {
        auto s = [&] {
          nb::gil_scoped_release unlocked;
          return orchmllm::compute_statistics(p.layout, p.plan, c, p.policy, p.limits);
        }();
        std::vector<double> before(s.load_before.begin(), s.load_before.end());
        std::vector<double> after(s.load_after.begin(), s.load_after.end());
        for (const auto& f : orchmllm::detail::statistic_fields(s)) {
          const nb::str key(f.key.data(), f.key.size());
          if (f.in_cost_unit) {
            out[key] = f.as_double();
          } else {
            std::visit([&](auto v) { out[key] = v; }, f.value);
          }
        }
        out["load_before"] = to_numpy(std::move(before));
        out["load_after"] = to_numpy(std::move(after));
      },
      p.cost);
  if (p.micro) {
    // The keys and order of `orchmllm-bench plan`'s micro-batch figures.
    const auto& m = *p.micro;
    const bool capped = m.options.limits.tokens != orchmllm::micro_batch_limits{}.tokens;
    out["sync"] = std::string(orchmllm::to_string(m.options.sync));
    out["micro_batches"] = m.cells.count;
    out["micro_batch_tokens"] = capped ? nb::cast(m.options.limits.tokens) : nb::none();
    out["objective"] = m.objective;
    out["objective_before"] = m.objective_before;
    out["objective_lower_bound"] = m.objective_lower_bound;
    out["objective_ratio"] = m.objective_ratio;
    out["objective_proven_optimal"] = m.objective_proven_optimal;
  }
  return out;
}

// Micro-batch m of `rank` as destination slots of that rank.
std::pair<i64, i64> micro_batch_slots(const py_plan& p, i64 rank, i64 m) {
  ORCHMLLM_REQUIRE(p.micro.has_value(), orchmllm::invalid_argument_error,
                   "the plan has no micro-batches (balance without micro-batch arguments)");
  // A rank beyond rank_t is out of range too (slots checks the rest, with the same message).
  ORCHMLLM_REQUIRE(rank >= 0 && rank < p.plan.num_dst_ranks(), orchmllm::invalid_argument_error,
                   "micro-batch ", m, " of rank ", rank, " is outside ", p.plan.num_dst_ranks(),
                   " ranks × ", p.micro->cells.count, " micro-batches");
  return p.micro->cells.slots(static_cast<orchmllm::rank_t>(rank), m);
}

all_to_all_arrays all_to_all_impl(const py_plan& p, i64 rank, std::optional<i64_in> rows) {
  const i64 d = p.plan.num_src_ranks();
  ORCHMLLM_REQUIRE(p.plan.num_dst_ranks() == d, orchmllm::invalid_argument_error,
                   "all_to_all needs a plan onto the same ranks, got ", d, " -> ",
                   p.plan.num_dst_ranks());
  ORCHMLLM_REQUIRE(rank >= 0 && rank < d, orchmllm::invalid_argument_error, "rank is ", rank,
                   ", must be in [0, ", d, ")");
  std::vector<i64> sizes = rows ? to_vector(*rows) : std::vector<i64>();
  for (std::size_t g = 0; g < sizes.size(); ++g)
    ORCHMLLM_REQUIRE(sizes[g] >= 0, orchmllm::invalid_argument_error, "rows[", g, "] is ", sizes[g],
                     ", must be >= 0");
  route_vectors v;
  std::vector<i64> items;
  {
    nb::gil_scoped_release unlocked;
    if (!rows) sizes.assign(static_cast<std::size_t>(p.plan.num_items()), 1);
    const auto r = static_cast<orchmllm::rank_t>(rank);
    const auto one_node = orchmllm::topology::uniform(static_cast<orchmllm::rank_t>(d), 0);
    v = route_rows(orchmllm::route::build(p.plan, sizes, one_node, r, orchmllm::schedule::direct),
                   1);
    items = output_items(p.plan, r);
  }
  return to_python(std::move(v), std::move(items));
}

// `rows` checked and converted by the package's own helper (dtype, shape, size), as `balance`
// checks its arrays.
all_to_all_arrays all_to_all(const py_plan& p, i64 rank, nb::object rows) {
  if (rows.is_none()) return all_to_all_impl(p, rank, std::nullopt);
  nb::object checked =
      nb::module_::import_("orchmllm").attr("_int64_vector")("rows", rows, p.plan.num_items());
  return all_to_all_impl(p, rank, nb::cast<i64_in>(checked));
}

// ---------------------------------------------------------------------------------------------
// balance

// balance_micro_batches for `balance` with micro-batches: its rank plan, with the cells and
// their figures stored in p.micro.
template <class C>
orchmllm::balance_result<orchmllm::cost_type_t<C>> micro_balance(py_plan& p, const C& cost,
                                                                 const orchmllm::any_balancer& b) {
  auto& info = *p.micro;
  auto res = orchmllm::balance_micro_batches(p.layout, cost, p.policy, info.options, b, p.limits);
  info.dst_micro_batch =
      orchmllm::item_micro_batches(res.balance.plan, res.cell_offsets, res.micro_batches);
  info.cells = {res.micro_batches, std::move(res.cell_offsets)};
  info.objective = static_cast<double>(res.objective);
  info.objective_lower_bound = static_cast<double>(res.objective_lower_bound);
  info.objective_ratio = res.objective_ratio();
  info.objective_proven_optimal = res.objective_proven_optimal;
  info.objective_before = static_cast<double>(
      orchmllm::micro_batch_objective_as_sampled(p.layout, cost, p.policy, info.options));
  return std::move(res.balance);
}

std::unique_ptr<py_plan> balance(
    const i64_in& offsets, const i64_in& lengths, std::optional<i64_in> bytes, const cost_arg& cost,
    const std::string& policy, i64 pad_multiple, const std::string& algorithm,
    std::optional<i64> cap, std::optional<i64> cap_bytes, i64 min_items,
    std::optional<i64> max_items, i64 gpus_per_node, double locality_tolerance,
    double gap_tolerance, std::optional<i64> micro_batches,
    std::optional<i64> max_tokens_per_micro_batch, i64 micro_batch_multiple, i64 min_micro_batches,
    std::optional<std::string> sync) {
  auto out = std::make_unique<py_plan>();
  auto& p = *out;
  // The arguments that are text or objects: parsed with the GIL held (cheap).
  if (const auto* text = std::get_if<std::string>(&cost)) {
    const auto parsed = orchmllm::parse_cost_model(*text);
    p.cost_text = orchmllm::to_text(parsed);
    if (const auto* q = std::get_if<orchmllm::quadratic_cost>(&parsed))
      p.cost = double_cost{*q, nullptr};
    else
      p.cost = std::get<orchmllm::linear_cost>(parsed);
  } else if (const auto* lin = std::get_if<orchmllm::linear_cost>(&cost)) {
    ORCHMLLM_REQUIRE(lin->weight >= 1, orchmllm::invalid_argument_error, "LinearCost weight is ",
                     lin->weight, ", must be >= 1");
    p.cost = *lin;
    if (lin->weight == 1) p.cost_text = "linear";
  } else if (const auto* q = std::get_if<orchmllm::quadratic_cost>(&cost)) {
    p.cost = double_cost{q->validated(), nullptr};
    p.cost_text = orchmllm::to_text(*q);
  } else {
    p.table = std::get<std::shared_ptr<cost_table>>(cost);
    p.cost = double_cost{{}, p.table.get()};
  }
  p.policy = orchmllm::parse_padding_policy(policy, pad_multiple);
  p.policy_text = orchmllm::to_text(p.policy);
  orchmllm::any_balancer balancer = orchmllm::parse_balancer(algorithm);
  p.requested = std::string(balancer.name());
  ORCHMLLM_REQUIRE(!(cap && cap_bytes), orchmllm::invalid_argument_error,
                   "cap and cap_bytes are exclusive (one per-rank cap)");
  if (cap) p.limits.cap = orchmllm::capacity{orchmllm::capacity::measure::tokens, *cap};
  if (cap_bytes) p.limits.cap = orchmllm::capacity{orchmllm::capacity::measure::bytes, *cap_bytes};
  p.limits.min_items = min_items;
  p.limits.max_items = max_items.value_or(std::numeric_limits<i64>::max());
  orchmllm::detail::set_gap_tolerance(balancer, gap_tolerance);
  auto* locality = balancer.get_if<orchmllm::balancers::locality>();
  if (locality) locality->tolerance = locality_tolerance;
  ORCHMLLM_REQUIRE(gpus_per_node >= 0, orchmllm::invalid_argument_error, "gpus_per_node is ",
                   gpus_per_node, ", must be >= 0 (0: every rank on one node)");
  // Micro-batches when any of their arguments is given (the CLI's rule for its flags).
  if (auto m = to_micro_batching(micro_batches, max_tokens_per_micro_batch, micro_batch_multiple,
                                 min_micro_batches, sync)) {
    py_plan::micro_info info;
    info.options = *m;
    p.micro = std::move(info);
  }

  // Zero ranks (offsets [0]) is no cluster to balance over: refused as map_bins and
  // make_step_metadata refuse it (the library's balance returns the empty plan).
  ORCHMLLM_REQUIRE(offsets.shape(0) != 1, orchmllm::invalid_argument_error,
                   "balance needs at least one rank: offsets has 1 entry (D + 1 with D = 0)");
  {
    nb::gil_scoped_release unlocked;
    p.layout = orchmllm::batch_layout(to_vector(offsets), to_vector(lengths),
                                      bytes ? to_vector(*bytes) : std::vector<i64>());
    const auto d = p.layout.num_ranks();
    if (locality && gpus_per_node > 0) {
      const auto topo =
          orchmllm::topology::uniform(d, static_cast<orchmllm::rank_t>(gpus_per_node));
      locality->node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
    }
    std::visit(
        [&](const auto& c) {
          const auto start = std::chrono::steady_clock::now();
          auto result = p.micro ? micro_balance(p, c, balancer)
                                : orchmllm::balance(p.layout, c, p.policy, balancer, p.limits);
          p.plan_seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          p.plan = std::move(result.plan);
          p.algorithm = std::string(result.used);
          p.makespan = static_cast<double>(result.makespan);
          p.lower_bound = static_cast<double>(result.lower_bound);
          p.proven_optimal = result.proven_optimal;
          p.fallback = result.fallback;
        },
        p.cost);
    const auto ranks = p.plan.dst_ranks();
    p.dst_rank.assign(ranks.begin(), ranks.end());
    const auto slots = p.plan.dst_slots();
    p.dst_slot.assign(slots.begin(), slots.end());
  }
  return out;
}

// The lengths a callable cost is evaluated at: every distinct item length and padded length
// under the policy, ascending. Throws as `parse_padding_policy` and `padded_length` do.
np_array<i64> cost_lengths(const i64_in& lengths, const std::string& policy, i64 pad_multiple) {
  const auto pol = orchmllm::parse_padding_policy(policy, pad_multiple);
  std::vector<i64> all;
  {
    nb::gil_scoped_release unlocked;
    all.reserve(2 * lengths.shape(0));
    for (std::size_t i = 0; i < lengths.shape(0); ++i) {
      const i64 l = lengths.data()[i];
      ORCHMLLM_REQUIRE(l >= 0, orchmllm::invalid_argument_error, "item ", i, " has length ", l,
                       ", must be >= 0");
      all.push_back(l);
      all.push_back(pol.padded_length(l));
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
  }
  return to_numpy(std::move(all));
}

// ---------------------------------------------------------------------------------------------
// Cost fits: `fit_quadratic_cost` (per item) and `cost_calibration` (per-rank stage times of
// warmup steps). __init__.py converts the arrays; the library checks the values.

// A fit's degree, named by the library when it is not 1 or 2 (an int64 from Python, so a
// degree past the C++ int is refused with the same message, not a failed conversion).
int fit_degree(i64 degree) {
  ORCHMLLM_REQUIRE(degree == 1 || degree == 2, orchmllm::invalid_argument_error, "degree is ",
                   degree, ", must be 1 or 2");
  return static_cast<int>(degree);
}

orchmllm::quadratic_cost fit_quadratic(const i64_in& lengths, const f64_in& seconds, i64 degree) {
  const int d = fit_degree(degree);
  nb::gil_scoped_release unlocked;
  return orchmllm::fit_quadratic_cost(std::span<const i64>(lengths.data(), lengths.shape(0)),
                                      std::span<const double>(seconds.data(), seconds.shape(0)), d);
}

orchmllm::cost_calibration make_calibration(const std::string& policy, i64 pad_multiple, i64 degree,
                                            bool fit_overhead) {
  return orchmllm::cost_calibration(orchmllm::parse_padding_policy(policy, pad_multiple),
                                    fit_degree(degree), fit_overhead);
}

void calibration_add_step(orchmllm::cost_calibration& c, const i64_in& offsets,
                          const i64_in& lengths, const f64_in& seconds) {
  nb::gil_scoped_release unlocked;
  const orchmllm::batch_layout layout(to_vector(offsets), to_vector(lengths));
  c.add_step(layout, std::span<const double>(seconds.data(), seconds.shape(0)));
}

// `a == b` for a cost object and any Python object (False for another type, None included),
// as Python's __eq__ takes any object.
template <class T>
bool equal(const T& a, nb::handle b) {
  return nb::isinstance<T>(b) && a == nb::cast<const T&>(b);
}

// An error's text for Python: what() ("orchmllm: <message> [<file>:<line>]"), except that a
// message holding a NUL byte (from a name the caller passed) would end there in a C string:
// it is rebuilt with every NUL written as \x00, the location formatted as error's own.
std::string python_message(const orchmllm::error& x) {
  const std::string& message = x.message();
  if (message.find('\0') == std::string::npos) return x.what();
  std::string out = "orchmllm: ";
  for (const char c : message) {
    if (c == '\0')
      out += "\\x00";
    else
      out += c;
  }
  std::string_view file = x.file();
  if (const auto p = file.rfind("orchmllm/"); p != std::string_view::npos) {
    file.remove_prefix(p);
  } else if (const auto s = file.find_last_of("/\\"); s != std::string_view::npos) {
    file.remove_prefix(s + 1);
  }
  out += " [";
  out.append(file);
  out += ':' + std::to_string(x.line()) + ']';
  return out;
}

nb::handle make_exception(nb::module_& m, const char* name, nb::tuple bases, const char* doc) {
  nb::dict ns;
  ns["__module__"] = "orchmllm._orchmllm";
  ns["__doc__"] = doc;
  nb::object cls = nb::module_::import_("builtins").attr("type")(name, bases, ns);
  m.attr(name) = cls;
  return cls.release();  // held for the life of the process
}

}  // namespace

// The package's version, passed by the build: CMakeLists.txt's project() VERSION, which
// pyproject.toml reads too (python/CMakeLists.txt). The C++ headers' version must agree.
#ifndef ORCHMLLM_PYTHON_VERSION
#error "ORCHMLLM_PYTHON_VERSION is set by python/CMakeLists.txt"
#endif
static_assert(std::string_view(ORCHMLLM_PYTHON_VERSION) == orchmllm::version_string(),
              "CMakeLists.txt's project() VERSION and include/orchmllm/version.hpp disagree");

NB_MODULE(_orchmllm, m) {
  m.doc() = "Native part of the orchmllm package (use the orchmllm module).";
  m.attr("_version") = ORCHMLLM_PYTHON_VERSION;  // orchmllm.__version__ (typed by the stubs)

  exceptions.error = make_exception(m, "Error", nb::make_tuple(nb::handle(PyExc_Exception)),
                                    "Base of every error the orchmllm library raises.");
  exceptions.invalid_argument = make_exception(
      m, "InvalidArgumentError", nb::make_tuple(exceptions.error, nb::handle(PyExc_ValueError)),
      "Malformed input: a value outside its domain, sizes that do not match, a bad option.");
  exceptions.parse = make_exception(m, "ParseError", nb::make_tuple(exceptions.invalid_argument),
                                    "Malformed text input; the message names the line at fault.");
  exceptions.infeasible = make_exception(
      m, "InfeasibleError", nb::make_tuple(exceptions.error),
      "Well-formed input for which no plan satisfies the constraints (caps, item counts).");
  exceptions.communication = make_exception(
      m, "CommunicationError", nb::make_tuple(exceptions.error), "A collective operation failed.");
  nb::register_exception_translator([](const std::exception_ptr& e, void*) {
    try {
      std::rethrow_exception(e);
    } catch (const orchmllm::parse_error& x) {
      PyErr_SetString(exceptions.parse.ptr(), python_message(x).c_str());
    } catch (const orchmllm::invalid_argument_error& x) {
      PyErr_SetString(exceptions.invalid_argument.ptr(), python_message(x).c_str());
    } catch (const orchmllm::infeasible_error& x) {
      PyErr_SetString(exceptions.infeasible.ptr(), python_message(x).c_str());
    } catch (const orchmllm::communication_error& x) {
      PyErr_SetString(exceptions.communication.ptr(), python_message(x).c_str());
    } catch (const orchmllm::error& x) {
      PyErr_SetString(exceptions.error.ptr(), python_message(x).c_str());
    }
  });

  nb::class_<orchmllm::linear_cost>(m, "LinearCost",
                                    "cost(l) = weight * l, in exact 64-bit integers.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](orchmllm::linear_cost* self, i64 weight) { new (self) orchmllm::linear_cost{weight}; },
          "weight"_a)
      .def_rw("weight", &orchmllm::linear_cost::weight)
      .def("__call__", &orchmllm::linear_cost::operator(), "length"_a)
      .def("__eq__", &equal<orchmllm::linear_cost>, nb::arg("other").none(),
           nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__repr__", [](const orchmllm::linear_cost& c) {
        return "LinearCost(weight=" + std::to_string(c.weight) + ")";
      });

  nb::class_<orchmllm::quadratic_cost>(
      m, "QuadraticCost", "cost(l) = constant + linear * l + quadratic * l**2 (coefficients >= 0).")
      .def(
          "__init__",
          [](orchmllm::quadratic_cost* self, double constant, double linear, double quadratic) {
            new (self) orchmllm::quadratic_cost{
                orchmllm::quadratic_cost{constant, linear, quadratic}.validated()};
          },
          "constant"_a = 0.0, "linear"_a = 1.0, "quadratic"_a = 0.0)
      .def_ro("constant", &orchmllm::quadratic_cost::constant)
      .def_ro("linear", &orchmllm::quadratic_cost::linear)
      .def_ro("quadratic", &orchmllm::quadratic_cost::quadratic)
      .def("__call__", &orchmllm::quadratic_cost::operator(), "length"_a)
      .def("__eq__", &equal<orchmllm::quadratic_cost>, nb::arg("other").none(),
           nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__repr__", [](const orchmllm::quadratic_cost& c) {
        return "QuadraticCost(constant=" + orchmllm::detail::shortest_text(c.constant) +
               ", linear=" + orchmllm::detail::shortest_text(c.linear) +
               ", quadratic=" + orchmllm::detail::shortest_text(c.quadratic) + ")";
      });

  nb::class_<cost_table>(m, "_CostTable")
      .def("__init__", [](cost_table* self, const i64_in& lengths, const f64_in& values) {
        ORCHMLLM_REQUIRE(lengths.shape(0) == values.shape(0), orchmllm::invalid_argument_error,
                         "cost table: ", lengths.shape(0), " lengths but ", values.shape(0),
                         " values");
        new (self) cost_table{to_vector(lengths), {values.data(), values.data() + values.shape(0)}};
      });

  nb::class_<all_to_all_arrays>(
      m, "AllToAll",
      "One rank's exchange along a plan or a step's route, in rows: what it passes to\n"
      "torch.distributed.all_to_all_single (int64 numpy arrays, writable).")
      .def_prop_ro(
          "send_splits", [](const all_to_all_arrays& a) { return a.send_splits; },
          nb::rv_policy::reference,
          "int64[D]: rows this rank sends to every rank (input_split_sizes).")
      .def_prop_ro(
          "recv_splits", [](const all_to_all_arrays& a) { return a.recv_splits; },
          nb::rv_policy::reference,
          "int64[D]: rows this rank receives from every rank (output_split_sizes).")
      .def_prop_ro(
          "send_order", [](const all_to_all_arrays& a) { return a.send_order; },
          nb::rv_policy::reference,
          "Indices of the rank's local rows in wire order: send = local[send_order].")
      .def_prop_ro(
          "recv_order", [](const all_to_all_arrays& a) { return a.recv_order; },
          nb::rv_policy::reference,
          "Indices of the received rows in destination-slot order: out = received[recv_order].")
      .def_prop_ro(
          "output_items", [](const all_to_all_arrays& a) { return a.output_items; },
          nb::rv_policy::reference,
          "Global ids (source order of the plan or route) of the items the rank holds\n"
          "after the exchange, in destination slot order.")
      .def_ro("fingerprint", &all_to_all_arrays::fingerprint,
              "64-bit digest of the exchange every rank's AllToAll of it shares (the plan, every\n"
              "item's rows, the nodes, the schedule): equal on every rank that holds the same\n"
              "exchange, so orchmllm.torch agrees on it before anything moves.")
      .def_ro("rank", &all_to_all_arrays::rank, "The rank whose exchange this is.");

  nb::class_<py_plan>(
      m, "Plan",
      "Where every item goes (orchmllm.balance, orchmllm.map_bins): dst_rank / dst_slot by\n"
      "global id, the problem's figures, statistics() and all_to_all(rank, rows). Immutable;\n"
      "identical on every rank for the same input.")
      .def_prop_ro(
          "dst_rank",
          [](nb::handle_t<py_plan> self) {
            return view(nb::cast<const py_plan&>(self).dst_rank, self);
          },
          nb::rv_policy::reference)
      .def_prop_ro(
          "dst_slot",
          [](nb::handle_t<py_plan> self) {
            return view(nb::cast<const py_plan&>(self).dst_slot, self);
          },
          nb::rv_policy::reference)
      .def_prop_ro(
          "dst_offsets",
          [](const py_plan& p) {
            const auto o = p.plan.dst_offsets();
            return to_numpy(std::vector<i64>(o.begin(), o.end()));
          },
          nb::rv_policy::reference)
      .def_prop_ro(
          "sources",
          [](const py_plan& p) {
            const auto s = p.plan.sources();
            return to_numpy(std::vector<i64>(s.begin(), s.end()));
          },
          nb::rv_policy::reference)
      .def_prop_ro("num_ranks", [](const py_plan& p) { return p.plan.num_src_ranks(); })
      .def_prop_ro("num_items", [](const py_plan& p) { return p.plan.num_items(); })
      .def_ro("makespan", &py_plan::makespan)
      .def_ro("lower_bound", &py_plan::lower_bound)
      .def_ro("proven_optimal", &py_plan::proven_optimal)
      .def_ro("fallback", &py_plan::fallback)
      .def_ro("algorithm", &py_plan::algorithm)
      .def_ro("requested", &py_plan::requested)
      .def_ro("policy", &py_plan::policy_text)
      .def_prop_ro("pad_multiple", [](const py_plan& p) { return p.policy.multiple(); })
      .def_ro("cost", &py_plan::cost_text)
      .def_ro("plan_seconds", &py_plan::plan_seconds)
      .def_prop_ro("mapping", &mapping_dict,
                   nb::sig("def mapping(self) -> dict[str, object] | None"),
                   "None for a plan as balance() returns it (bin k on rank k); for a plan from\n"
                   "map_bins a dict with the keys of `orchmllm-bench plan --gpus-per-node`'s JSON\n"
                   "(mapping, gpus_per_node, moved_bytes, inter_node_bytes,\n"
                   "inter_node_bytes_lower_bound, max_node_egress_bytes, max_node_ingress_bytes,\n"
                   "worst_node_bytes_lower_bound, mapping_seconds) plus node_of_rank and\n"
                   "rank_of_bin (int64[D] arrays).")
      .def_prop_ro(
          "micro_batches", [](const py_plan& p) { return p.micro ? p.micro->cells.count : i64{0}; },
          "M, the micro-batches of every rank (balance with micro-batches), else 0.")
      .def_prop_ro(
          "dst_micro_batch",
          [](const py_plan& p) -> nb::object {
            if (!p.micro) return nb::none();
            return nb::cast(to_numpy(std::vector<i64>(p.micro->dst_micro_batch)));
          },
          nb::sig("def dst_micro_batch(self) -> numpy.typing.NDArray[numpy.int64] | None"),
          "The micro-batch of every item's destination by global id (None without\n"
          "micro-batches). A rank's slots are grouped by micro-batch, in run order.")
      .def("micro_batch", &micro_batch_slots, "rank"_a, "m"_a,
           nb::sig("def micro_batch(self, rank: int, m: int) -> tuple[int, int]"),
           "Micro-batch m of `rank` as its destination slots [first, last) (what the rank\n"
           "receives, in slot order). Raises ValueError out of range or without micro-batches.")
      .def("statistics", &statistics, nb::sig("def statistics(self) -> dict[str, object]"),
           "The figures `orchmllm-bench plan` prints as JSON (same keys) and the per-rank loads\n"
           "(load_before, load_after). O(n log n) (the lower bound sorts), on every call; the GIL\n"
           "is released while it computes.")
      .def("all_to_all", &all_to_all, "rank"_a, "rows"_a = nb::none(),
           nb::sig("def all_to_all(self, rank: int, rows: numpy.typing.ArrayLike | None = None) "
                   "-> AllToAll"),
           "What rank `rank` passes to torch.distributed.all_to_all_single to move its items\n"
           "along the plan. rows: int64[n], the rows (first-dimension entries) of every item by\n"
           "global id; default one row per item. send_splits / recv_splits: rows to / from every\n"
           "rank; send_order: indices of the rank's local rows in wire order (send =\n"
           "local[send_order]); recv_order: indices of the received rows in destination-slot\n"
           "order (out = received[recv_order]). O(n log n); the GIL is released.");

  nb::class_<orchmllm::calibration_result>(m, "CalibrationResult",
                                           "What CostCalibration.fit returns.")
      .def_ro("cost", &orchmllm::calibration_result::cost,
              "The per-item model (QuadraticCost; quadratic = 0 for degree 1).")
      .def_ro("overhead_seconds", &orchmllm::calibration_result::overhead_seconds,
              "Per-rank time that does not depend on the items (0 without fit_overhead).")
      .def_ro("rms_seconds", &orchmllm::calibration_result::rms_seconds,
              "Root-mean-square residual over the observations, in seconds.")
      .def_ro("observations", &orchmllm::calibration_result::observations)
      .def("__repr__", [](const orchmllm::calibration_result& r) {
        return "CalibrationResult(cost=QuadraticCost(constant=" +
               orchmllm::detail::shortest_text(r.cost.constant) +
               ", linear=" + orchmllm::detail::shortest_text(r.cost.linear) +
               ", quadratic=" + orchmllm::detail::shortest_text(r.cost.quadratic) +
               "), overhead_seconds=" + orchmllm::detail::shortest_text(r.overhead_seconds) +
               ", rms_seconds=" + orchmllm::detail::shortest_text(r.rms_seconds) +
               ", observations=" + std::to_string(r.observations) + ")";
      });

  nb::class_<orchmllm::cost_calibration>(m, "_CostCalibration")
      .def(
          "__init__",
          [](orchmllm::cost_calibration* self, const std::string& policy, i64 pad_multiple,
             i64 degree, bool fit_overhead) {
            new (self) orchmllm::cost_calibration(
                make_calibration(policy, pad_multiple, degree, fit_overhead));
          },
          "policy"_a, "pad_multiple"_a, "degree"_a, "fit_overhead"_a)
      .def(
          "add_rank",
          [](orchmllm::cost_calibration& c, const i64_in& lengths, double seconds) {
            c.add_rank(std::span<const i64>(lengths.data(), lengths.shape(0)), seconds);
          },
          "lengths"_a, "seconds"_a)
      .def("add_step", &calibration_add_step, "offsets"_a, "lengths"_a, "seconds"_a)
      .def_prop_ro("observations", &orchmllm::cost_calibration::observations)
      .def("fit", &orchmllm::cost_calibration::fit, nb::call_guard<nb::gil_scoped_release>());

  m.def("_fit_quadratic_cost", &fit_quadratic, "lengths"_a, "seconds"_a, "degree"_a);
  m.def("_balance", &balance, "offsets"_a, "lengths"_a, "bytes"_a.none(), "cost"_a, "policy"_a,
        "pad_multiple"_a, "algorithm"_a, "cap"_a.none(), "cap_bytes"_a.none(), "min_items"_a,
        "max_items"_a.none(), "gpus_per_node"_a, "locality_tolerance"_a, "gap_tolerance"_a,
        "micro_batches"_a.none(), "max_tokens_per_micro_batch"_a.none(), "micro_batch_multiple"_a,
        "min_micro_batches"_a, "sync"_a.none());
  m.def("_cost_lengths", &cost_lengths, "lengths"_a, "policy"_a, "pad_multiple"_a);
  // The names of the built-ins (`orchmllm::balancer_names()`, `mapper_names()`): ALGORITHMS and
  // MAPPINGS in __init__.py, one list with the library's parsers.
  m.def("_balancer_names", [] {
    const auto n = orchmllm::balancer_names();
    return std::vector<std::string>(n.begin(), n.end());
  });
  m.def("_mapper_names", [] {
    const auto n = orchmllm::mapper_names();
    return std::vector<std::string>(n.begin(), n.end());
  });

  bind_mapping(m);
  bind_step(m);
  bind_context_parallel(m);
}
