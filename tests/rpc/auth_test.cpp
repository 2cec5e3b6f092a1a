// CURVE and the ZAP allow-list on tcp://, against the real agent. A refused
// client must never get a method executed: each refused attempt sends a
// proc.exec that would create a marker file, and the marker must not appear.
#include <sys/stat.h>
#include <sys/time.h>

#include <fstream>

#include "tests/rpc/rpc_test_support.h"

namespace gpubox::testing {
namespace {

class AuthTest : public RpcTest {
 protected:
  std::string marker() const { return agent_->path("marker"); }
  json touch_marker() const { return json{{"argv", {"/usr/bin/touch", marker()}}}; }

  // The positive control: the same request from the authorized client creates the marker.
  void expect_authorized_client_creates_marker() {
    EXPECT_FALSE(file_exists(marker())) << "a refused client got proc.exec executed";
    auto client = tcp_client();
    ASSERT_TRUE(client);
    auto result = client->call("proc.exec", touch_marker(), waiting());
    ASSERT_TRUE(result) << result.status().to_string();
    EXPECT_EQ((*result)["exit_code"], 0);
    EXPECT_TRUE(file_exists(marker()));
  }
};

TEST_F(AuthTest, AuthorizedKeyCallsOverTcp) {
  ASSERT_NO_FATAL_FAILURE(start());
  ASSERT_FALSE(tcp_endpoint().empty());
  EXPECT_EQ(tcp_endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << tcp_endpoint();
  EXPECT_EQ(tcp_endpoint().find(":0"), std::string::npos) << "port 0 was not replaced";
  auto client = tcp_client();
  ASSERT_TRUE(client);
  auto pong = client->call("sys.ping", json{{"hello", "tcp"}}, waiting());
  ASSERT_TRUE(pong) << pong.status().to_string();
  EXPECT_EQ((*pong)["pong"], true);
  EXPECT_EQ((*pong)["echo"]["hello"], "tcp");
  expect_authorized_client_creates_marker();
}

TEST_F(AuthTest, ClientWithoutCurveIsNeverServed) {
  ASSERT_NO_FATAL_FAILURE(start());
  RawPeer plain(tcp_endpoint());
  plain.call(1, "proc.exec", touch_marker());
  plain.call(2, "sys.ping");
  EXPECT_FALSE(plain.receive(kSilence)) << "a client without CURVE got an answer";
  expect_authorized_client_creates_marker();
}

TEST_F(AuthTest, WrongServerKeyFailsToConnect) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto impostor = rpc::generate_keypair();
  ASSERT_TRUE(impostor);
  rpc::ClientOptions options;
  options.endpoint = tcp_endpoint();
  options.server_public_key = impostor->public_key;
  options.client_keys = client_keys();
  options.connect_timeout = milliseconds(2000);
  auto connected = rpc::Client::connect(options);
  ASSERT_FALSE(connected);
  EXPECT_TRUE(connected.status().code() == ErrorCode::unavailable ||
              connected.status().code() == ErrorCode::permission_denied)
      << connected.status().to_string();

  // Without waiting for the handshake, a request is never answered.
  options.connect_timeout = milliseconds(0);
  auto unchecked = rpc::Client::connect(options);
  ASSERT_TRUE(unchecked) << unchecked.status().to_string();
  auto result = (*unchecked)->call("proc.exec", touch_marker(), waiting(kSilence));
  EXPECT_EQ(code_of(result), ErrorCode::unavailable) << result.status().to_string();
  expect_authorized_client_creates_marker();
}

TEST_F(AuthTest, UnknownClientKeyIsRefused) {
  ASSERT_NO_FATAL_FAILURE(start());
  auto stranger = rpc::generate_keypair();
  ASSERT_TRUE(stranger);
  auto connected = connect_tcp(*stranger, milliseconds(3000));
  ASSERT_FALSE(connected);
  EXPECT_TRUE(connected.status().code() == ErrorCode::permission_denied ||
              connected.status().code() == ErrorCode::unavailable)
      << connected.status().to_string();

  RawPeer raw(tcp_endpoint(), server_public_key(), *stranger);
  raw.call(1, "proc.exec", touch_marker());
  EXPECT_FALSE(raw.receive(kSilence)) << "a client with an unknown key got an answer";
  expect_authorized_client_creates_marker();
}

TEST_F(AuthTest, KeyRemovedFromAuthorizedKeysFileIsDeniedOnTheNextCall) {
  RpcAgentOptions options;
  options.use_authorized_keys_file = true;
  ASSERT_NO_FATAL_FAILURE(start(options));
  auto client = tcp_client();
  ASSERT_TRUE(client);
  auto before = client->call("sys.ping", json::object(), waiting());
  ASSERT_TRUE(before) << before.status().to_string();

  auto other = rpc::generate_keypair();
  ASSERT_TRUE(other);
  std::string file = agent_->path("authorized_keys");
  write_file(file, "# only someone else now\n" + other->public_key + "\n");
  // The file's mtime must change for the agent to re-read it: make sure it
  // does even on a coarse-grained clock.
  timeval times[2] = {{2'000'000'000, 0}, {2'000'000'000, 0}};
  ASSERT_EQ(::utimes(file.c_str(), times), 0);
  // AuthorizedKeys looks at the file at most every 20 ms.
  std::this_thread::sleep_for(milliseconds(50));

  auto after = client->call("proc.exec", json{{"argv", {"/usr/bin/touch", agent_->path("marker")}}}, waiting());
  EXPECT_EQ(code_of(after), ErrorCode::permission_denied) << after.status().to_string();
  auto ping = client->call("sys.ping", json::object(), waiting());
  EXPECT_EQ(code_of(ping), ErrorCode::permission_denied) << ping.status().to_string();
  EXPECT_FALSE(file_exists(agent_->path("marker")));

  // Restored: allowed again (new connection; the old one may have been refused for good).
  write_file(file, client_keys().public_key + "\n");
  timeval later[2] = {{2'000'000'100, 0}, {2'000'000'100, 0}};
  ASSERT_EQ(::utimes(file.c_str(), later), 0);
  std::this_thread::sleep_for(milliseconds(50));
  auto again = tcp_client();
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->call("sys.ping", json::object(), waiting()));
}

TEST_F(AuthTest, IpcSocketIsOwnerOnlyAndNeedsNoCurve) {
  ASSERT_NO_FATAL_FAILURE(start());
  struct stat info {};
  ASSERT_EQ(::stat(agent_->ipc_endpoint().substr(6).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  auto client = ipc_client();
  ASSERT_TRUE(client);
  auto pong = client->call("sys.ping", json::object(), waiting());
  ASSERT_TRUE(pong) << pong.status().to_string();
  EXPECT_EQ(*pong, json({{"pong", true}}));
}

}  // namespace
}  // namespace gpubox::testing
