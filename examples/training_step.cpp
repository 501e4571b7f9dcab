// One orchestrated training step on the trainer's own communicator: the in-process local
// backend (N ranks as threads) or, built with ORCHMLLM_EXAMPLE_MPI, MPI. The step is one
// template: any type that models orchmllm::communicator plugs in. Each rank holds its own
// samples; the step gathers their sizes, plans every stage and this rank's routes
// (`plan_step`), moves pixels, mel frames and text to the balanced ranks, the encoder outputs
// to the LLM ranks and their gradients back. Every row carries its sample's key, so the LLM
// ranks check that each row reached its sample.
//
//   training_step [--ranks N] [--ranks-per-node G]            (local; exit 0: every row arrived)
//   mpirun [--oversubscribe] -np 8 mpi_training_step [--ranks-per-node G]   (MPI)

// The step's one façade, and the communicator backend.
#include <orchmllm/orchestrator/orchestrator.hpp>
#if defined(ORCHMLLM_EXAMPLE_MPI)
#include <mpi.h>

#include <orchmllm/backend/mpi/communicator.hpp>
#else
#include <orchmllm/comm/local.hpp>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

struct Image {
  std::int64_t patches;
};
struct Audio {
  std::int64_t frames;
};
struct Sample {
  std::int64_t key;  // rank · 100 + index: what every row of the sample carries
  std::int64_t text_tokens;
  std::vector<Image> images;
  std::optional<Audio> audio;
};

// Rank r's samples: rank 0 draws the large images, so its vision load is the heaviest.
std::vector<Sample> my_samples(int r) {
  std::vector<Sample> out;
  for (int s = 0; s < 2 + r % 3; ++s) {
    Sample x{100 * r + s, 16 + 8 * ((r + s) % 5), {}, std::nullopt};
    for (int i = 0; i < 1 + (s + r) % 3; ++i) x.images.push_back({r == 0 ? 256 : 16 * (i + 1)});
    if ((r + s) % 2 == 0) x.audio = Audio{40 + 20 * s};
    out.push_back(x);
  }
  return out;
}

orchmllm::stage_declarations declarations() {
  orchmllm::stage_declarations decl;
  decl.encoders.push_back({.name = "vision",
                           .cost = orchmllm::quadratic_cost{0, 1, 1.0 / 1024},
                           .input_row_bytes = 8,
                           .output_row_bytes = 8});
  decl.encoders.push_back({.name = "audio",
                           .cost = orchmllm::linear_cost{},
                           .policy = orchmllm::padded,
                           .input_row_bytes = 8,
                           .output_row_bytes = 8});
  decl.llm.cost = orchmllm::quadratic_cost{0, 1, 1.0 / 4096};
  decl.llm.text_row_bytes = 8;
  return decl;
}

// One item of `rows` rows of 8 bytes, each holding `key`.
void append(orchmllm::ragged_payload& p, std::int64_t rows, std::int64_t key) {
  p.rows.push_back(rows);
  for (std::int64_t i = 0; i < rows; ++i)
    p.data.insert(p.data.end(), reinterpret_cast<const std::byte*>(&key),
                  reinterpret_cast<const std::byte*>(&key + 1));
}
std::int64_t row_key(const orchmllm::ragged_payload& p, std::int64_t row) {
  std::int64_t key = 0;
  std::memcpy(&key, p.data.data() + row * 8, sizeof key);
  return key;
}

