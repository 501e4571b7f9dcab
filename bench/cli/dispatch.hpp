#pragma once
// orchmllm-bench dispatch: move the payload of ITEMS.csv along PLAN.csv over a real transport
// (the in-process `local` backend or MPI), check every byte, time it, print the figures as JSON.
//
//   orchmllm-bench dispatch --backend local|mpi --items ITEMS.csv --plan PLAN.csv [--ranks D]
//                           [--gpus-per-node G] [--schedule direct|node-wise|auto] [--repeat K]
//
// Every item carries `bytes` bytes (the ITEMS.csv bytes column, else its length) whose content
// is a function of (source rank, source slot, byte index) (`content_byte`); rows are bytes
// (row_bytes = 1). Each rank:
//   1. builds its source payload (its items in slot order);
//   2. once untimed (warm-up), then K times, each timed step preceded by a barrier:
//      `orchmllm::dispatch` (the whole call: metadata agreement, route build, all-to-alls),
//      `orchmllm::execute` of a route built once beforehand (the data movement alone),
//      `orchmllm::combine` of what dispatch delivered, and with MPI a plain MPI_Alltoallv of
//      the direct schedule's byte matrix (the baseline);
//   3. checks after every step that it holds exactly its planned items, in dst_slot order, with
//      the right sizes and content, and after combine exactly its original payload.
// A step's time is the slowest rank's; the reported time is the median over the K runs. The
// ranks' verdicts are shared (all-gather), so every rank returns the same exit status and rank
// 0 prints one JSON object (keys: `dispatch_command().details`, docs/tool.md).
//
// MPI: run under `mpirun -np D`. The world size must equal the files' rank count. Rank 0 reads
// both files and shares their text, so the other ranks need not see the same file system; every
// rank parses the same text and so fails (or not) identically. Only rank 0 writes to stdout and
// stderr, except for usage errors found before MPI starts (each process reports those). The
// mpi backend is compiled only into orchmllm-bench built with MPI (dispatch_mpi.hpp); MPI is
// initialised only when --backend mpi is chosen.
//
// The parts: dispatch_settings.hpp (flags), dispatch_inputs.hpp (files), dispatch_report.hpp
// (JSON, failures), dispatch_mpi.hpp (the MPI launcher); the measurement itself is the support
// library's (bench/support/dispatch_driver.hpp, payload.hpp), shared with the benchmarks.

#include <ostream>

#include "bench/cli/command.hpp"
#include "bench/cli/dispatch_inputs.hpp"
#include "bench/cli/dispatch_mpi.hpp"
#include "bench/cli/dispatch_report.hpp"
#include "bench/cli/dispatch_settings.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/support/args.hpp"
#include "bench/support/dispatch_driver.hpp"

namespace orchmllm::tool {

/// The local backend: parse in this thread, one thread per rank, rank 0's summary printed here.
int run_dispatch_local(const dispatch_settings& s, std::ostream& out, std::ostream& err);

/// Runs `dispatch`. Returns the exit code (see command.hpp; 1 also when data arrived wrong).
int run_dispatch(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
