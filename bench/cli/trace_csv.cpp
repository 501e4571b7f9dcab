// orchmllm-bench: the length-trace format (trace_csv.hpp).
#include "bench/cli/trace_csv.hpp"

#include <cstdint>
#include <orchmllm/core/error.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/support/quote.hpp"

namespace orchmllm::tool {

std::vector<bench::trace_sample> parse_trace(std::string_view text, std::string_view file) {
  using ::orchmllm::detail::raise;
  const std::string f(file);
  detail::line_reader lines(text);
  std::string_view line;
  std::int64_t number = 0;
  detail::read_header(lines, line, number, f, "the header 'sample,image_tokens,text_tokens'");
  if (detail::split_fields(line) !=
      std::vector<std::string_view>{"sample", "image_tokens", "text_tokens"})
    raise<parse_error>(f + ":" + std::to_string(number) + ": header " + quote_text(line) +
                       ", expected 'sample,image_tokens,text_tokens'");
  std::vector<bench::trace_sample> out;
  while (lines.next(line, number)) {
    if (detail::trim(line).empty()) continue;
    const std::string here = f + ":" + std::to_string(number) + ": ";
    const auto fields = detail::split_fields(line);
    if (fields.size() != 3)
      raise<parse_error>(here + std::to_string(fields.size()) +
                         " fields, expected 3 (sample,image_tokens,text_tokens)");
    detail::parse_count(fields[0], "sample", file, number);
    bench::trace_sample s;
    s.text_tokens = detail::parse_count(fields[2], "text_tokens", file, number);
    std::int64_t tokens = s.text_tokens;
    if (!fields[1].empty()) {
      std::size_t start = 0;
      while (true) {
        const auto semi = fields[1].find(';', start);
        const auto part = detail::trim(fields[1].substr(
            start, semi == std::string_view::npos ? std::string_view::npos : semi - start));
        const std::int64_t p = detail::parse_count(part, "image_tokens", file, number);
        if (p == 0 || p % 4 != 0)
          raise<parse_error>(here + "image of " + std::to_string(p) +
                             " patches: must be a positive multiple of 4 (2 x 2 patches per "
                             "LLM token)");
        s.image_patches.push_back(p);
        tokens += p / 4;
        if (semi == std::string_view::npos) break;
        start = semi + 1;
      }
    }
    if (tokens == 0) raise<parse_error>(here + "a sample of no tokens (no images, no text)");
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<bench::trace_sample> read_trace_file(const std::filesystem::path& path) {
  auto out = parse_trace(read_file(path), path.string());
  if (out.empty())
    ::orchmllm::detail::raise<parse_error>(path.string() + ": no samples after the header");
  return out;
}

std::string format_trace(const bench::workload_batch& w) {
  std::string out = "sample,image_tokens,text_tokens\n";
  std::int64_t id = 0;
  for (const auto& b : w.ranks) {
    std::vector<std::string> images(b.text_tokens.size());
    for (const auto& it : b.sub_items) {
      if (it.modality != bench::vision_modality || it.segments != 1)
        ::orchmllm::detail::raise<invalid_argument_error>(
            "a trace holds images only: sample " + std::to_string(id + it.parent) + " has " +
            (it.modality != bench::vision_modality ? "an audio clip" : "a video"));
      auto& list = images[static_cast<std::size_t>(it.parent)];
      if (!list.empty()) list += ';';
      list += std::to_string(it.encoder_length);
    }
    for (std::size_t i = 0; i < b.text_tokens.size(); ++i)
      out += std::to_string(id++) + "," + images[i] + "," + std::to_string(b.text_tokens[i]) + "\n";
  }
  return out;
}

}  // namespace orchmllm::tool
