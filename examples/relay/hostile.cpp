#include "hostile.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <span>
#include <system_error>
#include <utility>

#include "wire.hpp"

namespace relay {

hostile_clients::hostile_clients(std::uint16_t port, std::uint32_t non_reader, std::size_t ceiling)
    : port_(port), non_reader_(non_reader), ceiling_(ceiling) {}

hostile_clients::~hostile_clients() { stop(); }

void hostile_clients::start_early() {
  for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { run(kind::early, 0); });
}

void hostile_clients::start() {
  const std::uint32_t guest = non_reader_ + 1;
  const int non_reader = open(kind::non_reader);
  std::array<std::byte, hello_bytes> hello;
  encode_hello(non_reader_, hello.data());
  if (non_reader < 0 || write_all(non_reader, hello) != 0) {
    throw std::system_error(errno, std::generic_category(), "the non-reading rank's hello");
  }
  threads_.emplace_back([this, non_reader] { run(kind::non_reader, non_reader_, non_reader); });
  threads_.emplace_back([this, guest] { run(kind::flood, guest); });
  threads_.emplace_back([this] { run(kind::idle, 0); });
  for (std::uint32_t i = 0; i < 3; ++i) {
    threads_.emplace_back([this, id = guest + 1 + i] { run(kind::slow, id); });
  }
}

void hostile_clients::stop() {
  stopping_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    for (const int fd : open_) ::shutdown(fd, SHUT_RDWR);  // wakes its client wherever it waits
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::string hostile_clients::summary() const {
  const auto n = [&](kind k) { return std::to_string(connects_[static_cast<int>(k)].load()); };
  return "connections made: early " + n(kind::early) + ", idle " + n(kind::idle) + ", slow " +
         n(kind::slow) + ", flooding the non-reader " + n(kind::flood) + ", non-reader " +
         n(kind::non_reader);
}

int hostile_clients::open(kind k) {
  int fd = -1;
  try {
    fd = connect_loopback(port_);
  } catch (const std::exception&) {
    return -1;  // the hub has stopped listening: it is ending
  }
  std::lock_guard lk(mu_);
  if (stopping()) {
    ::close(fd);
    return -1;
  }
  open_.push_back(fd);
  connects_[static_cast<int>(k)].fetch_add(1, std::memory_order_relaxed);
  return fd;
}

void hostile_clients::close(int fd) {
  {
    std::lock_guard lk(mu_);
    std::erase(open_, fd);
  }
  ::close(fd);
}

void hostile_clients::run(kind k, std::uint32_t id, int first_fd) {
  // The idle and the slow ones connect again each time the hub cuts them, until stop(); the
  // others once (the hub refuses frames for a rank it has cut off, and so cuts the flood).
  const bool once = k != kind::idle && k != kind::slow;
  std::uint64_t serial = 0;
  do {
    const int given = std::exchange(first_fd, -1);
    const int fd = given >= 0 ? given : open(k);
    if (fd < 0) return;
    std::array<std::byte, hello_bytes> hello;
    encode_hello(id, hello.data());
    bool sending = true;
    switch (k) {
      case kind::early:
      case kind::idle:
        break;
      case kind::non_reader:  // its hello went in start()
        break;
      case kind::slow: {
        std::vector<std::byte> start(hello_bytes + header_bytes + 1000);
        std::copy(hello.begin(), hello.end(), start.begin());
        header h;
        h.source = id;
        h.destination = 0;
        h.length = ceiling_;
        encode(h, start.data() + hello_bytes);
        fill_payload(id, 0, std::span(start).subspan(hello_bytes + header_bytes));
        sending = write_all(fd, start) == 0;
        break;
      }
      case kind::flood: {
        std::vector<std::byte> frame(header_bytes + 64 * 1024);
        sending = write_all(fd, hello) == 0;
        while (sending && !stopping()) {
          header h;
          h.source = id;
          h.destination = non_reader_;
          h.serial = serial;
          h.length = frame.size() - header_bytes;
          encode(h, frame.data());
          fill_payload(id, serial++, std::span(frame).subspan(header_bytes));
          sending = write_all(fd, frame) == 0;
        }
        break;
      }
    }
    // Hold the connection, reading nothing, until the hub closes it or stop() shuts it down.
    if (sending) {
      pollfd p{fd, POLLRDHUP, 0};
      while (!stopping() && ::poll(&p, 1, -1) < 0) {
      }
    }
    close(fd);
  } while (!once && !stopping());
}

}  // namespace relay
