// Snapshots of local sandboxes through the real CLI: the root's upper layer
// travels with the work dir (new files with their owners, modes and xattrs,
// deletions of host files as whiteouts, opaque directories), the host stays
// as it was throughout, a snapshot of the work dir alone (made before the
// layer was kept) still restores, and a hostile layer archive is refused by
// the hardened extractor before anything is created.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// What a host command printed on stdout (the test fails when it does not exit 0).
std::string host_output(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << command;
    return out;
  }
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << command;
  return out;
}

// The host paths the sandboxes below change inside, as the host has them.
std::string host_state() {
  return host_output("cat /etc/debian_version; ls -la /usr/share/doc/bash /usr/local/bin; stat -c '%a %u:%g %Y' /usr/local/bin");
}

class LocalSnapshotTest : public CliTest {
 protected:
  std::string snapshot_dir(const std::string& name) const { return state_home() + "/gpubox/snapshots/" + name; }

  nlohmann::json snapshot_record(const std::string& name) const {
    return nlohmann::json::parse(read_text(snapshot_dir(name) + "/snapshot.json"));
  }
  void save_snapshot_record(const std::string& name, const nlohmann::json& json) const {
    write_text(snapshot_dir(name) + "/snapshot.json", json.dump(2), 0600);
  }

  // Replaces the snapshot's layer archive with a plain tar holding `entries`
  // (Python tarfile statements adding to `t`) and records its sha256, so that
  // the extractor, not the checksum, has to judge it.
  void plant_layer(const std::string& name, const std::string& entries) const {
    std::string script = scratch() + "/plant.py";
    write_text(script,
               "import hashlib, io, sys, tarfile\n"
               "def member(name, kind=tarfile.REGTYPE, mode=0o644, data=b'', **extra):\n"
               "    info = tarfile.TarInfo(name); info.type = kind; info.mode = mode; info.size = len(data)\n"
               "    for key, value in extra.items(): setattr(info, key, value)\n"
               "    t.addfile(info, io.BytesIO(data) if data else None)\n"
               "with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as t:\n"
               "    member('usr', tarfile.DIRTYPE, 0o755)\n" +
                   entries +
                   "print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n");
    std::string sha256 = trimmed(host_output("python3 " + script + " " + snapshot_dir(name) + "/upper.tar.zst"));
    nlohmann::json json = snapshot_record(name);
    json["layer"]["sha256"] = sha256;
    save_snapshot_record(name, json);
  }

  // A sandbox with a tool installed, a host file deleted and a host directory
  // replaced, snapshotted as `name` and terminated.
  void snapshot_a_changed_sandbox(const std::string& name) {
    std::string id = create();
    std::string change =
        "printf '#!/bin/sh\\necho tool ran\\n' > /usr/local/bin/gpubox-tool && chown 1234:4321 /usr/local/bin/gpubox-tool && "
        "chmod 0750 /usr/local/bin/gpubox-tool && "
        "python3 -c \"import os; os.setxattr('/usr/local/bin/gpubox-tool', 'user.origin', b'snapshot')\" && "
        "rm /etc/debian_version && rm -rf /usr/share/doc/bash && mkdir /usr/share/doc/bash && "
        "echo mine > /usr/share/doc/bash/only-this && echo kept > /workspace/data.txt";
    CliRun changed = run({"exec", id, "--", "sh", "-c", change});
    ASSERT_EQ(changed.status, 0) << changed.err;
    CliRun taken = run({"snapshot", id, "--name", name});
    ASSERT_EQ(taken.status, 0) << taken.err;
    EXPECT_THAT(taken.err, HasSubstr("work dir and root layer archives"));
    ASSERT_EQ(run({"terminate", id}).status, 0);
  }
};

TEST_F(LocalSnapshotTest, ARestoredSandboxHasItsInstalledFilesAndDeletions) {
  std::string before = host_state();
  snapshot_a_changed_sandbox("layered");
  EXPECT_EQ(host_state(), before) << "the sandbox changed the host";

  nlohmann::json json = snapshot_record("layered");
  ASSERT_TRUE(json.contains("layer"));
  EXPECT_EQ(json["layer"]["sha256"].get<std::string>().size(), 64u);
  // The archive holds the changes and none of the root's mount points.
  std::string listing = host_output("tar --zstd -tvf " + snapshot_dir("layered") + "/upper.tar.zst 2>/dev/null");
  EXPECT_THAT(listing, HasSubstr("usr/local/bin/gpubox-tool"));
  EXPECT_THAT(listing, HasSubstr("etc/debian_version"));
  EXPECT_THAT(listing, HasSubstr("c--------- 0/0")) << "the deletion is not a whiteout";
  for (const char* mount_point : {" workspace", " run/", " tmp/", " proc/", " dev/", " sys/"}) {
    EXPECT_THAT(listing, Not(HasSubstr(mount_point))) << listing;
  }
  struct stat mode {};
  ASSERT_EQ(::stat((snapshot_dir("layered") + "/upper.tar.zst").c_str(), &mode), 0);
  EXPECT_EQ(mode.st_mode & 0777, 0600u);

  CliRun restored = run({"create", "--from-snapshot", "layered", "--name", "copy"});
  ASSERT_EQ(restored.status, 0) << restored.err;
  EXPECT_THAT(restored.err, HasSubstr("installed packages"));
  CliRun inside = run({"exec", "copy", "--", "sh", "-c",
                       "gpubox-tool; stat -c '%a %u:%g' /usr/local/bin/gpubox-tool; "
                       "python3 -c \"import os; print(os.getxattr('/usr/local/bin/gpubox-tool', 'user.origin').decode())\"; "
                       "test -e /etc/debian_version || echo deleted; ls /usr/share/doc/bash; cat /workspace/data.txt"});
  EXPECT_EQ(inside.out, "tool ran\n750 1234:4321\nsnapshot\ndeleted\nonly-this\nkept\n") << inside.err;
  EXPECT_EQ(host_state(), before) << "the restore changed the host";

  // A sandbox of the same snapshot runs on its own layer: its changes stay its own.
  ASSERT_EQ(run({"exec", "copy", "--", "rm", "/usr/local/bin/gpubox-tool"}).status, 0);
  CliRun second = run({"create", "--from-snapshot", "layered", "--name", "second"});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(run({"exec", "second", "--", "gpubox-tool"}).out, "tool ran\n");
  EXPECT_EQ(host_state(), before);
}

