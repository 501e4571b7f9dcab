# End-to-end checks of the real orchmllm-bench binary (registered as ctest tool.cli_<CASE> in
# bench/CMakeLists.txt, next to the executable's definition).
#
#   cmake -DTOOL=<path to orchmllm-bench> -DCASE=plan|bad_input|usage|dispatch
#         -DWORK_DIR=<scratch dir> -P tests/tool/cli_check.cmake
#   cmake ... -DCASE=dispatch_mpi -DMPIEXEC=<mpiexec> -DMPIEXEC_NUMPROC_FLAG=-np
#         [-DMPIEXEC_OVERSUBSCRIBE=--oversubscribe] -P tests/tool/cli_check.cmake
#
# plan:      generate -> plan -> compare succeed (exit 0); generate is byte-reproducible; PLAN.csv
#            has one row per item; stdout is one JSON object; --gpus-per-node 4 maps with
#            transport (inter_node_bytes reported); --mapping bottleneck and --algorithm locality
#            run; --mapping transport without it exits 2.
# bad_input: malformed ITEMS.csv, infeasible caps and sizes past 2^63 exit 2 with a one-line
#            message naming the line/value, print nothing on stdout and leave no output (or
#            temporary) file; --out onto a FIFO or device node exits 2 and keeps it, through a
#            symlink writes the target.
# simulate:  workload writes the three stage files; simulate prints one JSON object per
#            scenario (simulated: true, mfu, overhead_fraction); unknown names exit 2.
# usage:     usage mistakes exit 2 with a usage line; --help exits 0.
# dispatch:  generate -> plan -> dispatch --backend local on 8 ranks faked as 4 nodes of 2
#            (--gpus-per-node 2), every schedule: one JSON line, verified true, the requested
#            schedule used, moved = intra + inter = the plan's bytes_moved; one node has no
#            inter-node bytes; bad dispatch input exits 2 with one line and no stdout.
# dispatch_mpi: the same files under `mpiexec -np 8 orchmllm-bench dispatch --backend mpi
#            --gpus-per-node 4` (2 faked nodes of 4), every schedule, verified true with an
#            alltoallv baseline; a world of 3 ranks for 8-rank files and a missing PLAN.csv exit
#            2, reported once (by rank 0); so do ranks started with other flags (MPMD).

cmake_minimum_required(VERSION 3.25)

