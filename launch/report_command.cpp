// `tetra report RUN_DIR`: the goodput report of a run that finished, crashed, or is still going.
#include <iostream>

#include "launch/commands.h"
#include "launch/goodput_report.h"

namespace tetra::launch {

int report_command(const std::string& run_dir) {
  GoodputReport report = load_and_compute(run_dir);
  print_report(report, std::cout);
  write_report(run_dir, report);
  std::cout << "\nwrote " << run_dir << "/goodput.json" << std::endl;
  return 0;
}

}  // namespace tetra::launch
