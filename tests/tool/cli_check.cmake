# End-to-end checks of the real orchmllm-bench binary (registered as ctest tool.cli_<CASE> in
# bench/CMakeLists.txt, next to the executable's definition).
#
#   cmake -DTOOL=<path to orchmllm-bench> -DCASE=plan|bad_input|usage -DWORK_DIR=<scratch dir>
#         -P tests/tool/cli_check.cmake
#
# plan:      generate -> plan -> compare succeed (exit 0); generate is byte-reproducible; PLAN.csv
#            has one row per item; stdout is one JSON object.
# bad_input: malformed ITEMS.csv and infeasible caps exit 2 with a one-line message naming the
#            line/value, print nothing on stdout and leave no output (or temporary) file.
# usage:     usage mistakes exit 2 with a usage line; --help exits 0.

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
  string(CONCAT _re "^{\"algorithm\":\"[a-z]+\",\"requested\":\"auto\",\"items\":1024,"
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
         --cost quadratic:1,0.0005 --algorithm auto --out padded.csv)
  expect_match("${OUT}" "\"algorithm\":\"padded\"" "padded plan stdout")
  run(0 plan --items items.csv --ranks 64 --algorithm lpt --cap 40000 --min-items 1 --out capped.csv)
  string(REGEX MATCH "\"max_tokens\":([0-9]+)," _m "${OUT}")
  if(NOT _m OR CMAKE_MATCH_1 GREATER 40000)
    message(FATAL_ERROR "--cap 40000 not respected: ${OUT}")
  endif()

  run(0 compare --items items.csv --ranks 64)
  expect_match("${OUT}" "\nauto +[0-9]+ +[0-9.]+ " "compare table")
  expect_match("${OUT}" "\nexact +n/a +n = 1024 > 16 items" "compare n/a row")
  run(0 compare --items items.csv --ranks 64 --json)
  string(REGEX MATCHALL "\n" _lines "${OUT}")
  list(LENGTH _lines _nl)
  if(NOT _nl EQUAL 8)
    message(FATAL_ERROR "compare --json printed ${_nl} lines, expected 8:\n${OUT}")
  endif()
  expect_dir_contents(items.csv again.csv plan.csv padded.csv capped.csv)

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
  # A failed run leaves an existing output file as it was.
  file(WRITE "${WORK_DIR}/plan.csv" "keep me\n")
  file(WRITE "${WORK_DIR}/items.csv" "${_h}0,0,-1\n")
  run(2 plan --items items.csv --ranks 4 --out plan.csv)
  file(READ "${WORK_DIR}/plan.csv" _kept)
  if(NOT _kept STREQUAL "keep me\n")
    message(FATAL_ERROR "a failed run modified the existing output file")
  endif()
  expect_dir_contents(items.csv plan.csv)

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
  expect_dir_contents(items.csv)

else()
  message(FATAL_ERROR "cli_check.cmake: unknown CASE '${CASE}'")
endif()