foreach(_var TOOL CASE WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "cli_check.cmake: -D${_var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# run(<expected exit code> <args...>): runs the tool in WORK_DIR; sets OUT and ERR.
function(run expected)
  execute_process(COMMAND "${TOOL}" ${ARGN}
    WORKING_DIRECTORY "${WORK_DIR}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${expected}")
    message(FATAL_ERROR "orchmllm-bench ${ARGN}: exit ${rc}, expected ${expected}\n"
                        "stdout: ${out}\nstderr: ${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
endfunction()

function(expect_match text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: '${text}' does not match '${regex}'")
  endif()
endfunction()

# The directory holds exactly the given names (hidden temporary files included).
function(expect_dir_contents)
  file(GLOB _entries RELATIVE "${WORK_DIR}" LIST_DIRECTORIES true "${WORK_DIR}/*" "${WORK_DIR}/.*")
  list(SORT _entries)
  set(_want ${ARGN})
  list(SORT _want)
  if(NOT "${_entries}" STREQUAL "${_want}")
    message(FATAL_ERROR "directory ${WORK_DIR} holds '${_entries}', expected '${_want}'")
  endif()
endfunction()

if(CASE STREQUAL "plan")
  run(0 generate --ranks 64 --items-per-rank 16 --seed 7 --out items.csv)
  expect_match("${OUT}" "^{\"items\":1024,.*}\n$" "generate stdout")
  run(0 generate --ranks 64 --items-per-rank 16 --seed 7 --out again.csv)
  file(SHA256 "${WORK_DIR}/items.csv" _a)
  file(SHA256 "${WORK_DIR}/again.csv" _b)
  if(NOT _a STREQUAL _b)
    message(FATAL_ERROR "generate with the same seed wrote different files")
  endif()

  run(0 plan --items items.csv --ranks 64 --out plan.csv)
  string(CONCAT _re "^{\"algorithm\":\"[a-z_]+\",\"requested\":\"automatic\",\"items\":1024,"
                   "\"ranks\":64,.*\"makespan\":[0-9]+,.*\"lower_bound\":[0-9]+,.*"
                   "\"plan_seconds\":[0-9.e+-]+,.*}\n$")
  expect_match("${OUT}" "${_re}" "plan stdout")
  file(STRINGS "${WORK_DIR}/plan.csv" _rows)
  list(LENGTH _rows _n)
  if(NOT _n EQUAL 1025)
    message(FATAL_ERROR "plan.csv has ${_n} lines, expected 1 header + 1024 rows")
  endif()
  list(GET _rows 0 _header)
  expect_match("${_header}" "^rank,slot,dst_rank,dst_slot$" "plan.csv header")

  run(0 plan --items items.csv --ranks 64 --policy padded --pad-multiple 8
         --cost quadratic:1,0.0005 --algorithm automatic --out padded.csv)
  expect_match("${OUT}" "\"algorithm\":\"padded_exact\"" "padded plan stdout")
  # Proven optimal without a cap: the reported bound is the optimum, so the ratio is exactly 1.
  expect_match("${OUT}" "\"ratio\":1,[^\n]*\"proven_optimal\":true" "padded plan ratio")
  run(0 plan --items items.csv --ranks 64 --algorithm lpt --cap 40000 --min-items 1 --out capped.csv)
  string(REGEX MATCH "\"max_tokens\":([0-9]+)," _m "${OUT}")
  if(NOT _m OR CMAKE_MATCH_1 GREATER 40000)
    message(FATAL_ERROR "--cap 40000 not respected: ${OUT}")
  endif()

  run(0 plan --items items.csv --ranks 64 --gpus-per-node 4 --out mapped.csv)
  expect_match("${OUT}" "\"gpus_per_node\":4,\"mapping\":\"transport\"" "mapped plan mapping")
  expect_match("${OUT}" "\"inter_node_bytes\":[0-9]+," "mapped plan inter_node_bytes")
  file(STRINGS "${WORK_DIR}/mapped.csv" _rows)
  list(LENGTH _rows _n)
  if(NOT _n EQUAL 1025)
    message(FATAL_ERROR "mapped.csv has ${_n} lines, expected 1 header + 1024 rows")
  endif()
  run(0 plan --items items.csv --ranks 64 --gpus-per-node 4 --mapping bottleneck --out bn.csv)
  expect_match("${OUT}" "\"mapping\":\"bottleneck\"" "bottleneck mapping")
  expect_match("${OUT}" "\"mapping_solver\":\"(local-search|glpk)\"" "bottleneck solver")
  run(0 plan --items items.csv --ranks 64 --gpus-per-node 4 --algorithm locality
         --locality-tolerance 0.01 --out loc.csv)
  expect_match("${OUT}" "\"requested\":\"locality\"" "locality requested")
  run(2 plan --items items.csv --ranks 64 --mapping transport --out unmapped.csv)
  expect_match("${ERR}" "--mapping transport needs --gpus-per-node" "transport without G")

  run(0 compare --items items.csv --ranks 64)
  expect_match("${OUT}" "\nautomatic +[0-9]+ +[0-9.]+ " "compare table")
  expect_match("${OUT}" "\nexact +n/a +n = 1024 > 16 items" "compare n/a row")
  run(0 compare --items items.csv --ranks 64 --json)
  string(REGEX MATCHALL "\n" _lines "${OUT}")
  list(LENGTH _lines _nl)
  # identity, lpt(+refine), karmarkar_karp(+refine), karmarkar_karp_equal(+refine), exact,
  # padded_exact, automatic
  if(NOT _nl EQUAL 10)
    message(FATAL_ERROR "compare --json printed ${_nl} lines, expected 10:\n${OUT}")
  endif()
  expect_dir_contents(items.csv again.csv plan.csv padded.csv capped.csv mapped.csv bn.csv loc.csv)

elseif(CASE STREQUAL "bad_input")
  # <name> <file content> <stderr regex> [extra flags...]
  function(bad name content regex)
    file(WRITE "${WORK_DIR}/items.csv" "${content}")
    run(2 plan --items items.csv --ranks 4 --out plan.csv ${ARGN})
    if(NOT OUT STREQUAL "")
      message(FATAL_ERROR "${name}: stdout not empty: ${OUT}")
    endif()
    expect_match("${ERR}" "^orchmllm-bench plan: [^\n]*${regex}[^\n]*\n$" "${name}: stderr")
    expect_dir_contents(items.csv)
  endfunction()
  set(_h "rank,slot,length\n")
  bad("empty file" "" "items.csv: empty file")
  bad("missing column" "rank,slot\n0,0\n" "items.csv:1: header lacks column 'length'")
  bad("extra column" "rank,slot,length,bytes,x\n" "items.csv:1: unexpected extra column 'x'")
  bad("non-integer" "${_h}0,0,12\n0,1,12x\n" "items.csv:3: length '12x' is not an integer")
  bad("negative length" "${_h}0,0,-5\n" "items.csv:2: negative length -5")
  bad("duplicate slot" "${_h}0,0,5\n0,0,6\n" "items.csv:3: duplicate item \\(rank 0, slot 0\\)")
  bad("gapped slots" "${_h}0,0,5\n0,2,6\n" "items.csv:3: rank 0 has slot 2 but no slot 1")
  bad("rank >= D" "${_h}0,0,5\n4,0,6\n" "items.csv:3: rank 4 is not below the rank count 4")
  bad("single item above cap" "${_h}1,0,5\n0,0,99\n" "items.csv:3: .*99 tokens.*cap of 50" --cap 50)
  bad("total above cap" "${_h}0,0,40\n1,0,40\n2,0,40\n3,0,40\n0,1,40\n" "cap" --cap 45)
  # Sizes near 2^63: exact figures or a clear error, never a wrapped one (these run
  # under UBSan in the asan preset).
  bad("padded tokens past 2^63" "${_h}0,0,1\n1,0,1\n"
      "2 items padded to 9223372036854775807 tokens exceed 2\\^63 - 1 tokens"
      --policy padded --pad-multiple 9223372036854775807)
  bad("padded length past 2^63" "${_h}0,0,9223372036854775801\n"
      "padded to a multiple of 8 exceeds 2\\^63 - 1" --policy padded --pad-multiple 8)
  bad("infinite costs" "${_h}0,0,1\n1,0,2\n" "is inf, must be finite" --cost quadratic:1,1e308)
  file(WRITE "${WORK_DIR}/items.csv" "${_h}0,0,9223372036854775807\n")
  # plan maps bins to ranks, whose flow solver has a documented byte limit: a clear exit 2.
  run(2 plan --items items.csv --ranks 3 --out plan.csv)
  expect_match("${ERR}" "^orchmllm-bench plan: bin [0-9] holds more than 329406144173384850 bytes [^\n]*\n$"
               "plan on one item of 2^63 - 1")
  expect_dir_contents(items.csv)
  run(0 compare --items items.csv --ranks 3 --json)
  expect_match("${OUT}" "\"algorithm\":\"automatic\",\"status\":\"ok\",[^\n]*\"makespan\":9223372036854775807,\"lower_bound\":9223372036854775807,\"ratio\":1,"
               "compare on one item of 2^63 - 1")
  # --out onto what is not a regular file: a FIFO and a device node are refused (exit 2) and
  # kept as they were; a symbolic link to a regular file is written through.
  file(WRITE "${WORK_DIR}/items.csv" "${_h}0,0,5\n1,0,3\n")
  set(_nodes "")
  execute_process(COMMAND mkfifo "${WORK_DIR}/fifo" RESULT_VARIABLE _rc)
  if(_rc EQUAL 0)
    list(APPEND _nodes "fifo|-p|is a FIFO")
  endif()
  execute_process(COMMAND mknod "${WORK_DIR}/null" c 1 3 RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0)  # needs CAP_MKNOD: root outside most containers
    list(APPEND _nodes "null|-c|is a character device")
  else()
    message(STATUS "mknod not permitted here: the device-node case is skipped")
  endif()
  foreach(_node IN LISTS _nodes)
    string(REPLACE "|" ";" _node "${_node}")
    list(GET _node 0 _name)
    list(GET _node 1 _test)
    list(GET _node 2 _why)
    run(2 plan --items items.csv --ranks 4 --out ${_name})
    expect_match("${ERR}" "^orchmllm-bench plan: [^\n]*${_name}' ${_why}, not a regular file: not replacing it\n$"
                 "--out ${_name}")
    execute_process(COMMAND test ${_test} "${WORK_DIR}/${_name}" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "--out ${_name} did not leave the node as it was")
    endif()
    file(REMOVE "${WORK_DIR}/${_name}")
  endforeach()
  file(WRITE "${WORK_DIR}/target.csv" "old\n")
  file(CREATE_LINK target.csv "${WORK_DIR}/link.csv" SYMBOLIC)
  run(0 plan --items items.csv --ranks 4 --out link.csv)
  if(NOT IS_SYMLINK "${WORK_DIR}/link.csv")
    message(FATAL_ERROR "--out link.csv replaced the link")
  endif()
  file(STRINGS "${WORK_DIR}/target.csv" _rows LIMIT_COUNT 1)
  expect_match("${_rows}" "^rank,slot,dst_rank,dst_slot$" "--out through a symlink")
  file(REMOVE "${WORK_DIR}/link.csv" "${WORK_DIR}/target.csv")
  expect_dir_contents(items.csv)
  # A failed run leaves an existing output file as it was.
  file(WRITE "${WORK_DIR}/plan.csv" "keep me\n")
  file(WRITE "${WORK_DIR}/items.csv" "${_h}0,0,-1\n")
  run(2 plan --items items.csv --ranks 4 --out plan.csv)
  file(READ "${WORK_DIR}/plan.csv" _kept)
  if(NOT _kept STREQUAL "keep me\n")
    message(FATAL_ERROR "a failed run modified the existing output file")
  endif()
  expect_dir_contents(items.csv plan.csv)

elseif(CASE STREQUAL "simulate")
  run(0 workload --name omni-pretrain --ranks 16 --samples-per-rank 2 --out-dir w)
  expect_match("${OUT}" "^\\{\"workload\":\"omni-pretrain\",\"ranks\":16," "workload stdout")
  foreach(_f audio llm)
    file(STRINGS "${WORK_DIR}/w/${_f}.csv" _rows LIMIT_COUNT 1)
    expect_match("${_rows}" "^rank,slot,length,bytes$" "${_f}.csv header")
  endforeach()
  # vision.csv: the segments column (a video's temporal groups) when the batch has videos,
  # which plan reads back.
  file(STRINGS "${WORK_DIR}/w/vision.csv" _rows LIMIT_COUNT 1)
  expect_match("${_rows}" "^rank,slot,length,bytes(,segments)?$" "vision.csv header")
  run(0 plan --items w/vision.csv --ranks 16 --out w/vision_plan.csv)
  expect_match("${OUT}" "\"makespan\":" "plan on the workload's vision.csv")
  file(REMOVE "${WORK_DIR}/w/vision_plan.csv")
  run(2 workload --name no-such --ranks 16 --out-dir w2)
  expect_match("${ERR}" "--name" "unknown workload")
  foreach(_s none llm-only per-stage full beyond)
    run(0 simulate --workload omni-pretrain --ranks 32 --gpus-per-node 8 --scenario ${_s}
           --samples-per-rank 2)
    expect_match("${OUT}" "^\\{\"simulated\":true,\"scenario\":\"${_s}\"" "simulate ${_s}")
    expect_match("${OUT}" "\"mfu\":[0-9.e-]+," "simulate ${_s} mfu")
    expect_match("${OUT}" "\"overhead_fraction\":[0-9.e-]+," "simulate ${_s} overhead")
  endforeach()
  run(2 simulate --workload vl-sft --ranks 32 --gpus-per-node 8 --scenario fastest)
  expect_match("${ERR}" "--scenario" "unknown scenario")
  expect_dir_contents(w)

elseif(CASE STREQUAL "usage")
  run(0 --help)
  expect_match("${OUT}" "plan" "--help")
  run(0 help plan)
  expect_match("${OUT}" "--items ITEMS.csv" "help plan")
  run(2)
  expect_match("${ERR}" "missing subcommand\nusage: orchmllm-bench" "no arguments")
  run(2 frobnicate)
  expect_match("${ERR}" "unknown subcommand 'frobnicate'" "unknown subcommand")
  file(WRITE "${WORK_DIR}/items.csv" "rank,slot,length\n0,0,5\n")
  run(2 plan --items items.csv --ranks 2)
  expect_match("${ERR}" "missing required flag --out\nusage: orchmllm-bench plan " "missing --out")
  run(2 plan --items items.csv --ranks 2 --out plan.csv --frob 1)
  expect_match("${ERR}" "unknown flag --frob\nusage: " "unknown flag")
  run(2 plan --items items.csv --ranks --out plan.csv)
  expect_match("${ERR}" "flag --ranks needs a value" "missing value")
  # --algorithm takes the balancers' names (a short name such as 'auto' gets a hint naming the
  # balancer), --mapping the mappers'.
  run(2 plan --items items.csv --ranks 2 --out plan.csv --algorithm auto)
  string(CONCAT _re "--algorithm: unknown balancer 'auto' \\(did you mean 'automatic'\\?\\); "
                    "expected one of: identity, lpt, karmarkar_karp, karmarkar_karp_equal, "
                    "exact, padded_exact, automatic, locality\nusage: orchmllm-bench plan ")
  expect_match("${ERR}" "${_re}" "a short balancer name")
  run(2 plan --items items.csv --ranks 2 --out plan.csv --mapping greedy)
  string(CONCAT _re "--mapping: unknown mapper 'greedy'; "
                    "expected one of: identity, transport, bottleneck, auction")
  expect_match("${ERR}" "${_re}" "unknown mapper")
  run(0 plan --items items.csv --ranks 2 --out plan.csv --algorithm karmarkar_karp_equal)
  string(CONCAT _re "^{\"algorithm\":\"karmarkar_karp_equal\","
                    "\"requested\":\"karmarkar_karp_equal\",")
  expect_match("${OUT}" "${_re}" "karmarkar_karp_equal plan")
  file(REMOVE "${WORK_DIR}/plan.csv")
  expect_dir_contents(items.csv)

elseif(CASE STREQUAL "dispatch" OR CASE STREQUAL "dispatch_mpi")
  # JSON integer field <key> of <json> into <out>.
  function(json_int json key out)
    if(NOT json MATCHES "\"${key}\":([0-9]+)[,}]")
      message(FATAL_ERROR "no integer \"${key}\" in: ${json}")
    endif()
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  endfunction()
  # Checks one dispatch JSON line: verified, the schedule used, the byte accounting.
  function(check_dispatch json backend nodes gpus schedule bytes_moved)
    string(CONCAT _re "^{\"verified\":true,\"backend\":\"${backend}\",\"ranks\":8,"
                     "\"nodes\":${nodes},\"gpus_per_node\":${gpus},\"schedule\":\"[a-z-]+\","
                     "\"requested_schedule\":\"${schedule}\",.*\"dispatch_seconds\":[0-9.e+-]+,"
                     "\"execute_seconds\":[0-9.e+-]+,\"route_seconds\":[0-9.e+-]+,"
                     "\"combine_seconds\":[0-9.e+-]+,"
                     "\"alltoallv_seconds\":[^,]+,.*}\n$")
    expect_match("${json}" "${_re}" "dispatch ${backend} ${schedule} stdout")
    if(NOT schedule STREQUAL "auto")
      expect_match("${json}" "\"schedule\":\"${schedule}\"" "schedule used")
    endif()
    if(backend STREQUAL "mpi")
      expect_match("${json}" "\"alltoallv_seconds\":[0-9]" "alltoallv baseline")
    else()
      expect_match("${json}" "\"alltoallv_seconds\":null" "no baseline for local")
    endif()
    json_int("${json}" moved_bytes _moved)
    json_int("${json}" intra_node_bytes _intra)
    json_int("${json}" inter_node_bytes _inter)
    math(EXPR _sum "${_intra} + ${_inter}")
    if(NOT _moved EQUAL _sum OR NOT _moved EQUAL bytes_moved)
      message(FATAL_ERROR "moved_bytes ${_moved}, intra ${_intra} + inter ${_inter}, plan's "
                          "bytes_moved ${bytes_moved}: ${json}")
    endif()
    if(nodes EQUAL 1 AND NOT _inter EQUAL 0)
      message(FATAL_ERROR "one node but ${_inter} inter-node bytes: ${json}")
    endif()
  endfunction()

  run(0 generate --ranks 8 --items-per-rank 12 --seed 5 --bytes-per-token 3 --out items.csv)
  run(0 plan --items items.csv --ranks 8 --out plan.csv)
  json_int("${OUT}" bytes_moved _plan_moved)
  if(_plan_moved EQUAL 0)
    message(FATAL_ERROR "the test plan moves nothing: ${OUT}")
  endif()

  if(CASE STREQUAL "dispatch")
    foreach(_s IN ITEMS direct node-wise auto)
      run(0 dispatch --backend local --items items.csv --plan plan.csv --gpus-per-node 2
             --schedule ${_s} --repeat 2)
      check_dispatch("${OUT}" local 4 2 ${_s} ${_plan_moved})
      if(NOT ERR STREQUAL "")
        message(FATAL_ERROR "dispatch wrote to stderr: ${ERR}")
      endif()
    endforeach()
    # A deadline on every wait does not get in the way of a healthy exchange.
    run(0 dispatch --backend local --items items.csv --plan plan.csv --gpus-per-node 2
           --repeat 1 --timeout 60)
    check_dispatch("${OUT}" local 4 2 auto ${_plan_moved})
    # Defaults: one node (no inter-node bytes), the rank count inferred from the files.
    run(0 dispatch --backend local --items items.csv --plan plan.csv --repeat 1)
    check_dispatch("${OUT}" local 1 8 auto ${_plan_moved})
    # Items without a bytes column carry their length in bytes; --ranks given explicitly.
    run(0 generate --ranks 8 --items-per-rank 5 --seed 9 --out short.csv)
    run(0 plan --items short.csv --ranks 8 --out short_plan.csv)
    json_int("${OUT}" bytes_moved _short_moved)
    run(0 dispatch --backend local --items short.csv --plan short_plan.csv --ranks 8
           --gpus-per-node 3 --schedule node-wise --repeat 1)
    check_dispatch("${OUT}" local 3 3 node-wise ${_short_moved})

    # Bad input: exit 2, one line on stderr, nothing on stdout.
    function(bad_dispatch regex)
      run(2 dispatch ${ARGN})
      if(NOT OUT STREQUAL "")
        message(FATAL_ERROR "dispatch ${ARGN}: stdout not empty: ${OUT}")
      endif()
      expect_match("${ERR}" "^orchmllm-bench dispatch: [^\n]*${regex}" "dispatch ${ARGN}")
    endfunction()
    bad_dispatch("short_plan.csv: no row for source item 5\n$"
                 --backend local --items items.csv --plan short_plan.csv)
    bad_dispatch("items.csv:[0-9]+: rank 4 is not below the rank count 4"
                 --backend local --items items.csv --plan plan.csv --ranks 4)
    bad_dispatch("--backend is 'tcp', expected 'local' or 'mpi'\nusage: orchmllm-bench dispatch"
                 --backend tcp --items items.csv --plan plan.csv)
    bad_dispatch("--schedule is 'ring'" --backend local --items items.csv --plan plan.csv
                 --schedule ring)
    bad_dispatch("--repeat is 0, must be in \\[1, 1000\\]" --backend local --items items.csv
                 --plan plan.csv --repeat 0)
    bad_dispatch("missing required flag --plan" --backend local --items items.csv)
    bad_dispatch("--timeout is 0.000000 seconds, must be in \\(0, 86400\\]" --backend local
                 --items items.csv --plan plan.csv --timeout 0)
    bad_dispatch("cannot open 'nope.csv'" --backend local --items items.csv --plan nope.csv)
    run(0 help dispatch)
    expect_match("${OUT}" "--backend local\\|mpi" "help dispatch")
    expect_dir_contents(items.csv plan.csv short.csv short_plan.csv)
  else()
    foreach(_var MPIEXEC MPIEXEC_NUMPROC_FLAG)
      if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
        message(FATAL_ERROR "cli_check.cmake: CASE dispatch_mpi needs -D${_var}=...")
      endif()
    endforeach()
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
    set(ENV{OMPI_MCA_rmaps_base_oversubscribe} 1)
    # run_mpi(<expected exit code> <ranks> <args...>): the tool under mpiexec; sets OUT and ERR.
    function(run_mpi expected ranks)
      execute_process(COMMAND "${MPIEXEC}" ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${MPIEXEC_OVERSUBSCRIBE}
                              "${TOOL}" ${ARGN}
        WORKING_DIRECTORY "${WORK_DIR}" TIMEOUT 120
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
      if(NOT rc STREQUAL "${expected}")
        message(FATAL_ERROR "mpiexec -np ${ranks} orchmllm-bench ${ARGN}: exit ${rc}, expected "
                            "${expected}\nstdout: ${out}\nstderr: ${err}")
      endif()
      set(OUT "${out}" PARENT_SCOPE)
      set(ERR "${err}" PARENT_SCOPE)
    endfunction()
    foreach(_s IN ITEMS direct node-wise auto)
      run_mpi(0 8 dispatch --backend mpi --items items.csv --plan plan.csv --gpus-per-node 4
                 --schedule ${_s} --repeat 2)
      check_dispatch("${OUT}" mpi 2 4 ${_s} ${_plan_moved})
    endforeach()
    # Under a deadline (non-blocking MPI collectives, polled): the same result.
    run_mpi(0 8 dispatch --backend mpi --items items.csv --plan plan.csv --gpus-per-node 4
               --repeat 1 --timeout 60)
    check_dispatch("${OUT}" mpi 2 4 auto ${_plan_moved})
    run_mpi(2 3 dispatch --backend mpi --items items.csv --plan plan.csv --repeat 1)
    if(NOT OUT STREQUAL "")
      message(FATAL_ERROR "wrong world size: stdout not empty: ${OUT}")
    endif()
    string(REGEX MATCHALL "the MPI world has 3 ranks but the files describe 8" _hits "${ERR}")
    list(LENGTH _hits _n)
    if(NOT _n EQUAL 1)
      message(FATAL_ERROR "wrong world size reported ${_n} times (expected once by rank 0):\n${ERR}")
    endif()
    # Ranks started with other flags (MPMD: 4 ranks --repeat 3, 4 ranks --repeat 5): every
    # rank sees the disagreement before any other collective; exit 2, reported once, no hang.
    execute_process(COMMAND "${MPIEXEC}" ${MPIEXEC_NUMPROC_FLAG} 4 ${MPIEXEC_OVERSUBSCRIBE}
                            "${TOOL}" dispatch --backend mpi --items items.csv --plan plan.csv
                            --repeat 3
                            : ${MPIEXEC_NUMPROC_FLAG} 4 "${TOOL}" dispatch --backend mpi
                            --items items.csv --plan plan.csv --repeat 5
      WORKING_DIRECTORY "${WORK_DIR}" TIMEOUT 120
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
    string(REGEX MATCHALL "rank 4 was started with other dispatch flags than rank 0" _hits "${_err}")
    list(LENGTH _hits _n)
    if(NOT _rc EQUAL 2 OR NOT _out STREQUAL "" OR NOT _n EQUAL 1)
      message(FATAL_ERROR "ranks with other flags: exit ${_rc}, stdout '${_out}', message ${_n} "
                          "times:\n${_err}")
    endif()
    # A file only rank 0 would read: every rank fails alike, rank 0 reports once.
    run_mpi(2 4 dispatch --backend mpi --items items.csv --plan nope.csv --repeat 1)
    string(REGEX MATCHALL "cannot open 'nope.csv'" _hits "${ERR}")
    list(LENGTH _hits _n)
    if(NOT OUT STREQUAL "" OR NOT _n EQUAL 1)
      message(FATAL_ERROR "missing file under MPI: stdout '${OUT}', message ${_n} times:\n${ERR}")
    endif()
    expect_dir_contents(items.csv plan.csv)
  endif()

else()
  message(FATAL_ERROR "cli_check.cmake: unknown CASE '${CASE}'")
endif()
