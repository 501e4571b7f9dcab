// A multimodal training step from Python: the stage declarations (`_Declarations`, built by
// python/orchmllm/step.py from EncoderStage / LLMStage), the step's global metadata
// (`StepMetadata`, from every rank's samples and sub-items as flat int64 arrays) and
// `plan_step` (`StepPlan`): every stage's plan and report, one rank's routes of every transfer
// (as the all_to_all_single arrays of `AllToAll`, in rows), and the LLM / encoder views. The
// library's `orchmllm::plan_step` runs with the GIL released (the routes of the rank asked for
// are built inside it, `plan_options::routes_for`), so a thread can plan step t + 1 while
// step t trains.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "common.hpp"
#include "orchmllm/core/text_forms.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"

namespace orchmllm_py {

using namespace nb::literals;

namespace {

using text_or_cost = std::variant<std::string, orchmllm::linear_cost, orchmllm::quadratic_cost>;
// (min_piece_segments, max_pieces, rounds, tolerance)
using split_arg = std::tuple<i64, i64, i64, double>;
// (micro_batches, max_tokens_per_micro_batch, micro_batch_multiple, min_micro_batches, sync), as
// orchmllm.balance takes them (to_micro_batching)
using micro_arg =
    std::tuple<std::optional<i64>, std::optional<i64>, i64, i64, std::optional<std::string>>;

std::optional<orchmllm::micro_batching> to_stage_micro_batches(const micro_arg& m) {
  const auto& [count, max_tokens, multiple, min_count, sync] = m;
  return to_micro_batching(count, max_tokens, multiple, min_count, sync);
}

orchmllm::stage_cost to_stage_cost(const text_or_cost& cost) {
  if (const auto* text = std::get_if<std::string>(&cost)) {
    const auto parsed = orchmllm::parse_cost_model(*text);
    if (const auto* q = std::get_if<orchmllm::quadratic_cost>(&parsed)) return *q;
    return std::get<orchmllm::linear_cost>(parsed);
  }
  if (const auto* lin = std::get_if<orchmllm::linear_cost>(&cost)) {
    ORCHMLLM_REQUIRE(lin->weight >= 1, orchmllm::invalid_argument_error, "LinearCost weight is ",
                     lin->weight, ", must be >= 1");
    return *lin;
  }
  return std::get<orchmllm::quadratic_cost>(cost).validated();
}

// The limits balance() takes, as a stage's constraints.
orchmllm::constraints to_limits(std::optional<i64> cap, std::optional<i64> cap_bytes, i64 min_items,
                                std::optional<i64> max_items) {
  orchmllm::constraints c;
  ORCHMLLM_REQUIRE(!(cap && cap_bytes), orchmllm::invalid_argument_error,
                   "give cap or cap_bytes, not both");
  if (cap) c.cap = orchmllm::capacity{orchmllm::capacity::measure::tokens, *cap};
  if (cap_bytes) c.cap = orchmllm::capacity{orchmllm::capacity::measure::bytes, *cap_bytes};
  c.min_items = min_items;
  c.max_items = max_items.value_or(std::numeric_limits<i64>::max());
  return c;
}

// A stage's balancer by name, with the gap tolerance balance() takes.
orchmllm::any_balancer to_balancer(const std::string& algorithm, double gap_tolerance) {
  orchmllm::any_balancer b = orchmllm::parse_balancer(algorithm);
  orchmllm::detail::set_gap_tolerance(b, gap_tolerance);
  return b;
}

// The declarations, and the row widths the routes are divided by (bytes -> rows).
struct py_declarations {
  orchmllm::stage_declarations decl;

  void add_encoder(const std::string& name, const text_or_cost& cost, const std::string& policy,
                   i64 pad_multiple, const std::string& algorithm, std::optional<i64> cap,
                   std::optional<i64> cap_bytes, i64 min_items, std::optional<i64> max_items,
                   const std::string& mapping, i64 input_row_bytes, i64 output_row_bytes,
                   std::optional<split_arg> split, double gap_tolerance, const micro_arg& micro) {
    orchmllm::encoder_stage e;
    e.name = name;
    e.cost = to_stage_cost(cost);
    e.policy = orchmllm::parse_padding_policy(policy, pad_multiple);
    e.limits = to_limits(cap, cap_bytes, min_items, max_items);
    e.balancer = to_balancer(algorithm, gap_tolerance);
    e.mapper = orchmllm::parse_mapper(mapping);
    ORCHMLLM_REQUIRE(input_row_bytes >= 1 && output_row_bytes >= 1,
                     orchmllm::invalid_argument_error, "stage '", name, "': row widths ",
                     input_row_bytes, " and ", output_row_bytes, " must be >= 1");
    e.input_row_bytes = input_row_bytes;
    e.output_row_bytes = output_row_bytes;
    if (split) {
      const auto& [min_piece, max_pieces, rounds, tolerance] = *split;
      // split_options holds an int: past it, refused here by name (the library checks the
      // rest, rounds >= 1, when the declarations are validated).
      ORCHMLLM_REQUIRE(
          rounds >= std::numeric_limits<int>::min() && rounds <= std::numeric_limits<int>::max(),
          orchmllm::invalid_argument_error, "stage '", name, "': rounds is ", rounds,
          ", must be in [1, ", std::numeric_limits<int>::max(), "]");
      e.split = orchmllm::split_options{.min_piece_segments = min_piece,
                                        .max_pieces = max_pieces,
                                        .rounds = static_cast<int>(rounds),
                                        .tolerance = tolerance};
    }
    e.micro_batches = to_stage_micro_batches(micro);
    decl.encoders.push_back(std::move(e));
  }