TEST_F(LocalSnapshotTest, AWorkDirOnlySnapshotStillRestores) {
  snapshot_a_changed_sandbox("old-style");
  // As snapshots were before the layer was kept: the work dir's archive alone.
  nlohmann::json json = snapshot_record("old-style");
  json.erase("layer");
  save_snapshot_record("old-style", json);
  fs::remove(snapshot_dir("old-style") + "/upper.tar.zst");

  CliRun restored = run({"create", "--from-snapshot", "old-style", "--name", "copy"});
  ASSERT_EQ(restored.status, 0) << restored.err;
  EXPECT_THAT(restored.err, HasSubstr("its files and settings"));
  CliRun inside = run({"exec", "copy", "--", "sh", "-c",
                       "cat /workspace/data.txt; test -e /usr/local/bin/gpubox-tool || echo no-tool; cat /etc/debian_version"});
  EXPECT_EQ(inside.out, "kept\nno-tool\n" + read_text("/etc/debian_version")) << inside.err;
}

TEST_F(LocalSnapshotTest, AHostileLayerArchiveIsRefusedAndCreatesNothing) {
  snapshot_a_changed_sandbox("hostile");
  struct Case {
    const char* entries;
    const char* message;
  };
  const Case cases[] = {
      {"    member('../escape', data=b'out')\n", "archive entry \"../escape\": path with \"..\""},
      {"    member('usr/null', tarfile.CHRTYPE, devmajor=1, devminor=3)\n", "archive entry \"usr/null\": device file"},
      {"    member('usr/block', tarfile.BLKTYPE, devmajor=8, devminor=0)\n", "archive entry \"usr/block\": device file"},
      {"    member('usr/up', tarfile.SYMTYPE, linkname='../..')\n", "symlink pointing outside"},
      {"    member('usr/shown', tarfile.DIRTYPE, 0o755, pax_headers={'SCHILY.xattr.trusted.overlay.redirect': '/root'})\n",
       "extended attribute \"trusted.overlay.redirect\""},
  };
  for (const Case& hostile : cases) {
    plant_layer("hostile", hostile.entries);
    CliRun refused = run({"create", "--from-snapshot", "hostile"});
    EXPECT_EQ(refused.status, 2) << hostile.entries << refused.err;
    EXPECT_THAT(refused.err, HasSubstr("--from-snapshot hostile: the upper layer: "));
    EXPECT_THAT(refused.err, HasSubstr(hostile.message));
    EXPECT_THAT(refused.err, HasSubstr("nothing was extracted"));
    EXPECT_TRUE(store_entries().empty()) << "a refused snapshot left a sandbox";
    EXPECT_FALSE(fs::exists(store_dir() + "/escape"));
  }

  // An archive changed behind the record's back is refused by its checksum.
  nlohmann::json json = snapshot_record("hostile");
  json["layer"]["sha256"] = std::string(64, '0');
  save_snapshot_record("hostile", json);
  CliRun damaged = run({"create", "--from-snapshot", "hostile"});
  EXPECT_NE(damaged.status, 0);
  EXPECT_THAT(damaged.err, HasSubstr("damaged or replaced"));
  EXPECT_TRUE(store_entries().empty());

  // Setuid and setgid bits never worked in a sandbox (nosuid, no_new_privs): they are dropped, a directory's setgid kept.
  plant_layer("hostile",
              "    member('usr/local', tarfile.DIRTYPE, 0o2775)\n"
              "    member('usr/local/suid', mode=0o6755, data=b'#!/bin/sh\\necho ran\\n')\n");
  CliRun restored = run({"create", "--from-snapshot", "hostile", "--name", "stripped"});
  ASSERT_EQ(restored.status, 0) << restored.err;
  EXPECT_EQ(run({"exec", "stripped", "--", "stat", "-c", "%a", "/usr/local/suid", "/usr/local"}).out, "755\n2775\n");
}

}  // namespace
}  // namespace gpubox::testing
