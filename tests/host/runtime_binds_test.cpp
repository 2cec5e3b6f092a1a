// What a local sandbox brings along of the host to run its agent
// (host/backends/local/runtime_binds.h): RUNPATHs read back as patchelf (an independent
// writer, installed by scripts/setup.sh) wrote them, and the binds chosen for
// an agent, a modeld and a venv inside a covered directory.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "host/backends/local/runtime_binds.h"

namespace gpubox::host {
namespace {

using ::testing::ElementsAre;
namespace fs = std::filesystem;

class RuntimeBinds : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpubox-runtime-XXXXXX";
    dir_ = fs::canonical(::mkdtemp(pattern)).string();
    fs::create_directories(dir_ + "/bin");
    fs::copy_file("/bin/true", dir_ + "/bin/gpubox-agent");
    fs::copy_file("/bin/true", dir_ + "/bin/gpubox-modeld");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void set_runpath(const std::string& file, const std::string& runpath) {
    std::string command = "patchelf --set-rpath '" + runpath + "' '" + file + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command << " (scripts/setup.sh installs patchelf)";
  }
  std::string dir_;
};

TEST_F(RuntimeBinds, ReadsTheRunpathPatchelfWroteWithOriginExpanded) {
  set_runpath(dir_ + "/bin/gpubox-modeld", "$ORIGIN/../venv/lib/site-packages/torch/lib:/usr/lib/x/./y:${ORIGIN}/../other");
  EXPECT_THAT(elf_library_dirs(dir_ + "/bin/gpubox-modeld"),
              ElementsAre(dir_ + "/venv/lib/site-packages/torch/lib", "/usr/lib/x/y", dir_ + "/other"));
}

TEST_F(RuntimeBinds, NoRunpathOrNoElfGivesNothing) {
  EXPECT_TRUE(elf_library_dirs(dir_ + "/bin/gpubox-agent").empty());  // /bin/true has no RUNPATH
  EXPECT_TRUE(elf_library_dirs(dir_ + "/missing").empty());
  std::ofstream(dir_ + "/text") << "#!/bin/sh\necho not an ELF file\n";
  EXPECT_TRUE(elf_library_dirs(dir_ + "/text").empty());
  // Cut short: never a crash nor an invented directory; what is still
  // whole (the section table and the dynamic section) may still be read.
  set_runpath(dir_ + "/bin/gpubox-modeld", "/somewhere");
  std::string bytes;
  {
    std::ifstream in(dir_ + "/bin/gpubox-modeld", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (std::size_t keep : {std::size_t{16}, std::size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream(dir_ + "/cut", std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(keep));
    std::vector<std::string> dirs = elf_library_dirs(dir_ + "/cut");
    EXPECT_TRUE(dirs.empty() || dirs == std::vector<std::string>{"/somewhere"}) << "cut to " << keep << " bytes";
    if (keep <= 64) EXPECT_TRUE(dirs.empty());
  }
}

TEST_F(RuntimeBinds, BringsTheAgentModeldLibrariesAndVenvOutOfCoveredDirectories) {
  for (const char* sub : {"/venv/bin", "/venv/lib/site-packages/torch/lib", "/venv/lib/site-packages/nvidia/lib", "/other"}) {
    fs::create_directories(dir_ + sub);
  }
  set_runpath(dir_ + "/bin/gpubox-modeld",
              "$ORIGIN/../venv/lib/site-packages/torch/lib:$ORIGIN/../venv/lib/site-packages/torch/../nvidia/lib:"
              "$ORIGIN/../other:$ORIGIN/../not-there:/usr/lib");
  fs::create_symlink("/usr/bin/python3", dir_ + "/venv/bin/python");
  std::vector<RootBind> binds = runtime_binds(dir_ + "/bin/gpubox-agent", dir_ + "/venv/bin/python", {dir_});
  std::vector<std::string> seen;
  for (const auto& bind : binds) {
    seen.push_back(bind.source + " -> " + bind.target);
    EXPECT_TRUE(bind.read_only) << bind.source;
  }
  // The site-packages tree once (it lies in the venv), /usr/lib and the
  // real interpreter not at all (not covered), nothing that does not exist.
  EXPECT_THAT(seen, ElementsAre(dir_ + "/bin/gpubox-agent -> /opt/gpubox/bin/gpubox-agent",
                                dir_ + "/bin/gpubox-modeld -> /opt/gpubox/bin/gpubox-modeld",
                                dir_ + "/other -> " + dir_ + "/other", dir_ + "/venv -> " + dir_ + "/venv"));
}

TEST_F(RuntimeBinds, NeverBringsAWholeCoveredDirectoryNorAPythonOnPath) {
  fs::create_symlink("/usr/bin/python3", dir_ + "/bin/python");  // prefix: dir_ itself
  std::vector<RootBind> binds = runtime_binds(dir_ + "/bin/gpubox-agent", dir_ + "/bin/python", {dir_});
  ASSERT_EQ(binds.size(), 2u);  // the agent and modeld only
  EXPECT_EQ(runtime_binds(dir_ + "/bin/gpubox-agent", "python3", {dir_}).size(), 2u);
  EXPECT_TRUE(runtime_binds(dir_ + "/no-agent", "python3", {dir_}).empty());
}

}  // namespace
}  // namespace gpubox::host