  void set_llm(const std::string& name, const text_or_cost& cost, const std::string& policy,
               i64 pad_multiple, const std::string& algorithm, std::optional<i64> cap,
               std::optional<i64> cap_bytes, i64 min_items, std::optional<i64> max_items,
               const std::string& mapping, i64 text_row_bytes, double gap_tolerance,
               const micro_arg& micro) {
    orchmllm::llm_stage l;
    l.name = name;
    l.cost = to_stage_cost(cost);
    l.policy = orchmllm::parse_padding_policy(policy, pad_multiple);
    l.limits = to_limits(cap, cap_bytes, min_items, max_items);
    l.balancer = to_balancer(algorithm, gap_tolerance);
    l.mapper = orchmllm::parse_mapper(mapping);
    ORCHMLLM_REQUIRE(text_row_bytes >= 1, orchmllm::invalid_argument_error, "stage '", name,
                     "': text row width ", text_row_bytes, " must be >= 1");
    l.text_row_bytes = text_row_bytes;
    l.micro_batches = to_stage_micro_batches(micro);
    decl.llm = std::move(l);
  }
};

// The step's global metadata, shared by the plans made from it.
struct py_metadata {
  std::shared_ptr<const orchmllm::step_metadata> meta;
};

// The most encoder stages (modalities) a step's metadata takes: every modality keeps D + 1
// offsets, so an absurd count would ask for gigabytes before any check could name it.
constexpr i64 max_encoders = 1024;

// Every rank's local batch as flat arrays: rank r's samples are the next sample_counts[r]
// entries of text_tokens, its sub-items the next sub_counts[r] entries of the six sub-item
// arrays (parent: the sample's index on its rank).
py_metadata make_metadata(const i64_in& sample_counts, const i64_in& text_tokens,
                          const i64_in& sub_counts, const i64_in& modality, const i64_in& parent,
                          const i64_in& encoder_length, const i64_in& input_rows,
                          const i64_in& llm_tokens, const i64_in& segments, i64 encoders,
                          const i64_in& loss_counts, const i64_in& loss_tokens) {
  ORCHMLLM_REQUIRE(encoders >= 0 && encoders <= max_encoders, orchmllm::invalid_argument_error,
                   "num_encoders is ", encoders, ", must be in [0, ", max_encoders, "]");
  nb::gil_scoped_release unlocked;
  const std::size_t d = sample_counts.shape(0);
  ORCHMLLM_REQUIRE(sub_counts.shape(0) == d && loss_counts.shape(0) == d,
                   orchmllm::invalid_argument_error, "sub_counts has ", sub_counts.shape(0),
                   " entries and loss_counts ", loss_counts.shape(0), " for ", d, " ranks");
  std::vector<orchmllm::local_batch> batches(d);
  std::size_t s = 0, u = 0, l = 0;
  for (std::size_t r = 0; r < d; ++r) {
    const i64 ns = sample_counts.data()[r], nu = sub_counts.data()[r];
    ORCHMLLM_REQUIRE(ns >= 0 && nu >= 0 &&
                         s + static_cast<std::size_t>(ns) <= text_tokens.shape(0) &&
                         u + static_cast<std::size_t>(nu) <= modality.shape(0),
                     orchmllm::invalid_argument_error, "rank ", r, ": ", ns, " samples and ", nu,
                     " sub-items do not fit the arrays");
    auto& b = batches[r];
    b.text_tokens.assign(text_tokens.data() + s, text_tokens.data() + s + ns);
    // A rank's loss tokens: none (its text tokens) or one per sample (make_step_metadata
    // names a rank with another count).
    const i64 nl = loss_counts.data()[r];
    ORCHMLLM_REQUIRE(nl >= 0 && l + static_cast<std::size_t>(nl) <= loss_tokens.shape(0),
                     orchmllm::invalid_argument_error, "rank ", r, ": ", nl,
                     " loss-token counts do not fit the array");
    b.loss_tokens.assign(loss_tokens.data() + l, loss_tokens.data() + l + nl);
    l += static_cast<std::size_t>(nl);
    b.sub_items.resize(static_cast<std::size_t>(nu));
    for (i64 i = 0; i < nu; ++i, ++u) {
      const i64 m = modality.data()[u];
      ORCHMLLM_REQUIRE(m >= 0 && m < encoders, orchmllm::invalid_argument_error, "rank ", r,
                       ": sub-item ", i, " has modality ", m, " but ", encoders,
                       " encoder stages are declared");
      b.sub_items[static_cast<std::size_t>(i)] =
          orchmllm::sub_item{.modality = static_cast<std::int32_t>(m),
                             .parent = parent.data()[u],
                             .encoder_length = encoder_length.data()[u],
                             .input_rows = input_rows.data()[u],
                             .llm_tokens = llm_tokens.data()[u],
                             .segments = segments.data()[u]};
    }
    s += static_cast<std::size_t>(ns);
  }
  ORCHMLLM_REQUIRE(s == text_tokens.shape(0) && u == modality.shape(0) && l == loss_tokens.shape(0),
                   orchmllm::invalid_argument_error, "the counts cover ", s, " samples, ", u,
                   " sub-items and ", l, " loss-token counts, the arrays hold ",
                   text_tokens.shape(0), ", ", modality.shape(0), " and ", loss_tokens.shape(0));
  return {std::make_shared<const orchmllm::step_metadata>(
      orchmllm::make_step_metadata(batches, static_cast<int>(encoders)))};
}

// The arrays of one modality of the metadata.
nb::dict modality_dict(const py_metadata& m, int k) {
  ORCHMLLM_REQUIRE(k >= 0 && static_cast<std::size_t>(k) < m.meta->modalities.size(),
                   orchmllm::invalid_argument_error, "modality ", k, " outside [0, ",
                   m.meta->modalities.size(), ")");
  const auto& mod = m.meta->modalities[static_cast<std::size_t>(k)];
  nb::dict out;
  out["offsets"] = to_numpy(std::vector<i64>(mod.offsets));
  out["parent"] = to_numpy(std::vector<i64>(mod.parent));
  out["encoder_length"] = to_numpy(std::vector<i64>(mod.encoder_length));
  out["input_rows"] = to_numpy(std::vector<i64>(mod.input_rows));
  out["llm_tokens"] = to_numpy(std::vector<i64>(mod.llm_tokens));
  std::vector<i64> seg(mod.parent.size());
  for (std::size_t i = 0; i < seg.size(); ++i) seg[i] = mod.segments_of(static_cast<i64>(i));
  out["segments"] = to_numpy(std::move(seg));
  return out;
}

// One rearrangement of a step, as arrays.
struct py_rearrangement {
  orchmllm::rearrangement plan;
};

// What an LLM rank assembles its sequences from (step_plan::llm_view) and what an encoder
// rank runs (step_plan::encoder_view), as arrays.
struct py_llm_view {
  np_array<i64> samples, sub_item_offsets, sub_item_modality, sub_item_index;
  std::vector<np_array<i64>> item_offsets, row_offsets;
};
struct py_encoder_view {
  np_array<i64> sub_item, first_segment, last_segment, segments, input_rows, llm_tokens;
};

// A planned step.
struct py_step {
  std::shared_ptr<const orchmllm::step_metadata> meta;
  orchmllm::stage_declarations decl;
  orchmllm::topology topo;
  orchmllm::step_plan step;
  i64 routes_rank = -1;
  std::vector<std::shared_ptr<cost_table>> tables;  // the callable costs' values (kept alive)

