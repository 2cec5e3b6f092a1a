// Text from outside (sandbox names, reservation ids, errors, tags, what an
// agent or a journal says) made safe to print on a terminal: nothing in it
// can move the cursor, retitle or clear the window, or reorder what is shown.
// The one escaper of every CLI printer of untrusted strings. Pure; any thread.
#pragma once

#include <string>
#include <string_view>

namespace gpubox {

// C0 controls, DEL and C1 controls (raw or UTF-8 encoded) become \xNN or
// \uNNNN; so do the bidirectional controls (U+200E/F LRM/RLM, U+061C ALM,
// U+202A-202E embeddings and overrides, U+2066-2069 isolates) and the line
// and paragraph separators U+2028/2029; invalid UTF-8 goes out byte by byte
// as \xNN; a backslash becomes \\. keep_newlines: '\n' stays (a message of
// several lines), every other control is still escaped.
std::string escape_for_terminal(std::string_view text, bool keep_newlines = false);

}  // namespace gpubox
