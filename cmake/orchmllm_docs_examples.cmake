# Every ```cpp block of docs/*.md is built by the test suite, so the documentation cannot drift
# from the headers:
#  - a block that defines `int main(` is a program: built against the library (through
#    orchmllm_link_planner: the compiled library where it is built, as a trainer that rebuilds
#    often links it; the unit tests cover the header-only mode) and run
#    (test docs.<file>.<n>, n counting the file's ```cpp blocks from 1; exit code 0 passes);
#  - the other ```cpp blocks of one file are fragments: concatenated in order into the body of
#    one function (so a later fragment may use what an earlier one declared), their #include
#    lines hoisted to the top after a few common standard headers and nothing else of the
#    library: the headers a page shows are the headers its fragments compile with; the unit is
#    compiled (target docs_<file>_fragments, linked as the programs), not run.
#    Fragments that include an MPI backend header (orchmllm/backend/mpi/) form their own unit,
#    docs_<file>_mpi_fragments, also linked to orchmllm::mpi and built only when that backend
#    is enabled.
# Blocks fenced otherwise (```text, ```sh, ```cuda) are not built.

# Writes the fragments of one file (their #include lines and body) as one compiled unit.
function(_orchmllm_docs_fragment_unit stem suffix includes body link)
  list(REMOVE_DUPLICATES includes)
  list(JOIN includes "\n" _incs)
  set(_src "${PROJECT_BINARY_DIR}/docs_examples/${stem}_${suffix}.cpp")
  file(WRITE "${_src}.tmp"
    "// The C++ fragments of docs/${stem}.md, in order, as one function body.\n"
    "#include <cstdint>\n#include <cstdio>\n#include <type_traits>\n#include <vector>\n\n"
    "${_incs}\n\n"
    "namespace {\n[[maybe_unused]] void docs_fragments() {\n${body}}\n}  // namespace\n\n"
    "int main() { return 0; }\n")
  file(COPY_FILE "${_src}.tmp" "${_src}" ONLY_IF_DIFFERENT)
  file(REMOVE "${_src}.tmp")
  add_executable(docs_${stem}_${suffix} "${_src}")
  orchmllm_link_planner(docs_${stem}_${suffix} PRIVATE)
  target_link_libraries(docs_${stem}_${suffix} PRIVATE ${link})
  orchmllm_target_warnings(docs_${stem}_${suffix})
  orchmllm_test_optimisation(docs_${stem}_${suffix})
  # Fragments declare names to show them, not to use them.
  target_compile_options(docs_${stem}_${suffix} PRIVATE
    $<$<NOT:$<CXX_COMPILER_ID:MSVC>>:-Wno-unused-variable -Wno-unused-but-set-variable>)
endfunction()

function(orchmllm_add_docs_examples)
  file(GLOB _docs "${PROJECT_SOURCE_DIR}/docs/*.md")
  set(_out "${PROJECT_BINARY_DIR}/docs_examples")
  file(MAKE_DIRECTORY "${_out}")
  foreach(_md IN LISTS _docs)
    get_filename_component(_stem "${_md}" NAME_WE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_md}")
    file(READ "${_md}" _rest)
    set(_n 0)
    set(_frag_includes "")
    set(_frag_body "")
    set(_mpi_includes "")
    set(_mpi_body "")
    while(TRUE)
      string(FIND "${_rest}" "```cpp\n" _b)
      if(_b EQUAL -1)
        break()
      endif()
      math(EXPR _b "${_b} + 7")
      string(SUBSTRING "${_rest}" ${_b} -1 _rest)
      string(FIND "${_rest}" "\n```" _e)
      if(_e EQUAL -1)
        message(FATAL_ERROR "orchmllm: an unterminated ```cpp block in ${_md}")
      endif()
      string(SUBSTRING "${_rest}" 0 ${_e} _code)
      math(EXPR _e "${_e} + 4")
      string(SUBSTRING "${_rest}" ${_e} -1 _rest)
      math(EXPR _n "${_n} + 1")
      if(_code MATCHES "int main\\(")
        set(_src "${_out}/${_stem}_${_n}.cpp")
        file(WRITE "${_src}.tmp" "// Extracted from docs/${_stem}.md, C++ block ${_n}.\n${_code}\n")
        file(COPY_FILE "${_src}.tmp" "${_src}" ONLY_IF_DIFFERENT)
        file(REMOVE "${_src}.tmp")
        add_executable(docs_${_stem}_${_n} "${_src}")
        orchmllm_link_planner(docs_${_stem}_${_n} PRIVATE)
        orchmllm_target_warnings(docs_${_stem}_${_n})
        orchmllm_test_optimisation(docs_${_stem}_${_n})
        add_test(NAME docs.${_stem}.${_n} COMMAND docs_${_stem}_${_n})
        set_tests_properties(docs.${_stem}.${_n} PROPERTIES LABELS "unit;docs")
      else()
        string(REGEX MATCHALL "#include[^\n]*" _incs "${_code}")
        string(REGEX REPLACE "#include[^\n]*" "" _body "${_code}")
        if(_code MATCHES "orchmllm/backend/mpi/")
          list(APPEND _mpi_includes ${_incs})
          string(APPEND _mpi_body "  // docs/${_stem}.md, C++ block ${_n}\n${_body}\n")
        else()
          list(APPEND _frag_includes ${_incs})
          string(APPEND _frag_body "  // docs/${_stem}.md, C++ block ${_n}\n${_body}\n")
        endif()
      endif()
    endwhile()
    if(NOT _frag_body STREQUAL "")
      _orchmllm_docs_fragment_unit(${_stem} fragments "${_frag_includes}" "${_frag_body}"
        orchmllm::orchmllm)
    endif()
    if(NOT _mpi_body STREQUAL "" AND TARGET orchmllm::mpi)
      _orchmllm_docs_fragment_unit(${_stem} mpi_fragments "${_mpi_includes}" "${_mpi_body}"
        orchmllm::mpi)
    endif()
  endforeach()
endfunction()
