#pragma once
// Out-of-line members of cuda::device_mover (included at the end of backend/cuda/mover.cuh):
// the gather, by the chunked Thrust kernel or CUB's batched memcpy. Not API. See
// docs/communication.md, "Host and device use".

namespace orchmllm::cuda {

inline void device_mover::gather(const std::byte* in, std::byte* out,
                                 const ::orchmllm::detail::segment_list& segments) {
  ::orchmllm::detail::thrust_backend::check_segment_list(segments, "device_mover::gather");
  const auto n = static_cast<std::int64_t>(segments.size());
  if (n == 0) return;
  const bool use_thrust = method_ == gather_method::thrust_chunked;
  const std::int64_t columns = use_thrust ? 4 : 3;  // src | dst | bytes [| chunk ends]
  std::int64_t* host = stage(columns * n);
  const ::orchmllm::detail::thrust_backend::chunk_count count{chunk_bytes_};
  std::int64_t total_bytes = 0;
  std::int64_t total_chunks = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    host[i] = segments.src[k];
    host[n + i] = segments.dst[k];
    host[2 * n + i] = segments.bytes[k];
    total_bytes += segments.bytes[k];
    if (use_thrust) {
      total_chunks += count(segments.bytes[k]);
      host[3 * n + i] = total_chunks;
    }
  }
  if (total_bytes == 0) return;
  const auto table_bytes = static_cast<std::int64_t>(sizeof(std::int64_t)) * columns * n;
  auto* table = reinterpret_cast<std::int64_t*>(table_.reserve(table_bytes, stream_));
  ORCHMLLM_CUDA_CHECK(cudaMemcpyAsync(table, host, static_cast<std::size_t>(table_bytes),
                                      cudaMemcpyHostToDevice, stream_));
  ORCHMLLM_CUDA_CHECK(cudaEventRecord(upload_done_, stream_));
  const std::int64_t* src = table;
  const std::int64_t* dst = table + n;
  const std::int64_t* bytes = table + 2 * n;

  if (use_thrust) {
    try {
      ::orchmllm::detail::thrust_backend::gather_with_ends(thrust::cuda::par_nosync.on(stream_), in,
                                                           out, src, dst, bytes, table + 3 * n, n,
                                                           total_chunks, chunk_bytes_);
    } catch (const thrust::system_error& e) {
      throw cuda_error(static_cast<cudaError_t>(e.code().value()),
                       ::orchmllm::detail::concat("device_mover::gather (thrust): ", e.what()));
    }
    return;
  }
  const auto first = thrust::counting_iterator<std::int64_t>(0);
  const auto sources =
      thrust::make_transform_iterator(first, detail::cuda_backend::source_pointer{in, src});
  const auto destinations =
      thrust::make_transform_iterator(first, detail::cuda_backend::destination_pointer{out, dst});
  std::size_t temp_bytes = 0;
  ORCHMLLM_CUDA_CHECK(
      cub::DeviceMemcpy::Batched(nullptr, temp_bytes, sources, destinations, bytes, n, stream_));
  std::byte* temp = temp_.reserve(static_cast<std::int64_t>(temp_bytes), stream_);
  ORCHMLLM_CUDA_CHECK(
      cub::DeviceMemcpy::Batched(temp, temp_bytes, sources, destinations, bytes, n, stream_));
}
}  // namespace orchmllm::cuda
