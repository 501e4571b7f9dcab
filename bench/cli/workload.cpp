// orchmllm-bench workload: the ITEMS.csv files of a benchmark workload (workload.hpp).
#include "bench/cli/workload.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/cli/trace_csv.hpp"
#include "bench/support/args.hpp"
#include "bench/support/long_context.hpp"
#include "bench/support/workloads.hpp"

namespace orchmllm::tool {

const command& workload_command() {
  static const command cmd = [] {
    command c;
    c.name = "workload";
    c.summary = "Write the per-stage ITEMS.csv files of a benchmark workload.";
    c.flags = {
        {"name", "NAME",
         "vl-sft, omni-pretrain, video-heavy, audio-asr (or --trace), or long-context (llm.csv "
         "only)",
         false},
        {"trace", "FILE",
         "draw the samples from a length trace (sample,image_tokens,text_tokens) instead of "
         "--name",
         false},
        {"ranks", "D", "number of data-parallel ranks", true},
        {"samples-per-rank", "K",
         "samples per rank (omni-pretrain: packed 8192-token sequences); default 8", false},
        {"seed", "S", "random seed; with --trace the batch number; default 1", false},
        {"long-form", "", "audio-asr only: add the 5% long-form (30-600 s) stress clips", false},
        {"out-dir", "DIR", "directory for vision.csv, audio.csv, llm.csv (created if missing)",
         true},
        {"trace-out", "FILE", "also write the batch as a length trace (images and text only)",
         false},
    };
    c.details =
        "Rank r draws its samples from stream r of the seed, so rank r's samples do not depend\n"
        "on D. Files (rank,slot,length,bytes): vision.csv = images and video clips (length ViT\n"
        "patches, bytes 2352 per patch; a segments column = temporal groups when there are\n"
        "videos), audio.csv = 30 s windows of audio\n"
        "clips (length 1500 Whisper positions, bytes 256 per mel frame), llm.csv = samples (length "
        "text + encoder tokens,\n"
        "bytes 8 per token). stdout: one JSON object with the workload, D, K, seed, samples and\n"
        "per stage items, length, bytes (llm also text_tokens, mean/max sequence length and the\n"
        "max/mean imbalance of the per-rank LLM tokens before balancing).\n"
        "--trace FILE: slot i of rank r holds trace row ((S*D + r)*K + i) mod rows (file order),\n"
        "every image a vision item of its patches (patches/4 LLM tokens); the JSON's workload\n"
        "is \"trace\" and trace names the file (docs/tool.md, Traces).\n"
        "--name long-context writes llm.csv only: text sequences of 1K-256K tokens (ByteScale's\n"
        "published mix, bench/support/long_context.hpp; bytes 8 per token), the input of\n"
        "`plan --cp-sizes`; its JSON: workload, ranks, samples_per_rank, seed, samples, tokens,\n"
        "max_length, out_dir.\n";
    c.run = &run_workload;
    return c;
  }();
  return cmd;
}

std::vector<std::pair<std::string, std::string>> format_workload_items(
    const bench::workload_batch& w) {
  const auto layouts = bench::make_stage_layouts(w);
  return {{"vision.csv", format_items(layouts.vision)},
          {"audio.csv", format_items(layouts.audio)},
          {"llm.csv", format_items(layouts.llm)}};
}

namespace {

// Creates `dir` (and its parents) unless it exists; io_error naming it otherwise.
void create_output_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec || (!dir.empty() && !std::filesystem::is_directory(dir)))
    throw io_error("cannot create directory '" + dir.string() + "'" +
                   (ec ? ": " + ec.message() : std::string(": not a directory")));
}

}  // namespace

void write_workload_items(const bench::workload_batch& w, const std::filesystem::path& dir) {
  const auto files = format_workload_items(w);
  create_output_dir(dir);
  std::vector<std::pair<std::filesystem::path, std::string_view>> writes;
  for (const auto& [name, text] : files) writes.emplace_back(dir / name, text);
  write_files_atomically(writes);
}