// The step on one rank; returns whether every row on every rank reached its sample.
template <class Comm>
bool train_step(Comm& comm) {
  const int me = static_cast<int>(comm.rank());
  const auto samples = my_samples(me);
  const auto decl = declarations();

  // Metadata: the sizes every rank sampled.
  const auto topo = orchmllm::gather_topology(comm);
  const auto batch = orchmllm::make_local_batch(
      samples, [](const Sample& s) { return s.text_tokens; },
      orchmllm::modality(&Sample::images,
                         [](const Image& i) {
                           return orchmllm::sub_item_size{i.patches, i.patches, i.patches / 4};
                         }),
      orchmllm::modality(&Sample::audio, [](const Audio& a) {
        return orchmllm::sub_item_size{a.frames, a.frames, a.frames / 2};
      }));
  const auto meta = orchmllm::gather_step_metadata(comm, decl, batch, topo);

  // Plans and this rank's routes, agreed on once.
  const auto step = orchmllm::plan_step(comm, decl, meta, topo);
  const auto& routes = step.routes;
  // Inputs to the encoder ranks, text to the LLM ranks (local_batch order: sample by sample).
  orchmllm::ragged_payload in[2] = {{.row_bytes = 8}, {.row_bytes = 8}}, text{.row_bytes = 8};
  for (const auto& s : samples) {
    for (const auto& i : s.images) append(in[0], i.patches, s.key);
    if (s.audio) append(in[1], s.audio->frames, s.key);
    append(text, s.text_tokens, s.key);
  }
  const orchmllm::ragged_payload moved_text = orchmllm::dispatch(comm, routes.text(), text);
  bool ok = true;
  orchmllm::ragged_payload outputs[2];
  for (int k = 0; k < 2; ++k) {
    const auto inputs = orchmllm::dispatch(comm, routes.encoder_input(k), in[k]);
    // "Encoder": one output row per 4 patches (2 frames), carrying the item's key.
    orchmllm::ragged_payload out{.row_bytes = 8};
    std::int64_t row = 0;
    for (const auto rows : inputs.rows) {
      append(out, rows / (k == 0 ? 4 : 2), row_key(inputs, row));
      row += rows;
    }
    outputs[k] = orchmllm::dispatch(comm, routes.encoder_output(k), out);
  }

  // On the LLM rank: every output row of a sample carries that sample's key.
  const auto view = step.llm_view(meta, me);
  std::int64_t text_row = 0;
  for (std::size_t s = 0; s < view.samples.size(); ++s) {
    const auto key = row_key(moved_text, text_row);
    text_row += moved_text.rows[s];
    for (auto e = view.sub_item_offsets[s]; e < view.sub_item_offsets[s + 1]; ++e) {
      const auto [k, j] = view.sub_items[static_cast<std::size_t>(e)];
      const auto& rows = view.row_offsets[static_cast<std::size_t>(k)];
      const auto uj = static_cast<std::size_t>(j);
      for (auto r = rows[uj]; r < rows[uj + 1]; ++r) ok = ok && row_key(outputs[k], r) == key;
    }
  }
  // Backward: the output gradients go back to the encoder ranks, row for row.
  for (int k = 0; k < 2; ++k) {
    const auto grads = orchmllm::dispatch(comm, routes.encoder_gradient(k), outputs[k]);
    ok = ok && grads.rows.size() == routes.encoder_input(k).output_item_bytes().size();
  }

  // Every rank's verdict, through the communicator's all_gather.
  const char mine = ok ? 1 : 0;
  std::vector<char> oks(static_cast<std::size_t>(comm.size()));
  comm.all_gather(reinterpret_cast<const std::byte*>(&mine), 1,
                  reinterpret_cast<std::byte*>(oks.data()));
  ok = std::count(oks.begin(), oks.end(), 1) == comm.size();
  if (me == 0) {
    for (const auto& st : step.stages)
      std::printf("%-6s imbalance %.2f -> %.2f\n", st.name.c_str(), st.imbalance_before,
                  st.imbalance_after);
    std::printf("%d transfers along prebuilt routes on %d nodes: %s\n", step.alltoalls_per_step(),
                topo.num_nodes(), ok ? "every row reached its sample" : "MISMATCH");
  }
  return ok;
}

int main(int argc, char** argv) {
#if defined(ORCHMLLM_EXAMPLE_MPI)
  orchmllm::mpi::environment env(&argc, &argv);
#endif
  [[maybe_unused]] orchmllm::rank_t ranks = 8;
  orchmllm::rank_t per_node = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--ranks") ranks = std::atoi(argv[i + 1]);
    if (flag == "--ranks-per-node") per_node = std::atoi(argv[i + 1]);
  }
#if defined(ORCHMLLM_EXAMPLE_MPI)
  // The trainer's communicator (here MPI_COMM_WORLD), adopted: no duplicate.
  orchmllm::mpi::communicator_ref comm(MPI_COMM_WORLD, {.ranks_per_node = per_node});
  return train_step(comm) ? 0 : 1;
#else
  bool ok = true;  // rank 0 writes it; every rank computes the same value
  orchmllm::local::run(ranks,
                       [&](orchmllm::local::communicator& comm) {
                         if (const bool mine = train_step(comm); comm.rank() == 0) ok = mine;
                       },
                       {.ranks_per_node = per_node});
  return ok ? 0 : 1;
#endif
}
