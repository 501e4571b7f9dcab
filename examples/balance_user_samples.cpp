// Balancing a trainer's own samples: no adapter, no copy into library types.
//
// Every rank of a data-parallel group has sampled a few `Sample`s of its own type: text tokens,
// some images, maybe an audio clip. Two stages see different loads:
//   vision  one item per image (its ViT patches), run in rectangular batches padded to the
//           next power of two (the trainer's own padding rule), balanced exactly for it;
//   llm     one item per sample (all its tokens), packed varlen attention: cost grows
//           quadratically with the length.
// Each stage is balanced from the trainer's ranges through a projection, and the plan moves the
// trainer's own objects (`apply_by_rank`). The program checks that every sample and image
// arrives exactly once and that no stage got worse, and prints the imbalance per stage.
//
// Usage: balance_user_samples [--ranks D] (default 8). Exit status 0 when every check holds.

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

// The trainer's own types.
struct Image {
  std::int64_t patches;  // ViT patches after resizing
  std::int64_t id;       // which image, to check the move
};
struct Sample {
  std::int64_t text_tokens;
  std::vector<Image> images;
  std::optional<std::int64_t> audio_tokens;
  std::int64_t id;
  [[nodiscard]] std::int64_t tokens() const {
    std::int64_t t = text_tokens + audio_tokens.value_or(0);
    for (const Image& im : images) t += im.patches / 4;  // 2×2 patch merge before the LLM
    return t;
  }
};

// The trainer's padding rule: rectangular vision batches padded to the next power of two.
struct next_pow2 {
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const {
    return l <= 1 ? l : static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(l)));
  }
  [[nodiscard]] const char* name() const { return "next_pow2"; }
  bool operator==(const next_pow2&) const = default;
};

// A skewed batch: some ranks drew image-heavy samples, some long text, some audio.
std::vector<std::vector<Sample>> sample_batch(int ranks) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> text(6.0, 1.0);
  std::vector<std::vector<Sample>> batch(static_cast<std::size_t>(ranks));
  std::int64_t next_sample = 0, next_image = 0;
  for (int r = 0; r < ranks; ++r) {
    const int images_per_sample = r % 3 == 0 ? 4 : 0;
    for (int k = 0; k < 6; ++k) {
      Sample s{static_cast<std::int64_t>(text(rng)) + 16, {}, std::nullopt, next_sample++};
      for (int i = 0; i < images_per_sample; ++i)
        s.images.push_back({static_cast<std::int64_t>(256 + rng() % 3840), next_image++});
      if (r % 4 == 1) s.audio_tokens = static_cast<std::int64_t>(750 + rng() % 750);
      batch[static_cast<std::size_t>(r)].push_back(std::move(s));
    }
  }
  return batch;
}

template <class T>
bool each_once(const std::vector<std::vector<T>>& ranks, std::int64_t count) {
  std::vector<int> seen(static_cast<std::size_t>(count), 0);
  for (const auto& rank : ranks)
    for (const T& x : rank) ++seen[static_cast<std::size_t>(x.id)];
  for (int s : seen)
    if (s != 1) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 8;
  if (argc == 3 && std::string(argv[1]) == "--ranks") ranks = std::atoi(argv[2]);
  if (ranks < 1) {
    std::fprintf(stderr, "usage: balance_user_samples [--ranks D >= 1]\n");
    return 2;
  }
  try {
    auto batch = sample_batch(ranks);
    bool ok = true;

    // Vision: the images of every rank, balanced under the trainer's padding rule.
    std::vector<std::vector<Image>> images(batch.size());
    std::int64_t num_images = 0;
    for (std::size_t r = 0; r < batch.size(); ++r)
      for (const Sample& s : batch[r])
        images[r].insert(images[r].end(), s.images.begin(), s.images.end());
    for (const auto& v : images) num_images += static_cast<std::int64_t>(v.size());
    const orchmllm::quadratic_cost vit{0.0, 1.0, 1.0 / 1024};  // full attention inside an image
    const orchmllm::padding_policy pow2 = next_pow2{};
    const auto vision =
        orchmllm::balance(images, vit, &Image::patches, pow2, orchmllm::balancers::padded_exact{});
    const auto vision_stats = orchmllm::compute_statistics(
        orchmllm::make_layout(images, &Image::patches), vision.plan, vit, pow2);
    const auto images_after = orchmllm::apply_by_rank(vision.plan, images);
    ok = ok && each_once(images_after, num_images) && vision.proven_optimal &&
         vision_stats.makespan <= vision_stats.makespan_before;

    // LLM: whole samples by their tokens (bytes: what the sample's tokens weigh in bf16 embeddings
    // of width 4096, for the byte cap and the mapping), packed.
    const orchmllm::quadratic_cost llm{0.0, 1.0, 1.0 / 8192};
    auto size = [](const Sample& s) {
      return orchmllm::item_size{s.tokens(), s.tokens() * 4096 * 2};
    };
    const auto lm = orchmllm::balance(batch, llm, size);
    const auto lm_stats = orchmllm::compute_statistics(orchmllm::make_layout(batch, size), lm.plan,
                                                       llm, orchmllm::packed);
    const std::int64_t num_samples = static_cast<std::int64_t>(batch.size()) * 6;
    const auto samples_after = orchmllm::apply_by_rank(lm.plan, std::move(batch));
    ok = ok && each_once(samples_after, num_samples) &&
         lm_stats.makespan <= lm_stats.makespan_before;

    std::printf("%-7s %8s %15s %15s %10s\n", "stage", "items", "imbalance before", "after",
                "algorithm");
    std::printf("%-7s %8lld %15.3f %15.3f %10s\n", "vision", static_cast<long long>(num_images),
                vision_stats.imbalance_before, vision_stats.imbalance_after,
                std::string(vision.used).c_str());
    std::printf("%-7s %8lld %15.3f %15.3f %10s\n", "llm", static_cast<long long>(num_samples),
                lm_stats.imbalance_before, lm_stats.imbalance_after, std::string(lm.used).c_str());
    std::printf(ok ? "every sample and image placed once, no stage worse\n" : "CHECK FAILED\n");
    return ok ? 0 : 1;
  } catch (const orchmllm::error& e) {
    std::fprintf(stderr, "balance_user_samples: %s\n", e.what());
    return 1;
  }
}
