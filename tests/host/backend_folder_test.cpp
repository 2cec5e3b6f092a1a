// Adding a backend is its folder and one registry line: a backend of the
// tests alone (tests/host/testbox/) registers its flags, and create parses
// them, refuses them for other backends, refuses others' for it, and shows
// them in create's usage and its name in `gpubox --help`, with no other code
// naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "host/backends/create_flags.h"
#include "host/backends/registry.h"
#include "host/cli/cli.h"
#include "host/cli/create_usage.h"
#include "tests/host/testbox/testbox_backend.h"

namespace gpubox::host {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The registry's backends and the test's, as registry.cpp would list them with its one line added.
std::vector<const Backend*> with_testbox() {
  std::vector<const Backend*> backends = all_backends();
  backends.push_back(&testing::testbox_backend());
  return backends;
}

// The flags create would parse with these backends.
Result<Args> parse_create(const std::vector<std::string>& raw, const std::vector<const Backend*>& backends) {
  std::set<std::string> with_value = {"--backend"};
  std::set<std::string> switches;
  for (const BackendFlag& flag : backend_flags(backends)) (flag.takes_value ? with_value : switches).insert(flag.name);
  return cli::parse_args(raw, with_value, switches);
}

TEST(BackendFolder, ItsFlagsAreParsedOnlyOnceRegistered) {
  EXPECT_FALSE(parse_create({"--testbox-zone", "eu"}, all_backends()));
  auto parsed = parse_create({"--testbox-zone", "eu", "--testbox-spot"}, with_testbox());
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_EQ(parsed->last("--testbox-zone").value_or(""), "eu");
  EXPECT_TRUE(parsed->flag("--testbox-spot"));
}

TEST(BackendFolder, ItsFlagsAreRefusedForOtherBackendsNamingIt) {
  const auto backends = with_testbox();
  auto parsed = parse_create({"--testbox-spot"}, backends);
  ASSERT_TRUE(parsed);
  Status refused = refuse_foreign_flags(*parsed, *find_backend("local"), backends);
  EXPECT_EQ(refused.message(), "--testbox-spot: only with --backend testbox");
  EXPECT_TRUE(refuse_foreign_flags(*parsed, testing::testbox_backend(), backends));
}

TEST(BackendFolder, OtherBackendsFlagsAreRefusedForIt) {
  const auto backends = with_testbox();
  auto publish = parse_create({"--publish", "127.0.0.1"}, backends);
  ASSERT_TRUE(publish);
  EXPECT_EQ(refuse_foreign_flags(*publish, testing::testbox_backend(), backends).message(),
            "--publish: only with --backend podman or docker");
  // A borrowed flag is taken, and still named by the backends that define it.
  auto image = parse_create({"--image", "gpubox:latest"}, backends);
  ASSERT_TRUE(image);
  EXPECT_TRUE(refuse_foreign_flags(*image, testing::testbox_backend(), backends));
  EXPECT_EQ(refuse_foreign_flags(*image, *find_backend("local"), backends).message(),
            "--image: only with --backend podman or docker");
}

TEST(BackendFolder, ItAppearsInCreatesUsageAndInHelp) {
  std::string usage = cli::create_usage(with_testbox());
  EXPECT_THAT(usage, HasSubstr("[--backend local|podman|docker|modal|kubernetes|testbox]"));
  EXPECT_THAT(usage, HasSubstr("       testbox:       [--testbox-zone ZONE] [--testbox-spot] [--image IMAGE]\n"));
  EXPECT_THAT(usage, HasSubstr("  --testbox-zone  testbox: where its sandboxes would run\n"));
  EXPECT_THAT(cli::create_usage(all_backends()), Not(HasSubstr("testbox")));
  // Shared synopses (podman and docker) are shown once.
  EXPECT_EQ(usage.find("       podman|docker: [--image"), usage.rfind("       podman|docker: [--image"));
  std::string help = cli::format_help({cli::create_help(with_testbox())});
  EXPECT_EQ(help, "  create [options]                   create a sandbox and print its id (gpubox create --help);\n"
                  "                                     --backend local|podman|docker|modal|kubernetes|testbox, --from-snapshot NAME\n");
}

TEST(BackendFolder, HelpLinesKeepTheirColumns) {
  EXPECT_EQ(cli::format_help({{"ls", "list sandboxes"},
                              {"mcp [--sandbox ID] [--service NAME]", "an MCP server"},
                              {"budget [init|set|default|log|reconcile]", "cost ceilings\nrefused past the ceiling"}}),
            "  ls                                 list sandboxes\n"
            "  mcp [--sandbox ID] [--service NAME] an MCP server\n"
            "  budget [init|set|default|log|reconcile]\n"
            "                                     cost ceilings\n"
            "                                     refused past the ceiling\n");
}

}  // namespace
}  // namespace gpubox::host
