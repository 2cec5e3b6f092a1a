#include "agent/jobs/input_upload.h"

#include <fcntl.h>
#include <unistd.h>

#include <map>

#include "base/fd.h"
#include "rpc/inbound_stream.h"
#include "rpc/params.h"
#include "base/safe_extractor.h"
#include "base/sha256.h"

namespace gpubox::jobs {
namespace {

using nlohmann::json;

constexpr std::uint64_t kUploadWindow = 8;
constexpr auto kUploadIdleLimit = std::chrono::seconds(300);

// One input being written: its file (a directory's archive: a hidden file
// beside where it unpacks), running hash and byte count.
class InputFileWriter {
 public:
  InputFileWriter(const InputFile& input, const std::string& dir)
      : input_(input), path_(dir + "/" + (input.directory ? "." + input.name + ".tar" : input.name)), dir_(dir) {}

  Status open() {
    fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd_.valid()) return Status::from_errno(errno, "cannot create the input " + input_.name);
    return Status::ok();
  }

  Status write(const void* data, std::size_t size) {
    if (received_ + size > input_.size) {
      return Status(ErrorCode::input_changed, "input " + input_.name + ": more than its declared " +
                                                  std::to_string(input_.size) + " bytes arrived; nothing was started");
    }
    const char* bytes = static_cast<const char*>(data);
    std::size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_.get(), bytes + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::from_errno(errno, "cannot write the input " + input_.name);
      done += static_cast<std::size_t>(n);
    }
    hash_.update(data, size);
    received_ += size;
    return Status::ok();
  }

  // Size and sha256 as declared, else input_changed.
  Status verify() {
    if (received_ != input_.size) {
      return Status(ErrorCode::input_changed, "input " + input_.name + ": declared " + std::to_string(input_.size) +
                                                  " bytes, received " + std::to_string(received_) + "; nothing was started");
    }
    std::string digest = hash_.hex_digest();
    if (digest != input_.sha256) {
      return Status(ErrorCode::input_changed, "input " + input_.name + ": the bytes received hash to " + digest +
                                                  ", not the declared " + input_.sha256 + "; nothing was started");
    }
    if (::fsync(fd_.get()) != 0) return Status::from_errno(errno, "cannot fsync the input " + input_.name);
    return input_.directory ? unpack() : Status::ok();
  }

 private:
  // A directory's archive, checked: unpacked by the safe extractor (which
  // trusts no path in it), then removed. A plain tar holds no more file bytes
  // than its own size, which caps what it may write.
  Status unpack() {
    fd_.reset();
    harvest::ExtractLimits limits;
    limits.max_total_bytes = input_.size;
    auto extracted = harvest::extract_archive(path_, dir_ + "/" + input_.name, limits);
    ::unlink(path_.c_str());
    if (!extracted) {
      return Status(extracted.status().code() == ErrorCode::resource_exhausted ? ErrorCode::invalid_request : extracted.status().code(),
                    "input " + input_.name + " (a directory): " + extracted.status().message() + "; nothing was started");
    }
    return Status::ok();
  }

  const InputFile& input_;
  std::string path_;
  std::string dir_;
  Fd fd_;
  Sha256 hash_;
  std::uint64_t received_ = 0;
};

Status receive_stream(rpc::CallContext& call, std::map<std::string, InputFileWriter*>& by_name) {
  rpc::InboundStream stream(call, {.window = kUploadWindow});
  return stream.read_all(kUploadIdleLimit, "the submission was abandoned", [&](rpc::Incoming& input) -> Result<bool> {
    rpc::ParamReader fields(input.body);
    auto eof = fields.boolean("eof");
    auto name = fields.string("name");
    auto data = fields.bytes("data");
    if (Status status = fields.finish(); !status) {
      return Status(status.code(), "DATA body: " + status.message() + " (expected {\"name\": str, \"data\"?: bytes} or {\"eof\": true})");
    }
    if (data.has_value() || !input.attachments.empty()) {
      if (!name) return Status(ErrorCode::invalid_request, "DATA body: bytes without \"name\": say which input they belong to");
      auto it = by_name.find(*name);
      if (it == by_name.end()) {
        return Status(ErrorCode::invalid_request, "DATA body: name \"" + name->substr(0, 80) + "\" is not one of params.inputs");
      }
      if (data) {
        if (Status written = it->second->write(data->data(), data->size()); !written) return written;
      }
      for (const auto& attachment : input.attachments) {
        if (Status written = it->second->write(attachment.data(), attachment.size()); !written) return written;
      }
    }
    return eof.value_or(false);
  });
}

}  // namespace

Status receive_inputs(rpc::CallContext& call, const std::vector<InputFile>& inputs, const std::string& dir) {
  if (inputs.empty()) {
    if (!call.attachments().empty()) {
      return Status(ErrorCode::invalid_request, "attachments given but params.inputs is empty: declare each input");
    }
    return Status::ok();
  }
  std::vector<std::unique_ptr<InputFileWriter>> writers;
  std::map<std::string, InputFileWriter*> by_name;
  for (const auto& input : inputs) {
    writers.push_back(std::make_unique<InputFileWriter>(input, dir));
    if (Status opened = writers.back()->open(); !opened) return opened;
    by_name[input.name] = writers.back().get();
  }
  auto& attachments = call.attachments();
  if (!attachments.empty()) {
    if (attachments.size() != inputs.size()) {
      return Status(ErrorCode::invalid_request, "params.inputs: " + std::to_string(inputs.size()) + " inputs but " +
                                                    std::to_string(attachments.size()) +
                                                    " attachments; give one attachment per input, or stream them");
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (Status written = writers[i]->write(attachments[i].data(), attachments[i].size()); !written) return written;
    }
  } else if (Status received = receive_stream(call, by_name); !received) {
    return received;
  }
  for (auto& writer : writers) {
    if (Status verified = writer->verify(); !verified) return verified;
  }
  return call.stop_reason();
}

}  // namespace gpubox::jobs
