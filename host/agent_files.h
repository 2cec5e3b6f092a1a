// Reading the files an agent leaves for the host (its log, its exit record)
// from a directory that sandbox code may share (podman's state dir) or that
// it must not be able to reach (host_dir()): never through a symbolic link,
// only a regular file, never blocking on a FIFO, never more than asked. A file
// put there in place of the agent's is refused with an error naming it and
// why, not followed. Any thread.
#pragma once

#include <cstddef>
#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace gpubox::host {

// Opens DIR/NAME for reading: DIR and NAME each without following a link
// (O_NOFOLLOW), NAME without blocking (O_NONBLOCK: a FIFO cannot hang the
// host), then fstat: a regular file only. not_found when there is none;
// permission_denied, naming the path and what it is, for anything else.
Result<Fd> open_agent_file(const std::string& dir, const std::string& name);

// Reads up to limit bytes from fd's current offset (a longer file: the first
// limit bytes; *more, when given, says whether there was more).
Result<std::string> read_bounded(int fd, std::size_t limit, bool* more = nullptr);

// open_agent_file then read_bounded from its start.
Result<std::string> read_agent_file(const std::string& dir, const std::string& name, std::size_t limit,
                                    bool* more = nullptr);

}  // namespace gpubox::host
