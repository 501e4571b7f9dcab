// orchmllm-bench: command-line front end (see bench/cli/tool.hpp and docs/tool.md).
#include <iostream>

#include "bench/cli/tool.hpp"

int main(int argc, char** argv) { return orchmllm::tool::run(argc, argv, std::cout, std::cerr); }
