#pragma once
// The out-of-class definitions of orchmllm::route, included by comm/route.hpp at its end:
// route::build and the per-rank program it derives from the paths (detail/comm/route_paths.hpp).
// A unit that uses the compiled library does not compile them (ORCHMLLM_USE_COMPILED): they are
// defined there once.

namespace orchmllm {

#if !ORCHMLLM_USE_COMPILED
ORCHMLLM_FUNC route route::build(const rearrangement& plan,
                                 std::span<const std::int64_t> item_bytes, const topology& topo,
                                 rank_t rank, schedule s) {
  detail::check_route_inputs(plan, item_bytes, topo);
  ORCHMLLM_REQUIRE(rank >= 0 && rank < topo.num_ranks(), invalid_argument_error, "rank ", rank,
                   " outside [0, ", topo.num_ranks(), ")");
  const auto src = detail::source_ranks(plan);
  const auto n = plan.num_items();
  route r;
  r.rank_ = rank;
  r.num_ranks_ = topo.num_ranks();
  r.predicted_[0] = r.predicted_[1] = std::numeric_limits<double>::quiet_NaN();
  detail::item_paths chosen;
  if (s == schedule::direct || s == schedule::automatic) {
    chosen = detail::drop_idle_hops(detail::direct_paths(plan, src), n);
    r.predicted_[0] = detail::predict_seconds(chosen, item_bytes, topo);
    r.used_ = schedule::direct;
  }
  // `automatic` skips the node-wise paths when a lower bound of their modelled time already
  // reaches the direct one's: they could not be chosen (a relative margin of 1e-6 covers the
  // rounding of both sums, whose relative error is below (n + d) · 2⁻⁵³). The bound's pass
  // ends at its first final term that reaches it: the same decision.
  const auto reaches = [&r](double bound) { return bound * (1 - 1e-6) >= r.predicted_[0]; };
  const bool pruned = s == schedule::automatic &&
                      reaches(detail::node_wise_lower_bound(plan, item_bytes, topo, src, reaches));
  if (s == schedule::node_wise || (s == schedule::automatic && !pruned)) {
    auto nw = detail::drop_idle_hops(detail::node_wise_paths(plan, item_bytes, topo, src), n);
    r.predicted_[1] = detail::predict_seconds(nw, item_bytes, topo);
    if (s == schedule::node_wise || r.predicted_[1] < r.predicted_[0]) {
      chosen = std::move(nw);
      r.used_ = schedule::node_wise;
    }
  }
  r.compile(plan, item_bytes, topo, chosen);
  detail::fnv f;
  f.mix(::orchmllm::fingerprint(plan));
  f.mix_all(item_bytes);
  for (const auto m : topo.node_map()) f.mix_signed(m);
  f.mix(static_cast<std::uint64_t>(r.used_));
  r.fingerprint_ = f.h;
  return r;
}

ORCHMLLM_FUNC void route::compile(const rearrangement& plan, std::span<const std::int64_t> bytes,
                                  const topology& topo, const detail::item_paths& p) {
  const auto n = plan.num_items();
  const auto d = static_cast<std::size_t>(num_ranks_);
  const rank_t me = rank_;
  const auto off = plan.src_offsets();
  const auto doff = plan.dst_offsets();
  const std::int64_t first_in = off[static_cast<std::size_t>(me)];
  const std::int64_t first_out = doff[static_cast<std::size_t>(me)];
  // Where each of this rank's items sits in its current buffer. With one hop (every one-hop
  // path set is the direct one: column 0 holds the sources, the last the destinations) or
  // none, only this rank's input items and the items it receives have one: they are indexed by
  // their place in the input range and by their destination id, and nothing of n entries is
  // built or scanned. With several hops, one entry per item.
  const bool one_hop = p.hops <= 1;
  std::vector<std::int64_t> pos, input_pos, recv_pos;
  if (one_hop) {
    input_pos.resize(static_cast<std::size_t>(off[static_cast<std::size_t>(me) + 1] - first_in));
    recv_pos.resize(static_cast<std::size_t>(doff[static_cast<std::size_t>(me) + 1] - first_out));
  } else {
    pos.assign(static_cast<std::size_t>(n), -1);
  }
  const auto held = [&](std::int64_t g, int k) -> std::int64_t& {  // g's position after hop k
    if (!one_hop) return pos[static_cast<std::size_t>(g)];
    return k == 0 ? input_pos[static_cast<std::size_t>(g - first_in)]
                  : recv_pos[static_cast<std::size_t>(plan.destination_id(g) - first_out)];
  };
  {
    std::int64_t at = 0;
    for (auto g = first_in; g < off[static_cast<std::size_t>(me) + 1]; ++g) {
      held(g, 0) = at;
      at += bytes[static_cast<std::size_t>(g)];
    }
    input_bytes_ = at;
  }
  std::vector<std::int64_t> out_items, in_items;
  for (int k = 1; k <= p.hops; ++k) {
    hop h;
    h.send_counts.assign(d, 0);
    h.recv_counts.assign(d, 0);
    out_items.clear();
    in_items.clear();
    if (one_hop) {  // this rank's input range, and the sources of its destination range
      for (auto g = first_in; g < off[static_cast<std::size_t>(me) + 1]; ++g)
        out_items.push_back(g);
      for (auto hid = first_out; hid < doff[static_cast<std::size_t>(me) + 1]; ++hid)
        in_items.push_back(plan.source_of(hid));
    } else {
      for (std::int64_t g = 0; g < n; ++g) {
        if (p.where(g, k - 1) == me) out_items.push_back(g);
        if (p.where(g, k) == me) in_items.push_back(g);
      }
    }
    auto by_peer = [&](int col) {
      return [&, col](std::int64_t a, std::int64_t b) {
        const rank_t pa = p.where(a, col), pb = p.where(b, col);
        if (pa != pb) return pa < pb;
        return plan.destination_id(a) < plan.destination_id(b);
      };
    };
    std::sort(out_items.begin(), out_items.end(), by_peer(k));
    std::sort(in_items.begin(), in_items.end(), by_peer(k - 1));
    std::int64_t at = 0;
    for (const auto g : out_items) {
      const auto b = bytes[static_cast<std::size_t>(g)];
      const rank_t to = p.where(g, k);
      h.pack.push(held(g, k - 1), at, b);
      h.send_counts[static_cast<std::size_t>(to)] += b;
      at += b;
      if (to == me)
        sent_.local_bytes += b;
      else
        (topo.same_node(me, to) ? sent_.intra_node_bytes : sent_.inter_node_bytes) += b;
    }
    h.send_bytes = at;
    h.pack_identity = h.pack.is_identity(at);
    at = 0;
    for (const auto g : in_items) {
      const auto b = bytes[static_cast<std::size_t>(g)];
      h.recv_counts[static_cast<std::size_t>(p.where(g, k - 1))] += b;
      held(g, k) = at;
      at += b;
    }
    h.recv_bytes = at;
    h.send_displs = exclusive_scan(h.send_counts);
    h.recv_displs = exclusive_scan(h.recv_counts);
    h.group = detail::hop_group_figures(p, bytes, k, num_ranks_);
    for (std::size_t q = 0; q < d; ++q) {
      if (static_cast<rank_t>(q) == me || h.send_counts[q] == 0) continue;
      ++(topo.same_node(me, static_cast<rank_t>(q)) ? sent_.intra_node_messages
                                                    : sent_.inter_node_messages);
    }
    hops_.push_back(std::move(h));
  }
  // No hops: nothing changes rank, so the whole input is a self copy (the unpack). Counting it
  // keeps `sent()` of a direct route equal to `plan_traffic` for every plan.
  if (hops_.empty()) sent_.local_bytes = input_bytes_;
  std::int64_t at = 0;
  for (auto hid = first_out; hid < doff[static_cast<std::size_t>(me) + 1]; ++hid) {
    const auto g = static_cast<std::size_t>(plan.source_of(hid));
    unpack_.push(held(static_cast<std::int64_t>(g), p.hops), at, bytes[g]);
    output_item_bytes_.push_back(bytes[g]);
    at += bytes[g];
  }
  output_bytes_ = at;
  unpack_identity_ = !hops_.empty() && unpack_.is_identity(at);
}
#endif

}  // namespace orchmllm
