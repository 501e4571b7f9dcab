#pragma once
// The reusable conformance suite of the `orchmllm::communicator` concept
// (comm/communicator.hpp). Every backend test instantiates it: the local backend on threads,
// MPI under mpirun, NCCL on a GPU (with a device `Staging`).
//
//   check_communicator_conformance(comm);             // host payload memory
//   check_communicator_conformance(comm, staging);    // payload buffers via `staging`
//
// It is a collective: every rank of the group calls it. It uses no doctest macros (it runs on
// worker threads and MPI ranks). Each case ends with a verdict exchange: all ranks all_gather a
// one-byte pass/fail flag, then share the detail of the lowest failing rank, and every rank
// throws the same `std::runtime_error("conformance: <case>: rank R: <detail>")`. So a failure
// on one rank never leaves the others waiting in a later collective.
//
// Content is derived from (tag, source, destination, byte index) through a fixed hash, so every
// received byte is checked; gaps between blocks hold canary bytes that must stay untouched.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::test {

// ---------------------------------------------------------------------------------------------
// Payload staging.

/// Staging for host payload memory: `alloc`/`free` with new[]/delete[] (null for 0 bytes),
/// `upload`/`download` are memcpy, `sync` does nothing. A device backend supplies the same five
/// members over device memory (cudaMalloc, cudaMemcpy, stream synchronisation).
struct host_staging {
  std::byte* alloc(std::int64_t bytes) {
    return bytes > 0 ? new std::byte[static_cast<std::size_t>(bytes)] : nullptr;
  }
  void free(std::byte* p) { delete[] p; }
  void upload(std::byte* dst, const std::byte* host_src, std::int64_t bytes) {
    if (bytes > 0) std::memcpy(dst, host_src, static_cast<std::size_t>(bytes));
  }
  void download(std::byte* host_dst, const std::byte* src, std::int64_t bytes) {
    if (bytes > 0) std::memcpy(host_dst, src, static_cast<std::size_t>(bytes));
  }
  void sync() {}
};

/// A payload buffer owned through a staging object (freed on scope exit).
template <class Staging>
class staged_buffer {
 public:
  staged_buffer(Staging& staging, std::int64_t bytes)
      : staging_(&staging), bytes_(bytes), data_(staging.alloc(bytes)) {}
  staged_buffer(const staged_buffer&) = delete;
  staged_buffer& operator=(const staged_buffer&) = delete;
  ~staged_buffer() { staging_->free(data_); }

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::int64_t size() const noexcept { return bytes_; }
  void upload(const std::vector<std::byte>& host) { staging_->upload(data_, host.data(), bytes_); }
  [[nodiscard]] std::vector<std::byte> download() {
    std::vector<std::byte> host(static_cast<std::size_t>(bytes_));
    staging_->download(host.data(), data_, bytes_);
    return host;
  }

 private:
  Staging* staging_;
  std::int64_t bytes_;
  std::byte* data_;
};

// ---------------------------------------------------------------------------------------------
// Content patterns.

/// splitmix64 finaliser: a fixed bijective mix, the same on every platform.
inline std::uint64_t conformance_mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Hash of (tag, a, b, c).
inline std::uint64_t conformance_hash(std::uint64_t tag, std::uint64_t a, std::uint64_t b,
                                      std::uint64_t c) noexcept {
  return conformance_mix(conformance_mix(conformance_mix(conformance_mix(tag) ^ a) ^ b) ^ c);
}

/// Seed of block (src -> dst) under `tag`; word w of the block is conformance_mix(seed + w).
inline std::uint64_t block_seed(std::uint64_t tag, rank_t src, rank_t dst) noexcept {
  return conformance_hash(tag, static_cast<std::uint64_t>(src), static_cast<std::uint64_t>(dst),
                          0x51edULL);
}