int run_workload(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(workload_command(), err, [&] {
    const auto trace = args.get("trace");
    if (trace.has_value() == args.has("name"))
      throw usage_error("give one of --name NAME and --trace FILE");
    const std::string name_text = trace ? std::string("trace") : args.require("name");
    if (name_text == "long-context") {
      for (const char* f : {"long-form", "trace-out"})
        if (args.has(f))
          throw usage_error("--" + std::string(f) + " does not apply to --name long-context");
      const std::int64_t ranks = args.require_int("ranks", 1, max_ranks);
      const std::int64_t k = args.get_int("samples-per-rank", 8, 0, workload_max_samples);
      if (k > workload_max_samples / ranks)
        throw usage_error("--ranks " + std::to_string(ranks) + " x --samples-per-rank " +
                          std::to_string(k) + " exceeds " + std::to_string(workload_max_samples) +
                          " samples");
      const auto seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0));
      const std::filesystem::path dir = args.require("out-dir");
      const batch_layout llm = bench::long_context_layout(ranks, k, seed);
      create_output_dir(dir);
      write_file_atomically(dir / "llm.csv", format_items(llm));
      std::int64_t tokens = 0, longest = 0;
      for (std::int64_t g = 0; g < llm.num_items(); ++g) {
        tokens += llm.length(g);
        longest = std::max(longest, llm.length(g));
      }
      json_object j;
      j.add("workload", "long-context")
          .add("ranks", ranks)
          .add("samples_per_rank", k)
          .add("seed", seed)
          .add("samples", llm.num_items())
          .add("tokens", tokens)
          .add("max_length", longest)
          .add("out_dir", dir.string());
      out << j.str() << "\n";
      return exit_ok;
    }
    bench::workload_options o;
    if (!trace) {
      try {
        o.name = bench::parse_workload(name_text);
      } catch (const invalid_argument_error&) {
        throw usage_error("--name is '" + name_text +
                          "', expected vl-sft, omni-pretrain, video-heavy, audio-asr or "
                          "long-context");
      }
    }
    o.ranks = args.require_int("ranks", 1, max_ranks);
    o.samples_per_rank = args.get_int("samples-per-rank", 8, 0, workload_max_samples);
    if (o.samples_per_rank > workload_max_samples / o.ranks)
      throw usage_error("--ranks " + std::to_string(o.ranks) + " x --samples-per-rank " +
                        std::to_string(o.samples_per_rank) + " exceeds " +
                        std::to_string(workload_max_samples) + " samples");
    o.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0));
    o.long_form_audio = args.has("long-form");
    if (o.long_form_audio && (trace || o.name != bench::workload_name::audio_asr))
      throw usage_error("--long-form applies to --name audio-asr only, not '" + name_text + "'");
    const std::filesystem::path dir = args.require("out-dir");

    const auto w =
        trace ? bench::trace_workload(read_trace_file(*trace), o.ranks, o.samples_per_rank, o.seed)
              : bench::make_workload(o);
    const auto trace_out = args.get("trace-out");
    std::string trace_text;
    if (trace_out) {
      try {
        trace_text = format_trace(w);
      } catch (const invalid_argument_error& e) {
        throw usage_error("--trace-out: " + e.message());
      }
    }
    write_workload_items(w, dir);
    if (trace_out) write_file_atomically(*trace_out, trace_text);
    const auto s = bench::summarize(w);
    auto encoder = [](const bench::modality_totals& m) {
      json_object j;
      j.add("items", m.items)
          .add("length", m.encoder_length)
          .add("bytes", m.input_bytes)
          .add("llm_tokens", m.llm_tokens)
          .add("imbalance", m.imbalance);
      return j.str();
    };
    json_object llm;
    llm.add("items", s.samples)
        .add("length", s.llm_tokens)
        .add("bytes", s.llm_bytes)
        .add("text_tokens", s.text_tokens)
        .add("mean_length", s.mean_sequence)
        .add("max_length", s.max_sequence)
        .add("imbalance", s.llm_imbalance);
    json_object j;
    j.add("workload", trace ? std::string_view("trace") : bench::to_string(o.name))
        .add("ranks", o.ranks)
        .add("samples_per_rank", o.samples_per_rank)
        .add("seed", o.seed)
        .add("long_form", o.long_form_audio)
        .add("samples", s.samples)
        .raw("vision", encoder(s.vision))
        .raw("audio", encoder(s.audio))
        .raw("llm", llm.str())
        .add("out_dir", dir.string());
    if (trace) j.add("trace", *trace);
    if (trace_out) j.add("trace_out", *trace_out);
    out << j.str() << "\n";
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
