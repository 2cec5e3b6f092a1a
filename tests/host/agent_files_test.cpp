// host/agent_files.h: what stands where the agent's log or exit record
// should be is read only when it is a regular file, never through a link,
// never blocking on a FIFO, and never past the bound; a refusal names the
// file and what it is.
#include "host/agent_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "tests/unit/temp_dir.h"

namespace gpubox::host {
namespace {

using ::testing::HasSubstr;

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(AgentFiles, ReadsARegularFileUpToTheBound) {
  test::TempDir dir;
  write(dir.file("exit.json"), "{\"reason\": \"terminated\"}\n");
  bool more = true;
  auto text = read_agent_file(dir.path(), "exit.json", 1024, &more);
  ASSERT_TRUE(text) << text.status().message();
  EXPECT_EQ(*text, "{\"reason\": \"terminated\"}\n");
  EXPECT_FALSE(more);
  text = read_agent_file(dir.path(), "exit.json", 5, &more);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "{\"rea");
  EXPECT_TRUE(more);
}

TEST(AgentFiles, AMissingFileIsNotFound) {
  test::TempDir dir;
  auto text = read_agent_file(dir.path(), "agent.log", 1024);
  ASSERT_FALSE(text);
  EXPECT_EQ(text.status().code(), ErrorCode::not_found);
  EXPECT_THAT(text.status().message(), HasSubstr(dir.file("agent.log")));
}

TEST(AgentFiles, ASymbolicLinkIsRefusedNotFollowed) {
  test::TempDir dir;
  write(dir.file("host-secret"), "secret\n");
  ASSERT_EQ(::symlink(dir.file("host-secret").c_str(), dir.file("agent.log").c_str()), 0);
  auto text = read_agent_file(dir.path(), "agent.log", 1024);
  ASSERT_FALSE(text);
  EXPECT_EQ(text.status().code(), ErrorCode::permission_denied);
  EXPECT_THAT(text.status().message(), HasSubstr("'" + dir.file("agent.log") + "' is a symbolic link"));
  EXPECT_THAT(text.status().message(), HasSubstr("refused"));
  // A linked directory is refused too.
  ASSERT_EQ(::mkdir(dir.file("real").c_str(), 0700), 0);
  write(dir.file("real/exit.json"), "{}");
  ASSERT_EQ(::symlink(dir.file("real").c_str(), dir.file("linked").c_str()), 0);
  auto through = read_agent_file(dir.file("linked"), "exit.json", 1024);
  ASSERT_FALSE(through);
  EXPECT_THAT(through.status().message(), HasSubstr("'" + dir.file("linked") + "' is a symbolic link"));
}

TEST(AgentFiles, AFifoIsRefusedWithoutBlocking) {
  test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("agent.log").c_str(), 0600), 0);
  auto began = std::chrono::steady_clock::now();
  auto text = read_agent_file(dir.path(), "agent.log", 1024);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(2));
  ASSERT_FALSE(text);
  EXPECT_EQ(text.status().code(), ErrorCode::permission_denied);
  EXPECT_THAT(text.status().message(), HasSubstr("'" + dir.file("agent.log") + "' is a FIFO"));
}

TEST(AgentFiles, ADirectoryOrSocketIsRefused) {
  test::TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("exit.json").c_str(), 0700), 0);
  auto text = read_agent_file(dir.path(), "exit.json", 1024);
  ASSERT_FALSE(text);
  EXPECT_THAT(text.status().message(), HasSubstr("'" + dir.file("exit.json") + "' is a directory"));

  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::string path = dir.file("agent.log");
  ASSERT_LT(path.size(), sizeof address.sun_path);
  path.copy(address.sun_path, path.size());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  auto socket_text = read_agent_file(dir.path(), "agent.log", 1024);
  ::close(sock);
  ASSERT_FALSE(socket_text);
  EXPECT_EQ(socket_text.status().code(), ErrorCode::permission_denied);
  EXPECT_THAT(socket_text.status().message(), HasSubstr("'" + path + "' is a socket"));
}

}  // namespace
}  // namespace gpubox::host
