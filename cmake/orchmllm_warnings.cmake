# Warning flags for orchmllm's own tests, benchmarks and examples.
# Never applied to the orchmllm INTERFACE target (consumers pick their own flags).
# Warnings are intentionally non-fatal (no -Werror).
include_guard(GLOBAL)

function(orchmllm_target_warnings target)
  if(MSVC)
    target_compile_options(${target} PRIVATE /W4 /permissive-)
  else()
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
  endif()
endfunction()
