// The C++ reference for python/tests/test_step_reference.py: reads a step (declarations, every
// rank's local batch, the topology, a rank) from stdin, calls orchmllm::plan_step with that
// rank's routes (direct schedule) exactly as a C++ trainer would, and prints every plan and
// the routes' split sizes in bytes, one line each, for the test to compare with
// orchmllm.plan_step from Python.
//
// Input (whitespace-separated): K D G ROUTES_RANK; K encoder lines "name cost policy pad
// algorithm mapping in_bytes out_bytes split(0|1)"; an LLM line "name cost policy pad algorithm
// mapping text_bytes"; per rank "ns nu", ns text token counts, nu sub-items of "modality parent
// encoder_length input_rows llm_tokens segments".
// Output lines: "<plan> dst_rank ..." and "<plan> dst_slot ..." for llm, input k, lifted k,
// output k, gradient k; "route i send ..." / "route i recv ..." for the 3K + 1 routes.

#include <cstdint>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

#include "orchmllm/core/text_forms.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"

namespace {

orchmllm::stage_cost cost_of(const std::string& text) {
  const auto parsed = orchmllm::parse_cost_model(text);
  if (const auto* q = std::get_if<orchmllm::quadratic_cost>(&parsed)) return *q;
  return std::get<orchmllm::linear_cost>(parsed);
}

template <class T>
void print(const std::string& key, const T& values) {
  std::cout << key;
  for (const auto v : values) std::cout << ' ' << v;
  std::cout << '\n';
}

void print_plan(const std::string& name, const orchmllm::rearrangement& p) {
  print(name + " dst_rank", p.dst_ranks());
  print(name + " dst_slot", p.dst_slots());
}

}  // namespace

int main() {
  int k_count = 0, d = 0, g = 0, routes_rank = 0;
  std::cin >> k_count >> d >> g >> routes_rank;
  orchmllm::stage_declarations decl;
  for (int k = 0; k < k_count; ++k) {
    orchmllm::encoder_stage e;
    std::string cost, policy, algorithm, mapping;
    std::int64_t pad = 1;
    int split = 0;
    std::cin >> e.name >> cost >> policy >> pad >> algorithm >> mapping >> e.input_row_bytes >>
        e.output_row_bytes >> split;
    e.cost = cost_of(cost);
    e.policy = orchmllm::parse_padding_policy(policy, pad);
    e.balancer = orchmllm::parse_balancer(algorithm);
    e.mapper = orchmllm::parse_mapper(mapping);
    if (split) e.split = orchmllm::split_options{};
    decl.encoders.push_back(e);
  }
  {
    std::string cost, policy, algorithm, mapping;
    std::int64_t pad = 1;
    std::cin >> decl.llm.name >> cost >> policy >> pad >> algorithm >> mapping >>
        decl.llm.text_row_bytes;
    decl.llm.cost = cost_of(cost);
    decl.llm.policy = orchmllm::parse_padding_policy(policy, pad);
    decl.llm.balancer = orchmllm::parse_balancer(algorithm);
    decl.llm.mapper = orchmllm::parse_mapper(mapping);
  }
  std::vector<orchmllm::local_batch> batches(static_cast<std::size_t>(d));
  for (auto& b : batches) {
    std::size_t ns = 0, nu = 0;
    std::cin >> ns >> nu;
    b.text_tokens.resize(ns);
    for (auto& t : b.text_tokens) std::cin >> t;
    b.sub_items.resize(nu);
    for (auto& s : b.sub_items)
      std::cin >> s.modality >> s.parent >> s.encoder_length >> s.input_rows >> s.llm_tokens >>
          s.segments;
  }
  if (!std::cin) {
    std::cerr << "step_reference: malformed input\n";
    return 2;
  }
  const auto meta = orchmllm::make_step_metadata(batches, k_count);
  orchmllm::plan_options options;
  options.routes_for = routes_rank;
  options.sched = orchmllm::schedule::direct;
  const auto step = orchmllm::plan_step(decl, meta, orchmllm::topology::uniform(d, g), options);
  print_plan("llm", step.llm);
  for (int k = 0; k < k_count; ++k) {
    const auto& e = step.encoders[static_cast<std::size_t>(k)];
    const auto n = std::to_string(k);
    print_plan("input " + n, e.input);
    print_plan("lifted " + n, e.lifted);
    print_plan("output " + n, e.output);
    print_plan("gradient " + n, e.gradient);
  }
  for (std::size_t i = 0; i < step.routes.all.size(); ++i) {
    const auto& r = step.routes.all[i];
    std::vector<std::int64_t> send(static_cast<std::size_t>(d), 0), recv = send;
    if (r.hops().empty()) {
      send[static_cast<std::size_t>(routes_rank)] = r.input_bytes();
      recv = send;
    } else {
      send = r.hops()[0].send_counts;
      recv = r.hops()[0].recv_counts;
    }
    print("route " + std::to_string(i) + " send", send);
    print("route " + std::to_string(i) + " recv", recv);
  }
  return 0;
}
