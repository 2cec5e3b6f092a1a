#include "rpc/zap_authenticator.h"

#include <pthread.h>

#include <array>
#include <string>
#include <vector>
#include <zmq_addon.hpp>

namespace gpubox::rpc {
namespace {

std::string z85_of_key(const void* key32) {
  char text[41];
  zmq_z85_encode(text, static_cast<const std::uint8_t*>(key32), 32);
  return text;
}

}  // namespace

void ZapAuthenticator::start(zmq::context_t& context) {
  socket_ = std::make_unique<zmq::socket_t>(context, zmq::socket_type::rep);
  socket_->set(zmq::sockopt::linger, 0);
  socket_->bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { answer_requests(); });
}

void ZapAuthenticator::join() {
  if (thread_.joinable()) thread_.join();
}

void ZapAuthenticator::answer_requests() {
  ::pthread_setname_np(::pthread_self(), "rpc-zap");
  while (true) {
    try {
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(*socket_, std::back_inserter(request))) continue;
      if (request.size() < 6) continue;
      std::string mechanism = request[5].to_string();
      std::string key;
      bool allowed = false;
      if (mechanism == "CURVE" && request.size() >= 7 && request[6].size() == 32) {
        key = z85_of_key(request[6].data());
        allowed = authorized_ && authorized_->allows(key);
      }
      std::array<zmq::const_buffer, 6> reply = {
          zmq::str_buffer("1.0"), zmq::buffer(request[1].data(), request[1].size()),
          allowed ? zmq::str_buffer("200") : zmq::str_buffer("400"),
          allowed ? zmq::str_buffer("OK") : zmq::str_buffer("client key not authorized"),
          zmq::buffer(key), zmq::str_buffer("")};
      zmq::send_multipart(*socket_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal (or a debugger): the handler must outlive it
      break;                           // ETERM: the context is shutting down
    }
  }
  socket_.reset();
}

}  // namespace gpubox::rpc
