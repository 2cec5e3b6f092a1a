// The entries of `gpubox --help`: a command's synopsis beside what it does,
// laid out in two columns. Pure; any thread.
#pragma once

#include <string>
#include <vector>

namespace gpubox::host::cli {

// One entry: "ls" and "list sandboxes and their state ...". A summary of
// several lines has them separated by '\n', each printed in the second column.
struct HelpLine {
  std::string synopsis;
  std::string summary;
};

// The entries as `gpubox --help` prints them: each synopsis in a column of 35
// after two spaces, its summary beside it (a longer synopsis gets a line of its own).
std::string format_help(const std::vector<HelpLine>& lines);

}  // namespace gpubox::host::cli
