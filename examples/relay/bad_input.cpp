#include "bad_input.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <span>

namespace relay {

std::vector<bad_client> bad_clients(std::uint32_t ranks) {
  using k = conn_error_kind;
  std::vector<bad_client> v = {
      {bad_input::oversize, "oversize length", 0, k::oversize},
      {bad_input::truncated_header, "truncated header", 0, k::truncated_header},
      {bad_input::close_mid_frame, "close mid-frame", 0, k::truncated_payload},
      {bad_input::reset_mid_frame, "reset mid-frame", 0, k::reset},
      {bad_input::bad_magic, "bad magic", 0, k::bad_magic},
      {bad_input::bad_destination, "bad destination", 0, k::bad_destination},
      {bad_input::bad_hello, "bad hello", 0, k::bad_hello},
  };
  for (std::size_t i = 0; i < v.size(); ++i) v[i].id = ranks + static_cast<std::uint32_t>(i);
  return v;
}

namespace {

// Owns a socket for the client's lifetime.
struct socket_fd {
  int fd;
  explicit socket_fd(int f) noexcept : fd(f) {}
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::vector<std::byte> frame_start(std::uint32_t id, std::uint32_t to, std::uint64_t length,
                                   std::size_t payload_sent) {
  std::vector<std::byte> out(hello_bytes + header_bytes + payload_sent);
  encode_hello(id, out.data());
  header h;
  h.source = id;
  h.destination = to;
  h.length = length;
  encode(h, out.data() + hello_bytes);
  fill_payload(id, 0, std::span(out).subspan(hello_bytes + header_bytes));
  return out;
}

// Waits for the hub to close the connection: EOF, or a reset when it closed with input unread.
std::string await_close(int fd) {
  std::array<std::byte, 4096> scratch;
  for (;;) {
    const ssize_t got = ::recv(fd, scratch.data(), scratch.size(), 0);
    if (got == 0) return "the hub closed the connection";
    if (got < 0 && errno != EINTR) {
      return std::string("the hub closed the connection (") + std::strerror(errno) + ")";
    }
    if (got > 0) return "the hub sent bytes to a guest, which it never should";
  }
}

}  // namespace

std::string run_bad_client(const bad_client& c, std::uint16_t port, std::size_t ceiling) {
  socket_fd s(connect_loopback(port));
  const auto send = [&](std::span<const std::byte> bytes) {
    if (const int err = write_all(s.fd, bytes); err != 0) {
      return std::string("sending failed: ") + std::strerror(err);
    }
    return std::string();
  };
  std::string sent;
  switch (c.input) {
    case bad_input::oversize:
      sent = send(frame_start(c.id, 0, std::uint64_t{ceiling} + 1, 0));
      break;
    case bad_input::truncated_header: {
      const auto bytes = frame_start(c.id, 0, 100, 0);
      sent = send(std::span(bytes).first(hello_bytes + 11));
      ::shutdown(s.fd, SHUT_WR);
      break;
    }
    case bad_input::close_mid_frame:
      sent = send(frame_start(c.id, 0, 200000, 70000));
      ::shutdown(s.fd, SHUT_WR);
      break;
    case bad_input::reset_mid_frame: {
      sent = send(frame_start(c.id, 0, 300000, 10000));
      // SO_LINGER with a zero timeout makes close() send a reset instead of a FIN.
      const linger abort_on_close{1, 0};
      ::setsockopt(s.fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
      ::close(s.fd);
      s.fd = -1;
      return sent.empty() ? "reset the connection" : sent;
    }
    case bad_input::bad_magic: {
      auto bytes = frame_start(c.id, 0, 0, 0);
      static constexpr char request[] = "GET / HTTP/1.1\r\nHost: relays\r\n\r\n";
      static_assert(sizeof request - 1 == header_bytes);
      std::memcpy(bytes.data() + hello_bytes, request, header_bytes);
      sent = send(bytes);
      break;
    }
    case bad_input::bad_destination:
      sent = send(frame_start(c.id, c.id + 100, 10, 10));
      break;
    case bad_input::bad_hello: {
      static constexpr char hello[] = "HELO hub";
      static_assert(sizeof hello - 1 == hello_bytes);
      sent = send(std::as_bytes(std::span(hello, hello_bytes)));
      break;
    }
  }
  if (!sent.empty()) return sent;
  return await_close(s.fd);
}

}  // namespace relay