/// Byte k of the block that `src` sends to `dst` under `tag`: byte k % 8 (little-endian) of
/// word k / 8.
inline std::byte conformance_byte(std::uint64_t tag, rank_t src, rank_t dst,
                                  std::int64_t k) noexcept {
  const std::uint64_t w =
      conformance_mix(block_seed(tag, src, dst) + (static_cast<std::uint64_t>(k) >> 3));
  return static_cast<std::byte>(w >> ((static_cast<unsigned>(k) & 7U) * 8U));
}

namespace conformance_detail {
// The 8 bytes of a word in block order (little-endian), whatever the host's byte order.
inline void store_word(std::byte* out, std::uint64_t v, std::size_t len) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, &v, len);
  } else {
    for (std::size_t j = 0; j < len; ++j) out[j] = static_cast<std::byte>(v >> (j * 8U));
  }
}
}  // namespace conformance_detail

/// Writes block (src -> dst) under `tag`, `n` bytes, at `out` (one mix per 8 bytes: the suite
/// fills and checks megabytes, also in unoptimised sanitizer builds).
inline void fill_block(std::byte* out, std::int64_t n, std::uint64_t tag, rank_t src,
                       rank_t dst) noexcept {
  const std::uint64_t seed = block_seed(tag, src, dst);
  for (std::int64_t w = 0; w * 8 < n; ++w) {
    conformance_detail::store_word(out + w * 8,
                                   conformance_mix(seed + static_cast<std::uint64_t>(w)),
                                   static_cast<std::size_t>(std::min<std::int64_t>(8, n - w * 8)));
  }
}

/// Index of the first byte of `in[0, n)` that differs from block (src -> dst) under `tag`, or
/// -1 when all match.
inline std::int64_t first_block_mismatch(const std::byte* in, std::int64_t n, std::uint64_t tag,
                                         rank_t src, rank_t dst) noexcept {
  const std::uint64_t seed = block_seed(tag, src, dst);
  std::byte word[8];
  for (std::int64_t w = 0; w * 8 < n; ++w) {
    const auto len = static_cast<std::size_t>(std::min<std::int64_t>(8, n - w * 8));
    conformance_detail::store_word(word, conformance_mix(seed + static_cast<std::uint64_t>(w)),
                                   len);
    if (std::memcmp(in + w * 8, word, len) == 0) continue;
    for (std::size_t j = 0; j < len; ++j) {
      if (in[w * 8 + static_cast<std::int64_t>(j)] != word[j]) {
        return w * 8 + static_cast<std::int64_t>(j);
      }
    }
  }
  return -1;
}

/// Tag of canary bytes (gaps between blocks, buffer tails); distinct from every data tag.
inline constexpr std::uint64_t canary_tag = 0xca11a7eULL;