  [[nodiscard]] int encoders() const { return static_cast<int>(step.encoders.size()); }

  void check_rank(i64 r) const {
    ORCHMLLM_REQUIRE(r >= 0 && r < topo.num_ranks(), orchmllm::invalid_argument_error, "rank ", r,
                     " outside [0, ", topo.num_ranks(), ")");
  }
  void check_encoder(i64 k) const {
    ORCHMLLM_REQUIRE(k >= 0 && k < encoders(), orchmllm::invalid_argument_error, "encoder stage ",
                     k, " outside [0, ", encoders(), ")");
  }
};

enum class transfer { encoder_input, text, encoder_output, encoder_gradient };

transfer parse_transfer(const std::string& name) {
  if (name == "encoder_input") return transfer::encoder_input;
  if (name == "text") return transfer::text;
  if (name == "encoder_output") return transfer::encoder_output;
  if (name == "encoder_gradient") return transfer::encoder_gradient;
  orchmllm::detail::raise<orchmllm::invalid_argument_error>(
      orchmllm::detail::concat("transfer ", orchmllm::detail::quote_text(name),
                               " (expected encoder_input, text, encoder_output or "
                               "encoder_gradient)"));
}

// The rearrangement a transfer moves along.
const orchmllm::rearrangement& transfer_plan(const py_step& s, transfer t, int k) {
  switch (t) {
    case transfer::encoder_input:
      return s.step.encoders[static_cast<std::size_t>(k)].input;
    case transfer::text:
      return s.step.llm;
    case transfer::encoder_output:
      return s.step.encoders[static_cast<std::size_t>(k)].output;
    case transfer::encoder_gradient:
      return s.step.encoders[static_cast<std::size_t>(k)].gradient;
  }
  return s.step.llm;
}

std::unique_ptr<py_step> plan_step(const py_declarations& d, const py_metadata& m,
                                   i64 gpus_per_node, std::optional<i64_in> node_of_rank,
                                   std::optional<i64> rank, bool parallel_stages,
                                   const std::vector<std::shared_ptr<cost_table>>& tables) {
  auto out = std::make_unique<py_step>();
  out->meta = m.meta;
  out->decl = d.decl;
  // Stages whose cost is a Python callable: its values on this step's lengths (step.py
  // evaluated it), looked up as balance() does; K + 1 entries (encoders, then the LLM).
  ORCHMLLM_REQUIRE(tables.empty() || tables.size() == d.decl.encoders.size() + 1,
                   orchmllm::invalid_argument_error, tables.size(), " cost tables for ",
                   d.decl.encoders.size() + 1, " stages");
  for (std::size_t i = 0; i < tables.size(); ++i) {
    if (!tables[i]) continue;
    auto& cost = i < d.decl.encoders.size() ? out->decl.encoders[i].cost : out->decl.llm.cost;
    cost = double_cost{{}, tables[i].get()};
  }
  out->tables = tables;
  {
    nb::gil_scoped_release unlocked;
    ORCHMLLM_REQUIRE(gpus_per_node >= 0, orchmllm::invalid_argument_error, "gpus_per_node is ",
                     gpus_per_node, ", must be >= 0 (0: every rank on one node)");
    ORCHMLLM_REQUIRE(!(node_of_rank && gpus_per_node > 0), orchmllm::invalid_argument_error,
                     "give gpus_per_node or node_of_rank, not both");
    out->topo = node_of_rank
                    ? orchmllm::topology(std::vector<orchmllm::rank_t>(
                          node_of_rank->data(), node_of_rank->data() + node_of_rank->shape(0)))
                    : orchmllm::topology::uniform(m.meta->ranks,
                                                  static_cast<orchmllm::rank_t>(gpus_per_node));
    orchmllm::plan_options options;
    options.parallel_stages = parallel_stages;
    options.sched = orchmllm::schedule::direct;  // one all_to_all_single per transfer
    options.routes_for = static_cast<orchmllm::rank_t>(rank.value_or(-1));
    ORCHMLLM_REQUIRE(!rank || (*rank >= 0 && *rank < m.meta->ranks),
                     orchmllm::invalid_argument_error, "rank is ", rank.value_or(-1),
                     ", outside [0, ", m.meta->ranks, ")");
    out->step = orchmllm::plan_step(out->decl, *out->meta, out->topo, options);
    out->routes_rank = rank.value_or(-1);
  }
  return out;
}

all_to_all_arrays step_all_to_all(const py_step& s, const std::string& name, i64 rank,
                                  i64 encoder) {
  const transfer t = parse_transfer(name);
  s.check_rank(rank);
  if (t != transfer::text) s.check_encoder(encoder);
  const int k = static_cast<int>(encoder);
  const int kc = s.encoders();
  route_vectors v;
  std::vector<i64> items;
  {
    nb::gil_scoped_release unlocked;
    const auto r = static_cast<orchmllm::rank_t>(rank);
    orchmllm::step_routes built;
    if (rank != s.routes_rank)  // another rank's: as plan_step builds them for routes_for
      built =
          orchmllm::build_routes(s.step, s.decl, *s.meta, s.topo, r, orchmllm::schedule::direct);
    const auto& all = rank == s.routes_rank ? s.step.routes : built;
    const auto index = static_cast<std::size_t>(t == transfer::encoder_input    ? k
                                                : t == transfer::text           ? kc
                                                : t == transfer::encoder_output ? kc + 1 + k
                                                                                : 2 * kc + 1 + k);
    const i64 width = t == transfer::text ? s.decl.llm.text_row_bytes
                      : t == transfer::encoder_input
                          ? s.decl.encoders[static_cast<std::size_t>(k)].input_row_bytes
                          : s.decl.encoders[static_cast<std::size_t>(k)].output_row_bytes;
    v = route_rows(all.all[index], width);
    items = output_items(transfer_plan(s, t, k), r);
  }
  return to_python(std::move(v), std::move(items));
}

py_llm_view llm_view(const py_step& s, i64 rank) {
  s.check_rank(rank);
  orchmllm::llm_rank_view v;
  {
    nb::gil_scoped_release unlocked;
    v = s.step.llm_view(*s.meta, static_cast<orchmllm::rank_t>(rank));
  }
  py_llm_view out;
  std::vector<i64> modality, index;
  modality.reserve(v.sub_items.size());
  index.reserve(v.sub_items.size());
  for (const auto& [m, j] : v.sub_items) {
    modality.push_back(m);
    index.push_back(j);
  }
  out.samples = to_numpy(std::move(v.samples));
  out.sub_item_offsets = to_numpy(std::move(v.sub_item_offsets));
  out.sub_item_modality = to_numpy(std::move(modality));
  out.sub_item_index = to_numpy(std::move(index));
  for (auto& o : v.item_offsets) out.item_offsets.push_back(to_numpy(std::move(o)));
  for (auto& o : v.row_offsets) out.row_offsets.push_back(to_numpy(std::move(o)));
  return out;
}

py_encoder_view encoder_view(const py_step& s, i64 k, i64 rank) {
  s.check_encoder(k);
  s.check_rank(rank);
  const auto units =
      s.step.encoder_view(*s.meta, static_cast<int>(k), static_cast<orchmllm::rank_t>(rank));
  std::vector<i64> sub(units.size()), first(units.size()), last(units.size()), segs(units.size()),
      in(units.size()), tok(units.size());
  for (std::size_t i = 0; i < units.size(); ++i) {
    sub[i] = units[i].sub_item;
    first[i] = units[i].first_segment;
    last[i] = units[i].last_segment;
    segs[i] = units[i].segments;
    in[i] = units[i].input_rows;
    tok[i] = units[i].llm_tokens;
  }
  return {to_numpy(std::move(sub)),  to_numpy(std::move(first)), to_numpy(std::move(last)),
          to_numpy(std::move(segs)), to_numpy(std::move(in)),    to_numpy(std::move(tok))};
}

// Stage i of the step as stages() lists them: the K encoders, then the LLM.
const orchmllm::stage_micro_batches& micro_batches_of(const py_step& s, i64 stage) {
  ORCHMLLM_REQUIRE(stage >= 0 && stage <= s.encoders(), orchmllm::invalid_argument_error, "stage ",
                   stage, " outside [0, ", s.encoders(), "] (K encoders, then the LLM)");
  return s.step.micro_batches[static_cast<std::size_t>(stage)];
}

i64 stage_micro_batch_count(const py_step& s, i64 stage) {
  return micro_batches_of(s, stage).count;
}

std::pair<i64, i64> stage_micro_batch(const py_step& s, i64 stage, i64 rank, i64 m) {
  const auto& cells = micro_batches_of(s, stage);
  s.check_rank(rank);
  return cells.slots(static_cast<orchmllm::rank_t>(rank), m);
}

i64 step_loss_tokens_of(const py_step& s, i64 rank, i64 m) {
  s.check_rank(rank);
  return s.step.loss_tokens_of(static_cast<orchmllm::rank_t>(rank), m);
}

double step_loss_scale(const py_step& s, const std::string& reduction) {
  if (reduction == "mean") return s.step.loss_scale(orchmllm::gradient_reduction::mean);
  if (reduction == "sum") return s.step.loss_scale(orchmllm::gradient_reduction::sum);
  orchmllm::detail::raise<orchmllm::invalid_argument_error>(orchmllm::detail::concat(
      "reduction ", orchmllm::detail::quote_text(reduction), " (expected mean or sum)"));
}

nb::list stage_reports(const py_step& s) {
  nb::list out;
  for (const auto& r : s.step.stages) {
    nb::dict d;
    d["name"] = r.name;
    d["algorithm"] = std::string(r.used);
    d["makespan_before"] = r.makespan_before;
    d["makespan"] = r.makespan_after;
    d["lower_bound"] = r.lower_bound;
    d["imbalance_before"] = r.imbalance_before;
    d["imbalance_after"] = r.imbalance_after;
    d["max_tokens_before"] = r.max_tokens_before;
    d["max_tokens"] = r.max_tokens_after;
    d["max_bytes_before"] = r.max_bytes_before;
    d["max_bytes"] = r.max_bytes_after;
    d["moved_bytes"] = r.moved_bytes;
    d["inter_node_bytes"] = r.inter_node_bytes;
    d["balance_seconds"] = r.balance_seconds;
    d["map_seconds"] = r.map_seconds;
    d["micro_batches"] = r.micro_batches;
    d["objective_before"] = r.objective_before;
    d["objective"] = r.objective_after;
    d["objective_lower_bound"] = r.objective_lower_bound;
    out.append(d);
  }
  return out;
}

py_rearrangement encoder_plan(const py_step& s, i64 k, const std::string& kind) {
  s.check_encoder(k);
  const auto& e = s.step.encoders[static_cast<std::size_t>(k)];
  if (kind == "input") return {e.input};
  if (kind == "lifted") return {e.lifted};
  if (kind == "output") return {e.output};
  if (kind == "gradient") return {e.gradient};
  orchmllm::detail::raise<orchmllm::invalid_argument_error>(
      orchmllm::detail::concat("plan kind ", orchmllm::detail::quote_text(kind),
                               " (expected input, lifted, output or gradient)"));
}

template <class Span>
np_array<i64> span_array(Span s) {
  return to_numpy(std::vector<i64>(s.begin(), s.end()));
}

}  // namespace

void bind_step(nb::module_& m) {
  m.def(
      "_fingerprint_probe_lengths",
      [] {
        const auto& p = orchmllm::detail::fingerprint_probe_lengths;
        return std::vector<i64>(p.begin(), p.end());
      },
      "The lengths at which the declarations' fingerprint probes a cost (for callable costs).");
  nb::class_<py_declarations>(m, "_Declarations")
      .def(nb::init<>())
      .def("add_encoder", &py_declarations::add_encoder, "name"_a, "cost"_a, "policy"_a,
           "pad_multiple"_a, "algorithm"_a, "cap"_a.none(), "cap_bytes"_a.none(), "min_items"_a,
           "max_items"_a.none(), "mapping"_a, "input_row_bytes"_a, "output_row_bytes"_a,
           "split"_a.none(), "gap_tolerance"_a, "micro"_a)
      .def("set_llm", &py_declarations::set_llm, "name"_a, "cost"_a, "policy"_a, "pad_multiple"_a,
           "algorithm"_a, "cap"_a.none(), "cap_bytes"_a.none(), "min_items"_a, "max_items"_a.none(),
           "mapping"_a, "text_row_bytes"_a, "gap_tolerance"_a, "micro"_a)
      .def("validate", [](const py_declarations& d) { d.decl.validate(); })
      .def_prop_ro("fingerprint",
                   [](const py_declarations& d) { return orchmllm::fingerprint(d.decl); });

  nb::class_<py_metadata>(
      m, "StepMetadata",
      "The global view of one step (the C++ step_metadata), identical on every rank: every\n"
      "rank's samples and sub-items. Build it with orchmllm.make_step_metadata (or\n"
      "orchmllm.torch.gather_step_metadata). Global sample g = sample_offsets[r] + local index;\n"
      "a modality's sub-items get global ids rank-major, in local order.")
      .def_prop_ro(
          "num_ranks", [](const py_metadata& m) { return static_cast<i64>(m.meta->ranks); }, "D.")
      .def_prop_ro(
          "num_samples", [](const py_metadata& m) { return m.meta->num_samples(); },
          "Samples of all ranks.")
      .def_prop_ro(
          "num_encoders",
          [](const py_metadata& m) { return static_cast<i64>(m.meta->modalities.size()); },
          "K, the modalities.")
      .def_prop_ro(
          "sample_offsets",
          [](const py_metadata& m) { return to_numpy(std::vector<i64>(m.meta->sample_offsets)); },
          nb::rv_policy::reference, "int64[D+1]: CSR offsets of the ranks' samples.")
      .def_prop_ro(
          "text_tokens",
          [](const py_metadata& m) { return to_numpy(std::vector<i64>(m.meta->text_tokens)); },
          nb::rv_policy::reference, "int64[samples]: every sample's own text tokens.")
      .def_prop_ro(
          "loss_tokens",
          [](const py_metadata& m) {
            std::vector<i64> out(static_cast<std::size_t>(m.meta->num_samples()));
            for (std::size_t g = 0; g < out.size(); ++g)
              out[g] = m.meta->loss_tokens_of(static_cast<i64>(g));
            return to_numpy(std::move(out));
          },
          nb::rv_policy::reference,
          "int64[samples]: every sample's loss tokens (LocalBatch.loss_tokens, else its text\n"
          "tokens).")
      .def(
          "sequence_lengths",
          [](const py_metadata& m) {
            std::vector<i64> out(static_cast<std::size_t>(m.meta->num_samples()));
            for (std::size_t g = 0; g < out.size(); ++g)
              out[g] = m.meta->sequence_length(static_cast<i64>(g));
            return to_numpy(std::move(out));
          },
          "int64[samples]: every sample's LLM sequence length (text + its sub-items' LLM\n"
          "tokens). O(samples + sub-items).")
      .def("modality", &modality_dict, "k"_a,
           nb::sig("def modality(self, k: int) -> dict[str, numpy.typing.NDArray[numpy.int64]]"),
           "Modality k's sub-items as int64 arrays: offsets (D+1, per rank), parent (global\n"
           "sample id), encoder_length, input_rows, llm_tokens, segments. Raises\n"
           "InvalidArgumentError for k outside [0, K).");

  m.def("_make_step_metadata", &make_metadata, "sample_counts"_a, "text_tokens"_a, "sub_counts"_a,
        "modality"_a, "parent"_a, "encoder_length"_a, "input_rows"_a, "llm_tokens"_a, "segments"_a,
        "encoders"_a, "loss_counts"_a, "loss_tokens"_a);

  nb::class_<py_rearrangement>(
      m, "Rearrangement",
      "One plan of a step (a stage's plan, a lift, a composed or gradient route): where every\n"
      "item of its source layout goes. Arrays are int64 numpy copies.")
      .def_prop_ro(
          "num_items", [](const py_rearrangement& r) { return r.plan.num_items(); },
          "n, the items it moves.")
      .def_prop_ro(
          "num_ranks",
          [](const py_rearrangement& r) { return static_cast<i64>(r.plan.num_src_ranks()); }, "D.")
      .def_prop_ro(
          "dst_rank", [](const py_rearrangement& r) { return span_array(r.plan.dst_ranks()); },
          nb::rv_policy::reference,
          "int64[n]: destination rank of every source item (global id order).")
      .def_prop_ro(
          "dst_slot", [](const py_rearrangement& r) { return span_array(r.plan.dst_slots()); },
          nb::rv_policy::reference, "int64[n]: its slot on that rank.")
      .def_prop_ro(
          "src_offsets", [](const py_rearrangement& r) { return span_array(r.plan.src_offsets()); },
          nb::rv_policy::reference, "int64[D+1]: CSR offsets of the source layout.")
      .def_prop_ro(
          "dst_offsets", [](const py_rearrangement& r) { return span_array(r.plan.dst_offsets()); },
          nb::rv_policy::reference, "int64[D+1]: CSR offsets of the destination layout.")
      .def_prop_ro(
          "sources", [](const py_rearrangement& r) { return span_array(r.plan.sources()); },
          nb::rv_policy::reference,
          "int64[n]: the source global id of every destination global id.");

  nb::class_<py_llm_view>(
      m, "LLMView",
      "What an LLM rank receives (step_plan::llm_view): samples (global ids, slot order);\n"
      "per modality k, item_offsets[k] (received items of slot s: [item_offsets[k][s],\n"
      "item_offsets[k][s+1])) and row_offsets[k] (rows of received item j: [row_offsets[k][j],\n"
      "row_offsets[k][j+1]) of the modality-k output payload); per slot s its sub-items in their\n"
      "original order, entries [sub_item_offsets[s], sub_item_offsets[s+1]) of\n"
      "sub_item_modality / sub_item_index (modality k, received index j).")
      .def_prop_ro(
          "samples", [](const py_llm_view& v) { return v.samples; }, nb::rv_policy::reference,
          "int64: global sample id of every LLM slot, in slot order.")
      .def_prop_ro(
          "item_offsets",
          [](const py_llm_view& v) {
            nb::list l;
            for (const auto& a : v.item_offsets) l.append(a);
            return l;
          },
          nb::sig("def item_offsets(self) -> list[numpy.typing.NDArray[numpy.int64]]"),
          "Per modality k, int64[slots+1]: received items of slot s are [item_offsets[k][s], "
          "item_offsets[k][s+1]).")
      .def_prop_ro(
          "row_offsets",
          [](const py_llm_view& v) {
            nb::list l;
            for (const auto& a : v.row_offsets) l.append(a);
            return l;
          },
          nb::sig("def row_offsets(self) -> list[numpy.typing.NDArray[numpy.int64]]"),
          "Per modality k, int64[items+1]: rows of received item j in the modality-k payload.")
      .def_prop_ro(
          "sub_item_offsets", [](const py_llm_view& v) { return v.sub_item_offsets; },
          nb::rv_policy::reference,
          "int64[slots+1]: slot s's sub-items are entries [sub_item_offsets[s], "
          "sub_item_offsets[s+1]).")
      .def_prop_ro(
          "sub_item_modality", [](const py_llm_view& v) { return v.sub_item_modality; },
          nb::rv_policy::reference, "int64: modality k of every entry.")
      .def_prop_ro(
          "sub_item_index", [](const py_llm_view& v) { return v.sub_item_index; },
          nb::rv_policy::reference,
          "int64: received index j (in modality k's payload) of every entry.");

  nb::class_<py_encoder_view>(
      m, "EncoderView",
      "What an encoder rank runs for one stage (step_plan::encoder_view), one entry per unit\n"
      "in the order its input payload arrives: sub_item (global id in the modality),\n"
      "first_segment / last_segment of its segments (0 and S for a whole sub-item), input_rows,\n"
      "llm_tokens (its output rows, in that order in the payload sent along encoder_output).")
      .def_prop_ro(
          "sub_item", [](const py_encoder_view& v) { return v.sub_item; }, nb::rv_policy::reference,
          "int64: every unit's sub-item (global id within the modality).")
      .def_prop_ro(
          "first_segment", [](const py_encoder_view& v) { return v.first_segment; },
          nb::rv_policy::reference, "int64: first segment of every unit (0 for a whole sub-item).")
      .def_prop_ro(
          "last_segment", [](const py_encoder_view& v) { return v.last_segment; },
          nb::rv_policy::reference, "int64: end of every unit's segments (S for a whole sub-item).")
      .def_prop_ro(
          "segments", [](const py_encoder_view& v) { return v.segments; }, nb::rv_policy::reference,
          "int64: S of every unit's sub-item.")
      .def_prop_ro(
          "input_rows", [](const py_encoder_view& v) { return v.input_rows; },
          nb::rv_policy::reference,
          "int64: input rows of every unit (its rows in the received payload).")
      .def_prop_ro(
          "llm_tokens", [](const py_encoder_view& v) { return v.llm_tokens; },
          nb::rv_policy::reference, "int64: output rows of every unit.");

  nb::class_<py_step>(
      m, "StepPlan",
      "Every plan of one training step (orchmllm.plan_step), identical on every rank.")
      .def_prop_ro(
          "num_ranks", [](const py_step& s) { return static_cast<i64>(s.topo.num_ranks()); }, "D.")
      .def_prop_ro(
          "num_encoders", [](const py_step& s) { return static_cast<i64>(s.encoders()); }, "K.")
      .def_prop_ro(
          "routes_rank", [](const py_step& s) { return s.routes_rank; },
          "The rank whose routes plan_step built (-1: none; others are built on demand).")
      .def_prop_ro(
          "alltoalls_per_step", [](const py_step& s) { return s.step.alltoalls_per_step(); },
          "3K + 1: K encoder inputs, the text, K encoder outputs, K output gradients.")
      .def_prop_ro(
          "plan_seconds", [](const py_step& s) { return s.step.plan_seconds; },
          "Wall time of the library's plan_step (a report; not deterministic).")
      .def("stages", &stage_reports, nb::sig("def stages(self) -> list[dict[str, object]]"),
           "Per stage (K encoders, then the LLM) a dict: name, algorithm, makespan_before,\n"
           "makespan, lower_bound, imbalance_before, imbalance_after (max / mean stage cost),\n"
           "max_tokens(_before), max_bytes(_before), moved_bytes, inter_node_bytes, the\n"
           "wall times balance_seconds, map_seconds, and with micro-batches micro_batches (M,\n"
           "else 0), objective_before, objective, objective_lower_bound (the step's cost under\n"
           "the stage's sync model, as sampled and planned, and its bound). O(K).")
      .def(
          "llm_plan", [](const py_step& s) { return py_rearrangement{s.step.llm}; },
          "Π_M: origin samples -> LLM ranks.")
      .def("encoder_plan", &encoder_plan, "k"_a, "kind"_a = "input",
           "Encoder stage k's plans over its units (sub-items, or pieces when it splits):\n"
           "'input' (Π_E_k, origin -> encoder ranks), 'lifted' (L_k, origin -> the LLM rank of\n"
           "the parent sample), 'output' (L_k ∘ Π_E_k⁻¹, encoder ranks -> LLM ranks) or\n"
           "'gradient' (its inverse). Raises InvalidArgumentError for a bad k or kind.")
      .def("all_to_all", &step_all_to_all, "transfer"_a, "rank"_a, "k"_a = 0,
           "What `rank` passes to all_to_all_single for one transfer of the step, in rows:\n"
           "transfer 'encoder_input' (encoder k's input rows, origin -> Π_E_k), 'text' (text\n"
           "rows, origin -> Π_M), 'encoder_output' (encoder k's output rows, Π_E_k -> Π_M, the\n"
           "composed route) or 'encoder_gradient' (their gradients, Π_M -> Π_E_k). Built from\n"
           "the library's direct route (the stage's row widths divided out); plan_step built\n"
           "them for routes_rank, other ranks' are built on demand (O(n log n)), the same.\n"
           "output_items: the transfer plan's destination items on `rank` (units of stage k;\n"
           "samples for text). The GIL is released. Raises InvalidArgumentError for an unknown\n"
           "transfer, k or rank.")
      .def("micro_batches", &stage_micro_batch_count, "stage"_a,
           "M of stage `stage` (0..K-1: the encoders, K: the LLM, as stages() lists them): the\n"
           "micro-batches every rank runs, 0 when the stage declares none. Raises\n"
           "InvalidArgumentError for a stage outside [0, K].")
      .def("micro_batch", &stage_micro_batch, "stage"_a, "rank"_a, "m"_a,
           nb::sig("def micro_batch(self, stage: int, rank: int, m: int) -> tuple[int, int]"),
           "Micro-batch m of `rank` in stage `stage` as its slots [first, last): positions in\n"
           "what the rank receives for the stage (the LLM: llm_view.samples; encoder k:\n"
           "encoder_view(k, rank)'s units). O(1). Raises InvalidArgumentError out of range or\n"
           "when the stage declares no micro-batches.")
      .def_prop_ro(
          "loss_tokens", [](const py_step& s) { return s.step.loss_tokens; },
          "N, the loss tokens of the whole step (StepMetadata.loss_tokens summed).")
      .def("loss_tokens_of", &step_loss_tokens_of, "rank"_a, "m"_a = 0,
           "The loss tokens of micro-batch m of LLM rank `rank` (m = 0 without LLM\n"
           "micro-batches). O(1). Raises InvalidArgumentError out of range.")
      .def("loss_scale", &step_loss_scale, "reduction"_a = "mean",
           "The factor every rank multiplies the sum of its token losses by (each micro-batch's\n"
           "before its backward) so that, after the gradient all-reduce ('mean': DDP and FSDP's\n"
           "default, the sum over ranks divided by D; 'sum'), the gradients are those of the\n"
           "step's per-token mean: D / N for 'mean', 1 / N for 'sum', 0 when N = 0. The same\n"
           "balanced or not. Raises InvalidArgumentError for another reduction.")
      .def("llm_view", &llm_view, "rank"_a,
           "The LLMView of `rank` (where its samples' sub-item outputs are in the received\n"
           "payloads). O(its samples and sub-items + D). Raises InvalidArgumentError for a bad\n"
           "rank.")
      .def("encoder_view", &encoder_view, "k"_a, "rank"_a,
           "The EncoderView of encoder stage k on `rank`. O(its units). Raises\n"
           "InvalidArgumentError for a bad k or rank.");

  m.def("_plan_step", &plan_step, "decl"_a, "meta"_a, "gpus_per_node"_a, "node_of_rank"_a.none(),
        "rank"_a.none(), "parallel_stages"_a, "tables"_a);
}

}  // namespace orchmllm_py
