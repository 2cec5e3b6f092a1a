// base/status.h: the stable wire names of error codes and the one errno mapping.
#include "base/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

namespace gpubox {
namespace {

constexpr int kCodeCount = static_cast<int>(ErrorCode::internal) + 1;

TEST(ErrorCodeName, EveryCodeRoundTripsThroughItsName) {
  std::set<std::string> names;
  for (int i = 0; i < kCodeCount; ++i) {
    auto code = static_cast<ErrorCode>(i);
    std::string name(error_code_name(code));
    EXPECT_FALSE(name.empty()) << "code " << i;
    EXPECT_TRUE(names.insert(name).second) << "two codes share the name " << name;
    auto parsed = error_code_from_name(name);
    ASSERT_TRUE(parsed.has_value()) << name;
    EXPECT_EQ(*parsed, code) << name;
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kCodeCount));
}

TEST(ErrorCodeName, WireNamesAreTheDocumentedOnes) {
  EXPECT_EQ(error_code_name(ErrorCode::ok), "ok");
  EXPECT_EQ(error_code_name(ErrorCode::invalid_request), "invalid_request");
  EXPECT_EQ(error_code_name(ErrorCode::not_found), "not_found");
  EXPECT_EQ(error_code_name(ErrorCode::unknown_method), "unknown_method");
  EXPECT_EQ(error_code_name(ErrorCode::permission_denied), "permission_denied");
  EXPECT_EQ(error_code_name(ErrorCode::deadline_exceeded), "deadline_exceeded");
  EXPECT_EQ(error_code_name(ErrorCode::busy), "busy");
  EXPECT_EQ(error_code_name(ErrorCode::input_changed), "input_changed");
  EXPECT_EQ(error_code_name(ErrorCode::result_rejected), "result_rejected");
  EXPECT_EQ(error_code_name(ErrorCode::resource_exhausted), "resource_exhausted");
  EXPECT_EQ(error_code_name(ErrorCode::already_exists), "already_exists");
  EXPECT_EQ(error_code_name(ErrorCode::unavailable), "unavailable");
  EXPECT_EQ(error_code_name(ErrorCode::cancelled), "cancelled");
  EXPECT_EQ(error_code_name(ErrorCode::internal), "internal");
}

TEST(ErrorCodeName, OutOfRangeCodeIsInternal) {
  EXPECT_EQ(error_code_name(static_cast<ErrorCode>(kCodeCount)), "internal");
  EXPECT_EQ(error_code_name(static_cast<ErrorCode>(1000)), "internal");
}

TEST(ErrorCodeName, UnknownNamesDoNotParse) {
  EXPECT_FALSE(error_code_from_name("").has_value());
  EXPECT_FALSE(error_code_from_name("bogus").has_value());
  EXPECT_FALSE(error_code_from_name("NOT_FOUND").has_value());
  EXPECT_FALSE(error_code_from_name("not_found ").has_value());
  EXPECT_FALSE(error_code_from_name(std::string_view("not_found\0x", 11)).has_value());
}

TEST(StatusFromErrno, MapsTheCommonErrnos) {
  EXPECT_EQ(Status::from_errno(ENOENT, "x").code(), ErrorCode::not_found);
  EXPECT_EQ(Status::from_errno(EACCES, "x").code(), ErrorCode::permission_denied);
  EXPECT_EQ(Status::from_errno(EPERM, "x").code(), ErrorCode::permission_denied);
  EXPECT_EQ(Status::from_errno(EEXIST, "x").code(), ErrorCode::already_exists);
  EXPECT_EQ(Status::from_errno(ENOSPC, "x").code(), ErrorCode::resource_exhausted);
  EXPECT_EQ(Status::from_errno(ENOMEM, "x").code(), ErrorCode::resource_exhausted);
  EXPECT_EQ(Status::from_errno(EMFILE, "x").code(), ErrorCode::resource_exhausted);
  EXPECT_EQ(Status::from_errno(ETIMEDOUT, "x").code(), ErrorCode::deadline_exceeded);
  EXPECT_EQ(Status::from_errno(EINVAL, "x").code(), ErrorCode::invalid_request);
  EXPECT_EQ(Status::from_errno(EIO, "x").code(), ErrorCode::internal);
  // An error is never ok, whatever errno says.
  EXPECT_FALSE(Status::from_errno(0, "x").is_ok());
}

TEST(StatusFromErrno, MessageIsContextThenStrerror) {
  Status status = Status::from_errno(ENOENT, "open '/nope'");
  EXPECT_FALSE(status.is_ok());
  EXPECT_FALSE(static_cast<bool>(status));
  EXPECT_EQ(status.message(), std::string("open '/nope': ") + std::strerror(ENOENT));
  EXPECT_EQ(status.to_string(), std::string("not_found: open '/nope': ") + std::strerror(ENOENT));
}

TEST(Status, OkIsOk) {
  Status status;
  EXPECT_TRUE(status.is_ok());
  EXPECT_TRUE(static_cast<bool>(Status::ok()));
  EXPECT_EQ(status.code(), ErrorCode::ok);
  EXPECT_EQ(status.to_string(), "ok");
}

TEST(Result, HoldsAValueOrAStatus) {
  Result<std::string> value(std::string("hello"));
  ASSERT_TRUE(value.is_ok());
  EXPECT_EQ(*value, "hello");
  EXPECT_EQ(value->size(), 5u);
  EXPECT_TRUE(value.status().is_ok());

  Result<std::string> error(Status(ErrorCode::busy, "try later"));
  EXPECT_FALSE(error.is_ok());
  EXPECT_EQ(error.status().code(), ErrorCode::busy);
  EXPECT_EQ(error.status().message(), "try later");
}

}  // namespace
}  // namespace gpubox