namespace conformance_detail {

inline std::string hex(std::byte b) {
  static constexpr char digits[] = "0123456789abcdef";
  const auto v = static_cast<unsigned>(b);
  return std::string("0x") + digits[v >> 4] + digits[v & 15U];
}

/// The first failure of one case on this rank (later ones are dropped: the first explains).
struct case_result {
  std::string failure;
  void fail(std::string detail) {
    if (failure.empty()) failure = std::move(detail);
  }
  [[nodiscard]] bool failed() const noexcept { return !failure.empty(); }
};

/// The verdict exchange after each case (collective): a one-byte all_gather of pass/fail, then
/// the lowest failing rank's detail (lengths by all_gather, text by all_gatherv), then every
/// rank throws the same message when any rank failed.
template <orchmllm::communicator C>
void settle(C& comm, const std::string& case_name, const case_result& result) {
  const rank_t n = comm.size();
  const auto un = static_cast<std::size_t>(n);
  const std::byte mine{static_cast<unsigned char>(result.failed() ? 1 : 0)};
  std::vector<std::byte> flags(un);
  comm.all_gather(&mine, 1, flags.data());
  rank_t bad = -1;
  for (rank_t r = 0; r < n; ++r) {
    if (flags[static_cast<std::size_t>(r)] != std::byte{0}) {
      bad = r;
      break;
    }
  }
  if (bad < 0) return;
  // Capped so a runaway message cannot make the exchange itself large.
  const std::string detail = result.failure.substr(0, 2000);
  const std::int64_t my_len = static_cast<std::int64_t>(detail.size());
  std::vector<std::int64_t> lens(un);
  comm.all_gather(reinterpret_cast<const std::byte*>(&my_len), sizeof my_len,
                  reinterpret_cast<std::byte*>(lens.data()));
  std::vector<std::int64_t> counts(un, 0), displs(un, 0);
  counts[static_cast<std::size_t>(bad)] = lens[static_cast<std::size_t>(bad)];
  std::vector<std::byte> text(static_cast<std::size_t>(lens[static_cast<std::size_t>(bad)]));
  const bool sender = comm.rank() == bad;
  comm.all_gatherv(reinterpret_cast<const std::byte*>(detail.data()), sender ? my_len : 0,
                   text.data(), counts, displs);
  std::string shared(reinterpret_cast<const char*>(text.data()), text.size());
  if (shared.empty()) shared = "(no detail)";
  throw std::runtime_error("conformance: " + case_name + ": rank " + std::to_string(bad) + ": " +
                           shared);
}

/// Runs one case body (which records failures in a case_result), turning unexpected
/// exceptions into failures, then settles the verdict collectively.
template <orchmllm::communicator C, class Body>
void run_case(C& comm, const std::string& name, Body&& body) {
  case_result result;
  try {
    body(result);
  } catch (const std::exception& e) {
    result.fail(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    result.fail("unexpected non-standard exception");
  }
  settle(comm, name, result);
}

/// Where each of n blocks goes in a buffer: contiguous in peer order, or in reverse peer order
/// with a gap of (p % 3) + 1 bytes before block p and 5 bytes after the last (canary room).
struct block_layout {
  std::vector<std::int64_t> displs;
  std::int64_t total = 0;
};

inline block_layout lay_out(const std::vector<std::int64_t>& counts, bool gapped) {
  block_layout l;
  l.displs.assign(counts.size(), 0);
  std::int64_t pos = 0;
  if (!gapped) {
    for (std::size_t p = 0; p < counts.size(); ++p) {
      l.displs[p] = pos;
      pos += counts[p];
    }
  } else {
    for (std::size_t i = counts.size(); i-- > 0;) {
      pos += static_cast<std::int64_t>(i % 3) + 1;
      l.displs[i] = pos;
      pos += counts[i];
    }
    pos += 5;
  }
  l.total = pos;
  return l;
}

/// Host image of a buffer: canary bytes (`owner`, `which` distinguish buffers) everywhere.
inline std::vector<std::byte> canary_buffer(std::int64_t bytes, rank_t owner, rank_t which) {
  std::vector<std::byte> b(static_cast<std::size_t>(bytes));
  fill_block(b.data(), bytes, canary_tag, owner, which);
  return b;
}

/// Checks that the bytes of `got` outside every block [displs[p], displs[p] + counts[p]) still
/// hold the canary of (owner, which). Blocks must not overlap (the suite's layouts never do).
inline void check_canaries(case_result& res, const std::vector<std::byte>& got,
                           const std::vector<std::int64_t>& counts,
                           const std::vector<std::int64_t>& displs, rank_t owner, rank_t which,
                           const char* buffer_name) {
  const std::vector<std::byte> want =
      canary_buffer(static_cast<std::int64_t>(got.size()), owner, which);
  std::vector<std::pair<std::int64_t, std::int64_t>> blocks;  // (begin, end), non-empty
  for (std::size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] > 0) blocks.emplace_back(displs[p], displs[p] + counts[p]);
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.emplace_back(static_cast<std::int64_t>(got.size()), 0);  // sentinel: the tail gap
  std::int64_t pos = 0;
  for (const auto& [begin, end] : blocks) {
    for (std::int64_t i = pos; i < begin; ++i) {
      const auto ui = static_cast<std::size_t>(i);
      if (got[ui] != want[ui]) {
        res.fail(std::string(buffer_name) + " byte " + std::to_string(i) +
                 " outside every block was overwritten: " + hex(got[ui]) + ", canary " +
                 hex(want[ui]));
        return;
      }
    }
    pos = std::max(pos, end);
  }
}

/// One all_to_allv exchange where rank s sends count(s, t) bytes to rank t, block content
/// derived from (tag, s, t, k); checks every received byte, the canaries in the receive buffer
/// gaps and that the send buffer is unchanged.
template <orchmllm::communicator C, class Staging, class Count>
void exchange_and_check(C& comm, Staging& staging, case_result& res, std::uint64_t tag,
                        Count&& count, bool gapped) {
  const rank_t n = comm.size();
  const rank_t me = comm.rank();
  const auto un = static_cast<std::size_t>(n);
  std::vector<std::int64_t> send_counts(un), recv_counts(un);
  for (rank_t p = 0; p < n; ++p) {
    send_counts[static_cast<std::size_t>(p)] = count(me, p);
    recv_counts[static_cast<std::size_t>(p)] = count(p, me);
  }
  const block_layout sl = lay_out(send_counts, gapped);
  const block_layout rl = lay_out(recv_counts, gapped);

  std::vector<std::byte> host_send = canary_buffer(sl.total, me, 0);
  for (rank_t p = 0; p < n; ++p) {
    const auto pi = static_cast<std::size_t>(p);
    fill_block(host_send.data() + sl.displs[pi], send_counts[pi], tag, me, p);
  }
  const std::vector<std::byte> host_recv = canary_buffer(rl.total, me, 1);

  staged_buffer<Staging> send(staging, sl.total);
  staged_buffer<Staging> recv(staging, rl.total);
  send.upload(host_send);
  recv.upload(host_recv);
  staging.sync();
  comm.all_to_allv(send.data(), send_counts, sl.displs, recv.data(), recv_counts, rl.displs);
  staging.sync();
  const std::vector<std::byte> got = recv.download();
  const std::vector<std::byte> sent_after = send.download();

  for (rank_t p = 0; p < n && !res.failed(); ++p) {
    const auto pi = static_cast<std::size_t>(p);
    const std::byte* block = got.data() + rl.displs[pi];
    const std::int64_t k = first_block_mismatch(block, recv_counts[pi], tag, p, me);
    if (k >= 0) {
      res.fail("block " + std::to_string(p) + "->" + std::to_string(me) + " (" +
               std::to_string(recv_counts[pi]) + " bytes) byte " + std::to_string(k) + ": got " +
               hex(block[k]) + ", expected " + hex(conformance_byte(tag, p, me, k)));
    }
  }
  if (!res.failed()) {
    check_canaries(res, got, recv_counts, rl.displs, me, 1, "recv buffer");
  }
  if (!res.failed() && sl.total > 0 &&
      std::memcmp(sent_after.data(), host_send.data(), host_send.size()) != 0) {
    const auto it = std::mismatch(sent_after.begin(), sent_after.end(), host_send.begin());
    res.fail("send buffer modified at byte " + std::to_string(it.first - sent_after.begin()));
  }
}

/// Count matrix entry of the seeded random cases: about a quarter zeros, else 1..299 bytes.
inline std::int64_t random_count(std::uint64_t seed, rank_t s, rank_t t) noexcept {
  const std::uint64_t h =
      conformance_hash(seed, static_cast<std::uint64_t>(s), static_cast<std::uint64_t>(t), 0);
  return h % 4 == 0 ? 0 : static_cast<std::int64_t>(1 + (h >> 8) % 299);
}

}  // namespace conformance_detail

