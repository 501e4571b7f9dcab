// One orchestrated training step over MPI, on the trainer's own communicator.
//
// Each rank holds its own samples (text, images, optional audio). The step:
//   1. adopts the trainer's MPI communicator (`mpi::communicator_ref`: no duplicate);
//   2. gathers the step's metadata (one all-gather and one all-gatherv);
//   3. plans every stage and builds this rank's prebuilt routes (`plan_step` over the
//      communicator: pure planning, then one small agreement);
//   4. moves pixels, mel frames and text to the balanced ranks, the encoder outputs straight to
//      the LLM ranks and their gradients back, each transfer its route's all-to-all(s) only.
// Every row carries its sample's key, so the LLM ranks check that each row reached its sample.
//
//   mpirun -np 8 mpi_training_step [--ranks-per-node G]     (exit 0: every row arrived)

#include <mpi.h>

#include <orchmllm/backend/mpi/communicator.hpp>
#include <orchmllm/orchmllm.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

struct Image { std::int64_t patches; };
struct Audio { std::int64_t frames; };
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
  decl.encoders.push_back({.name = "vision", .cost = orchmllm::quadratic_cost{0, 1, 1.0 / 1024},
                           .input_row_bytes = 8, .output_row_bytes = 8});
  decl.encoders.push_back({.name = "audio", .cost = orchmllm::linear_cost{},
                           .policy = orchmllm::padded, .input_row_bytes = 8,
                           .output_row_bytes = 8});
  decl.llm.cost = orchmllm::quadratic_cost{0, 1, 1.0 / 4096};
  decl.llm.text_row_bytes = 8;
  return decl;
}

// One item of `rows` rows of 8 bytes, each holding `key`.
void append(orchmllm::ragged_payload& p, std::int64_t rows, std::int64_t key) {
  p.rows.push_back(rows);
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto at = p.data.size();
    p.data.resize(at + sizeof key);
    std::memcpy(p.data.data() + at, &key, sizeof key);
  }
}
std::int64_t row_key(const orchmllm::ragged_payload& p, std::int64_t row) {
  std::int64_t key = 0;
  std::memcpy(&key, p.data.data() + row * 8, sizeof key);
  return key;
}

int main(int argc, char** argv) {
  orchmllm::mpi::environment env(&argc, &argv);
  orchmllm::rank_t per_node = 0;
  if (argc == 3 && std::string(argv[1]) == "--ranks-per-node") per_node = std::atoi(argv[2]);
  // 1. The trainer's communicator (here MPI_COMM_WORLD), adopted.
  orchmllm::mpi::communicator_ref comm(MPI_COMM_WORLD, {.ranks_per_node = per_node});
  const int me = comm.rank();
  const auto samples = my_samples(me);
  const auto decl = declarations();

  // 2. Metadata: the sizes every rank sampled.
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

  // 3. Plans and this rank's routes, agreed on once.
  const auto step = orchmllm::plan_step(comm, decl, meta, topo);
  const auto& routes = step.routes;

  // 4. Inputs to the encoder ranks, text to the LLM ranks (local_batch order: sample by sample).
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

  // 5. On the LLM rank: every output row of a sample carries that sample's key.
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

  std::int64_t bad = ok ? 0 : 1;
  comm.all_max(std::span<std::int64_t>(&bad, 1));
  if (me == 0) {
    for (const auto& st : step.stages)
      std::printf("%-6s imbalance %.2f -> %.2f\n", st.name.c_str(), st.imbalance_before,
                  st.imbalance_after);
    std::printf("%d transfers along prebuilt routes on %d nodes: %s\n", step.alltoalls_per_step(),
                topo.num_nodes(), bad == 0 ? "every row reached its sample" : "MISMATCH");
  }
  return bad == 0 ? 0 : 1;
}
