#include "host/cli/help_lines.h"

#include <sstream>

namespace gpubox::host::cli {

namespace {
constexpr std::size_t kSynopsisWidth = 35;
}  // namespace

std::string format_help(const std::vector<HelpLine>& lines) {
  const std::string indent(2 + kSynopsisWidth, ' ');
  std::string text;
  for (const HelpLine& line : lines) {
    text += "  " + line.synopsis;
    if (line.synopsis.size() > kSynopsisWidth) {
      text += "\n" + indent;
    } else {
      text += std::string(kSynopsisWidth - line.synopsis.size(), ' ');
      if (line.synopsis.size() == kSynopsisWidth) text += " ";
    }
    std::istringstream summary(line.summary);
    bool first = true;
    for (std::string part; std::getline(summary, part);) {
      text += (first ? "" : indent) + part + "\n";
      first = false;
    }
  }
  return text;
}

}  // namespace gpubox::host::cli
