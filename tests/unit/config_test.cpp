#include "agent/config.h"
#include <gtest/gtest.h>
TEST(Config, Defaults) { auto c = gpubox::parse_config("{}"); ASSERT_TRUE(c); EXPECT_EQ(c->state_dir, "/run/gpubox"); }
