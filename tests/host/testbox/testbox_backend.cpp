#include "tests/host/testbox/testbox_backend.h"

namespace gpubox::host::testing {
namespace {

// Every step a real backend takes is refused or empty: only its registration is under test.
class TestboxBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }

  std::vector<BackendFlag> own_flags() const override { return {{"--testbox-zone"}, {"--testbox-spot", false}}; }
  std::vector<std::string> borrowed_flags() const override { return {"--image"}; }
  std::string create_synopsis() const override {
    return "       testbox:       [--testbox-zone ZONE] [--testbox-spot] [--image IMAGE]\n";
  }
  std::string create_options_help() const override {
    return "  --testbox-zone  testbox: where its sandboxes would run\n";
  }

  Status check_flags(const Args& flags) const override {
    auto zone = flags.last("--testbox-zone");
    if (zone && zone->empty()) return Status::invalid_request("--testbox-zone: expected a zone");
    return Status::ok();
  }
  Status check_create(const CreateRequest&) const override { return Status::ok(); }
  Result<SandboxRecord> create(SandboxStore&, const CreateRequest&) const override {
    return Status(ErrorCode::unavailable, "testbox creates nothing");
  }
  Status take_snapshot(const SandboxStore&, const SandboxRecord&, Snapshot*) const override {
    return Status(ErrorCode::unavailable, "testbox keeps nothing");
  }
  Status terminate(const SandboxStore&, const SandboxRecord&, std::chrono::milliseconds, bool* killed) const override {
    if (killed) *killed = false;
    return Status::ok();
  }
  std::vector<InfoLine> describe(const SandboxRecord&, const nlohmann::json&) const override { return {}; }
  void add_requested(const SandboxRecord&, nlohmann::json*) const override {}

 private:
  const std::string name_ = "testbox";
};

}  // namespace

const Backend& testbox_backend() {
  static const TestboxBackend backend;
  return backend;
}

}  // namespace gpubox::host::testing
