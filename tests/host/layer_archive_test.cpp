// archive_layer() and extract_layer() on a hand-made upper layer: what an
// overlay needs (whiteouts, opaque directories, owners, modes, mtimes, hard
// links, user xattrs) survives the round trip, ids move between ranges,
// mount points and sockets stay out, and the plain extractor still refuses
// a layer's whiteouts. Needs root (mknod, chown, trusted xattrs).
#include "host/backends/local/layer_archive.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>

#include "base/safe_extractor.h"
#include "tests/unit/temp_dir.h"
#include "tests/prerequisite.h"

namespace gpubox::host {
namespace {

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

std::string xattr_of(const std::string& path, const char* name) {
  char value[64];
  ssize_t n = ::lgetxattr(path.c_str(), name, value, sizeof value);
  return n < 0 ? "" : std::string(value, static_cast<size_t>(n));
}

struct LayerArchiveTest : ::testing::Test {
  test::TempDir dir;
  std::string upper() const { return dir.file("upper"); }

  void SetUp() override {
    if (::geteuid() != 0) GPUBOX_MISSING("needs root (mknod, chown, trusted xattrs)");
    for (const char* sub : {"upper", "upper/etc", "upper/usr", "upper/usr/doc", "upper/workspace", "upper/run"}) {
      ASSERT_EQ(::mkdir(dir.file(sub).c_str(), 0755), 0) << sub;
    }
    ASSERT_EQ(::mknod(dir.file("upper/etc/gone").c_str(), S_IFCHR, makedev(0, 0)), 0) << "a whiteout";
    ASSERT_EQ(::setxattr(dir.file("upper/usr/doc").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    ASSERT_EQ(::setxattr(dir.file("upper/usr/doc").c_str(), "trusted.overlay.origin", "xx", 2, 0), 0);
    std::string tool = dir.write("upper/usr/tool", "#!/bin/sh\n");
    ASSERT_EQ(::chown(tool.c_str(), 101234, 104321), 0);
    ASSERT_EQ(::chmod(tool.c_str(), 0750), 0);
    ASSERT_EQ(::setxattr(tool.c_str(), "user.note", "kept", 4, 0), 0);
    timespec times[2] = {{0, UTIME_OMIT}, {1'000'000'000, 5}};
    ASSERT_EQ(::utimensat(AT_FDCWD, tool.c_str(), times, 0), 0);
    ASSERT_EQ(::link(tool.c_str(), dir.file("upper/usr/tool-too").c_str()), 0);
    ASSERT_EQ(::symlink("tool", dir.file("upper/usr/link").c_str()), 0);
    dir.write("upper/workspace/mounted-over", "x");
    dir.write("upper/run/mounted-over", "x");
    int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, dir.file("upper/usr/sock").c_str(), sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ::close(sock);
  }

  // The layer archived as a --userns sandbox whose root is host 100000.
  LayerArchive archive() const {
    LayerArchiveRequest request;
    request.upper = upper();
    request.archive_path = dir.file("upper.tar.zst");
    request.excluded = {"/workspace", "/run"};
    request.uid_base = request.gid_base = 100000;
    request.count = 65536;
    auto archived = archive_layer(request);
    EXPECT_TRUE(archived) << archived.status().message();
    return archived ? *archived : LayerArchive{};
  }
};

TEST_F(LayerArchiveTest, WhiteoutsOpaqueDirsOwnersModesAndLinksSurviveARoundTrip) {
  LayerArchive archived = archive();
  EXPECT_EQ(archived.skipped, 1u) << "the socket";
  EXPECT_EQ(archived.sha256.size(), 64u);

  harvest::LayerIds ids{200000, 300000, 65536};
  std::string restored = dir.file("restored");
  auto extracted = harvest::extract_layer(dir.file("upper.tar.zst"), restored, ids);
  ASSERT_TRUE(extracted) << extracted.status().message();
  EXPECT_EQ(extracted->whiteouts, 1u);

  struct stat gone = stat_of(restored + "/etc/gone");
  EXPECT_TRUE(S_ISCHR(gone.st_mode) && gone.st_rdev == 0) << "not a whiteout";
  EXPECT_EQ(xattr_of(restored + "/usr/doc", "trusted.overlay.opaque"), "y");
  EXPECT_EQ(xattr_of(restored + "/usr/doc", "trusted.overlay.origin"), "") << "overlayfs's bookkeeping travels";
  struct stat tool = stat_of(restored + "/usr/tool");
  EXPECT_EQ(tool.st_mode & 07777, 0750u);
  EXPECT_EQ(tool.st_uid, 201234u) << "sandbox uid 1234 in the new range";
  EXPECT_EQ(tool.st_gid, 304321u);
  EXPECT_EQ(tool.st_mtim.tv_sec, 1'000'000'000);
  EXPECT_EQ(tool.st_mtim.tv_nsec, 5);
  EXPECT_EQ(tool.st_nlink, 2u) << "the hard link is a link again";
  EXPECT_EQ(xattr_of(restored + "/usr/tool", "user.note"), "kept");
  EXPECT_TRUE(S_ISLNK(stat_of(restored + "/usr/link").st_mode));
  struct stat none {};
  EXPECT_NE(::lstat((restored + "/usr/sock").c_str(), &none), 0);
  EXPECT_NE(::lstat((restored + "/workspace").c_str(), &none), 0) << "a mount point is in the archive";
  EXPECT_NE(::lstat((restored + "/run").c_str(), &none), 0);
}

TEST_F(LayerArchiveTest, ThePlainExtractorStillRefusesALayersWhiteouts) {
  archive();
  auto plain = harvest::extract_archive(dir.file("upper.tar.zst"), dir.file("plain"));
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.status().message().find("device file"), std::string::npos) << plain.status().message();
}

TEST_F(LayerArchiveTest, IdsOutsideTheTargetRangeAreRefused) {
  archive();
  harvest::LayerIds narrow{200000, 200000, 1000};  // sandbox uid 1234 does not fit
  auto extracted = harvest::extract_layer(dir.file("upper.tar.zst"), dir.file("narrow"), narrow);
  ASSERT_FALSE(extracted);
  EXPECT_NE(extracted.status().message().find("outside the sandbox's 1000 ids"), std::string::npos)
      << extracted.status().message();
  struct stat none {};
  EXPECT_NE(::lstat(dir.file("narrow").c_str(), &none), 0) << "a refused layer leaves a directory";
}

}  // namespace
}  // namespace gpubox::host