// ---------------------------------------------------------------------------------------------
// The suite.

/// Runs every conformance case on `comm` (collective: all ranks call it with equivalent
/// arguments). Payload buffers of all_to_allv are allocated and copied through `staging`
/// (host by default); metadata collectives use host memory.
///
/// Cases: identity/shape, barrier, all_gather (0, 1, 7, 4096 bytes), all_gatherv (uneven counts
/// with zeros, reversed gapped displacements, canaries), all_to_allv (random seeded matrix with
/// zeros, all zero, self only, one rank to one rank, reversed gapped displacements with
/// canaries, 1 MiB per rank), and wrong-length spans -> invalid_argument_error on every rank
/// followed by one more good exchange.
///
/// Throws std::runtime_error("conformance: <case>: rank R: <detail>") on every rank when a case
/// fails on any rank (R: the lowest failing rank); exceptions of the communicator that escape
/// the verdict exchange itself propagate unchanged. Deterministic (fixed seeds).
template <orchmllm::communicator C, class Staging = host_staging>
void check_communicator_conformance(C& comm, Staging staging = {}) {
  using namespace conformance_detail;
  const rank_t n = comm.size();
  const rank_t me = comm.rank();
  const auto un = static_cast<std::size_t>(n);

  // -- identity and node shape --------------------------------------------------------------
  run_case(comm, "identity", [&](case_result& res) {
    // No collective can be trusted without a size; with one, gather first and judge after, so
    // a rank with a bad identity still takes part in the exchange.
    if (n < 1) return res.fail("size() = " + std::to_string(n) + " < 1");
    const std::int32_t mine[6] = {
        me, n, comm.node(), comm.num_nodes(), comm.local_rank(), comm.local_size()};
    std::vector<std::int32_t> all(6 * un);
    comm.all_gather(reinterpret_cast<const std::byte*>(mine), sizeof mine,
                    reinterpret_cast<std::byte*>(all.data()));
    if (me < 0 || me >= n) {
      return res.fail("rank() = " + std::to_string(me) + " outside [0, " + std::to_string(n) + ")");
    }
    auto at = [&](rank_t r, std::size_t field) {
      return all[static_cast<std::size_t>(r) * 6 + field];
    };
    const std::int32_t nodes = at(0, 3);
    if (nodes < 1 || nodes > n) {
      return res.fail("rank 0 reports num_nodes " + std::to_string(nodes) + " outside [1, " +
                      std::to_string(n) + "]");
    }
    std::vector<std::int32_t> next_local(static_cast<std::size_t>(nodes), 0);
    std::int32_t next_node = 0;  // nodes are numbered by their lowest rank
    for (rank_t r = 0; r < n; ++r) {
      const std::string who = "rank " + std::to_string(r) + " reports ";
      if (at(r, 0) != r)
        return res.fail("slot " + std::to_string(r) + " holds rank " + std::to_string(at(r, 0)) +
                        " (ranks not distinct)");
      if (at(r, 1) != n)
        return res.fail(who + "size " + std::to_string(at(r, 1)) + ", expected " +
                        std::to_string(n));
      if (at(r, 3) != nodes)
        return res.fail(who + "num_nodes " + std::to_string(at(r, 3)) + ", rank 0 reports " +
                        std::to_string(nodes));
      const std::int32_t node = at(r, 2);
      if (node < 0 || node >= nodes)
        return res.fail(who + "node " + std::to_string(node) + " outside [0, " +
                        std::to_string(nodes) + ")");
      if (node > next_node)
        return res.fail(who + "node " + std::to_string(node) + " before node " +
                        std::to_string(next_node) +
                        " appeared (nodes must be numbered by lowest rank)");
      if (node == next_node) ++next_node;
      auto& expect_local = next_local[static_cast<std::size_t>(node)];
      if (at(r, 4) != expect_local)
        return res.fail(who + "local_rank " + std::to_string(at(r, 4)) + ", expected " +
                        std::to_string(expect_local) + " (increasing rank order inside node " +
                        std::to_string(node) + ")");
      ++expect_local;
    }
    if (next_node != nodes)
      return res.fail("num_nodes = " + std::to_string(nodes) + " but only " +
                      std::to_string(next_node) + " nodes have ranks");
    for (rank_t r = 0; r < n; ++r) {
      const std::int32_t node = at(r, 2);
      if (at(r, 5) != next_local[static_cast<std::size_t>(node)]) {
        return res.fail("rank " + std::to_string(r) + " reports local_size " +
                        std::to_string(at(r, 5)) + " but node " + std::to_string(node) + " has " +
                        std::to_string(next_local[static_cast<std::size_t>(node)]) + " ranks");
      }
    }
  });

  // -- barrier, interleaved with gathers that prove the ranks stay in step -------------------
  run_case(comm, "barrier", [&](case_result& res) {
    for (std::int64_t round = 0; round < 3; ++round) {
      comm.barrier();
      comm.barrier();
      const std::int64_t mine = round * 1000 + me;
      std::vector<std::int64_t> all(un);
      comm.all_gather(reinterpret_cast<const std::byte*>(&mine), sizeof mine,
                      reinterpret_cast<std::byte*>(all.data()));
      for (rank_t r = 0; r < n; ++r) {
        // Record and go on: every rank must make the same sequence of collectives.
        if (all[static_cast<std::size_t>(r)] != round * 1000 + r) {
          res.fail("round " + std::to_string(round) + ": got " +
                   std::to_string(all[static_cast<std::size_t>(r)]) + " from rank " +
                   std::to_string(r));
        }
      }
    }
  });

  // -- all_gather ---------------------------------------------------------------------------
  for (const std::int64_t bytes :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{4096}}) {
    run_case(comm, "all_gather " + std::to_string(bytes) + " bytes", [&](case_result& res) {
      const std::uint64_t tag = 100 + static_cast<std::uint64_t>(bytes);
      std::vector<std::byte> send(static_cast<std::size_t>(bytes));
      fill_block(send.data(), bytes, tag, me, -1);
      const std::int64_t total = bytes * n;
      std::vector<std::byte> recv = canary_buffer(total + 16, me, 2);
      comm.all_gather(send.data(), bytes, recv.data());
      for (rank_t r = 0; r < n && !res.failed(); ++r) {
        const std::byte* block = recv.data() + static_cast<std::int64_t>(r) * bytes;
        const std::int64_t k = first_block_mismatch(block, bytes, tag, r, -1);
        if (k >= 0)
          res.fail("block of rank " + std::to_string(r) + " byte " + std::to_string(k) + ": got " +
                   hex(block[k]) + ", expected " + hex(conformance_byte(tag, r, -1, k)));
      }
      if (!res.failed()) {
        const std::vector<std::int64_t> whole{total}, at_zero{0};
        check_canaries(res, recv, whole, at_zero, me, 2, "recv buffer tail");
      }
    });
  }

  // -- all_gatherv: uneven counts with zeros, reversed and gapped displacements ---------------
  run_case(comm, "all_gatherv", [&](case_result& res) {
    for (int variant = 0; variant < 2; ++variant) {  // both always: same collectives everywhere
      const std::uint64_t tag = 200 + static_cast<std::uint64_t>(variant);
      std::vector<std::int64_t> counts(un);
      for (rank_t r = 0; r < n; ++r) {
        counts[static_cast<std::size_t>(r)] =
            variant == 1 || r % 3 == 1 ? 0 : 1 + (static_cast<std::int64_t>(r) * 37 + 11) % 50;
      }
      const block_layout l = lay_out(counts, /*gapped=*/true);
      const auto mine_count = counts[static_cast<std::size_t>(me)];
      std::vector<std::byte> send(static_cast<std::size_t>(mine_count));
      fill_block(send.data(), mine_count, tag, me, -1);
      std::vector<std::byte> recv = canary_buffer(l.total, me, 3);
      comm.all_gatherv(send.data(), mine_count, recv.data(), counts, l.displs);
      for (rank_t r = 0; r < n && !res.failed(); ++r) {
        const auto ri = static_cast<std::size_t>(r);
        const std::byte* block = recv.data() + l.displs[ri];
        const std::int64_t k = first_block_mismatch(block, counts[ri], tag, r, -1);
        if (k >= 0)
          res.fail("variant " + std::to_string(variant) + ": block of rank " + std::to_string(r) +
                   " byte " + std::to_string(k) + ": got " + hex(block[k]) + ", expected " +
                   hex(conformance_byte(tag, r, -1, k)));
      }
      if (!res.failed()) check_canaries(res, recv, counts, l.displs, me, 3, "recv buffer");
    }
  });

  // -- all_to_allv --------------------------------------------------------------------------
  const std::uint64_t seed = 0x5eed0001ULL;
  run_case(comm, "all_to_allv random matrix", [&](case_result& res) {
    exchange_and_check(
        comm, staging, res, 301, [&](rank_t s, rank_t t) { return random_count(seed, s, t); },
        false);
  });
  run_case(comm, "all_to_allv all counts zero", [&](case_result& res) {
    exchange_and_check(
        comm, staging, res, 302, [](rank_t, rank_t) { return std::int64_t{0}; }, false);
  });
  run_case(comm, "all_to_allv self only", [&](case_result& res) {
    exchange_and_check(
        comm, staging, res, 303,
        [](rank_t s, rank_t t) { return s == t ? std::int64_t{100} + s : 0; }, false);
  });
  run_case(comm, "all_to_allv one rank to one rank", [&](case_result& res) {
    exchange_and_check(
        comm, staging, res, 304,
        [n](rank_t s, rank_t t) { return s == n - 1 && t == 0 ? std::int64_t{65539} : 0; }, false);
  });
  run_case(comm, "all_to_allv reversed gapped displacements", [&](case_result& res) {
    exchange_and_check(
        comm, staging, res, 305, [&](rank_t s, rank_t t) { return random_count(seed + 1, s, t); },
        true);
  });
  run_case(comm, "all_to_allv 1 MiB per rank", [&](case_result& res) {
    constexpr std::int64_t total = std::int64_t{1} << 20;
    exchange_and_check(
        comm, staging, res, 306,
        [n](rank_t, rank_t t) {
          const std::int64_t base = total / n;
          return t == n - 1 ? total - base * (n - 1) : base;
        },
        false);
  });

  // -- bad arguments: every rank passes a span of the wrong length ---------------------------
  run_case(comm, "all_to_allv wrong span length", [&](case_result& res) {
    staged_buffer<Staging> send(staging, n);
    staged_buffer<Staging> recv(staging, n);
    std::vector<std::int64_t> ones(un + 1, 1), displs(un);
    std::iota(displs.begin(), displs.end(), std::int64_t{0});
    const std::span<const std::int64_t> too_long(ones);
    const std::span<const std::int64_t> right = too_long.first(un);
    try {
      comm.all_to_allv(send.data(), too_long, displs, recv.data(), right, displs);
      res.fail("all_to_allv accepted send_counts of " + std::to_string(un + 1) +
               " entries (size() = " + std::to_string(n) + ")");
    } catch (const orchmllm::invalid_argument_error&) {
      // expected
    } catch (const std::exception& e) {
      res.fail(std::string("expected invalid_argument_error, got: ") + e.what());
    }
  });
  run_case(comm, "all_to_allv after bad arguments", [&](case_result& res) {
    exchange_and_check(
        comm, staging, res, 307, [&](rank_t s, rank_t t) { return random_count(seed + 2, s, t); },
        true);
  });
}

}  // namespace orchmllm::test
