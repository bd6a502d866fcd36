// `tetra report RUN_DIR [--html [OUT.html]]`: the goodput report of a run that finished, crashed, or
// is still going; with --html also the report page (RUN_DIR/report.html unless OUT.html is given).
#include <iostream>

#include "launch/cli/commands.h"
#include "launch/report/goodput.h"
#include "launch/report/html_page.h"

namespace tetra::launch {

int report_command(const std::string& run_dir, bool html, const std::string& html_path) {
  GoodputReport report = load_and_compute(run_dir);
  print_report(report, std::cout);
  write_report(run_dir, report);
  std::cout << "\nwrote " << run_dir << "/goodput.json" << std::endl;
  if (html) std::cout << "wrote " << write_html_report(run_dir, report, html_path) << std::endl;
  return 0;
}

}  // namespace tetra::launch
