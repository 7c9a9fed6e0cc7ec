#include <iostream>

#include "tools/crihookctl/cli.h"

int main(int argc, char** argv) {
  return crihook::ctl::run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
