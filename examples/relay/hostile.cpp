#include "hostile.hpp"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include "wire.hpp"

namespace relay {
namespace {

using asio::ip::tcp;
enum class kind { early, idle, quiet, slow, flood, non_reader };
constexpr const char* kind_names[] = {"early", "idle", "quiet", "slow", "flooding the non-reader",
                                      "non-reader"};

auto as_tuple() { return asio::experimental::as_tuple(asio::use_awaitable); }

// The clients' process: its own io_context on its only thread.
class clients {
 public:
  clients(std::uint32_t non_reader, std::size_t ceiling, std::size_t connections, int parent)
      : non_reader_(non_reader), ceiling_(ceiling), parent_(io_, parent) {
    const std::size_t slow = 3 + (connections - 8) / 100;
    const std::size_t rest = connections - 4 - slow;  // beside early, non-reader, flood, slow
    counts_ = {2, 1 + (rest - 1) / 2, rest - 1 - (rest - 1) / 2, slow, 1, 1};
  }

  [[noreturn]] void run() {
    asio::co_spawn(io_, commands(), asio::detached);
    io_.run();
    std::_Exit(0);
  }

 private:
  // early PORT, start, stop: each answered with a line once done. EOF (the parent gone) is stop.
  asio::awaitable<void> commands() {
    asio::streambuf buffer;
    for (;;) {
      const auto [ec, n] = co_await asio::async_read_until(parent_, buffer, '\n', as_tuple());
      std::string line(n == 0 ? 0 : n - 1, '\0');
      buffer.sgetn(line.data(), static_cast<std::streamsize>(line.size()));
      buffer.consume(n == 0 ? 0 : 1);
      if (ec || line == "stop") break;
      if (line.starts_with("early ")) {
        port_ = static_cast<std::uint16_t>(std::stoul(line.substr(6)));
        co_await make(kind::early, 0);
      } else if (line == "start") {
        // The non-reader first, so that the hub counts it among its ranks before anything else.
        co_await make(kind::non_reader, non_reader_);
        std::uint32_t guest = non_reader_ + 1;
        for (const kind k : {kind::flood, kind::slow, kind::idle, kind::quiet}) guest = co_await make(k, guest);
      }
      reply("ok");
    }
    std::string summary = "connections made:";
    for (std::size_t k = 0; k < made_.size(); ++k) {
      summary += std::string(k == 0 ? " " : ", ") + kind_names[k] + " " + std::to_string(made_[k]);
    }
    reply(summary);
    std::_Exit(0);  // the kernel closes every connection
  }

  void reply(const std::string& line) {
    std::error_code ec;
    asio::write(parent_, asio::buffer(line + "\n"), ec);
    if (ec) std::_Exit(1);
  }

  // Makes every connection of kind k (guests numbered from `guest` on), one after the other,
  // each then held by a coroutine of its own; answers the next guest's id.
  asio::awaitable<std::uint32_t> make(kind k, std::uint32_t guest) {
    for (std::size_t i = 0; i < counts_[static_cast<int>(k)]; ++i) {
      auto s = co_await connect(k);
      if (!s) break;  // the hub has stopped listening
      const std::uint32_t id = k == kind::non_reader ? non_reader_ : guest++;
      std::array<std::byte, hello_bytes> hello;
      encode_hello(id, hello.data());
      if (k == kind::non_reader) {  // its hello before start() returns; then it holds, reading nothing
        co_await asio::async_write(*s, asio::buffer(hello), as_tuple());
        held_.push_back(std::move(s));
      } else {
        asio::co_spawn(io_, hold(k, id, std::move(s)), asio::detached);
      }
    }
    co_return guest;
  }

  asio::awaitable<std::unique_ptr<tcp::socket>> connect(kind k) {
    auto s = std::make_unique<tcp::socket>(io_);
    const auto [ec] = co_await s->async_connect({asio::ip::address_v4::loopback(), port_}, as_tuple());
    if (ec) co_return nullptr;
    s->set_option(tcp::no_delay(true));
    ++made_[static_cast<int>(k)];
    co_return s;
  }

  // Behaves as kind k on the connection, then holds it, reading nothing, until the hub closes
  // it; the idle, quiet and slow ones then connect again (the others once: the hub refuses
  // frames for a rank it has cut off, and so cuts the flood).
  asio::awaitable<void> hold(kind k, std::uint32_t id, std::unique_ptr<tcp::socket> s) {
    std::uint64_t serial = 0;
    while (s) {
      std::vector<std::byte> out(hello_bytes + (k == kind::slow ? header_bytes + 1000 : 0));
      encode_hello(id, out.data());
      header h;
      h.source = id;
      h.destination = k == kind::flood ? non_reader_ : 0;
      if (k == kind::slow) {  // the start of a frame of the ceiling
        h.length = ceiling_;
        encode(h, out.data() + hello_bytes);
        fill_payload(id, 0, std::span(out).subspan(hello_bytes + header_bytes));
      }
      std::error_code ec;
      if (k != kind::idle && k != kind::early) {
        std::tie(ec, std::ignore) = co_await asio::async_write(*s, asio::buffer(out), as_tuple());
      }
      for (out.resize(header_bytes + 64 * 1024); k == kind::flood && !ec;) {
        h.serial = serial;
        h.length = out.size() - header_bytes;
        encode(h, out.data());
        fill_payload(id, serial++, std::span(out).subspan(header_bytes));
        std::tie(ec, std::ignore) = co_await asio::async_write(*s, asio::buffer(out), as_tuple());
      }
      if (!ec) co_await s->async_wait(tcp::socket::wait_read, as_tuple());  // the hub's EOF or reset
      s.reset();
      if (k == kind::idle || k == kind::quiet || k == kind::slow) s = co_await connect(k);
    }
  }

  const std::uint32_t non_reader_;
  const std::size_t ceiling_;
  asio::io_context io_{1};
  asio::posix::stream_descriptor parent_;  // its end of the socketpair: commands in, replies out
  std::uint16_t port_ = 0;
  std::array<std::size_t, 6> counts_{}, made_{};
  std::vector<std::unique_ptr<tcp::socket>> held_;  // the non-reader's
};

}  // namespace

hostile_clients::hostile_clients(std::uint32_t non_reader, std::size_t ceiling,
                                 std::size_t connections) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::runtime_error("hostile clients: no socketpair");
  }
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t parent = ::getpid();
  child_ = ::fork();
  if (child_ < 0) throw std::runtime_error("hostile clients: fork failed");
  if (child_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // not an orphan holding connections if the parent dies
    if (::getppid() != parent) std::_Exit(1);  // it died before the line above
    ::close(fds[0]);
    clients(non_reader, ceiling, std::max<std::size_t>(connections, 8), fds[1]).run();
  }
  ::close(fds[1]);
  child_fd_ = fds[0];
}

hostile_clients::~hostile_clients() {
  if (child_fd_ >= 0) ::close(child_fd_);  // the clients read EOF and exit
  if (child_ > 0) ::waitpid(child_, nullptr, 0);
}

void hostile_clients::start_early(std::uint16_t port) { command("early " + std::to_string(port)); }
void hostile_clients::start() { command("start"); }

std::string hostile_clients::stop() {
  std::string summary = command("stop");
  ::waitpid(std::exchange(child_, -1), nullptr, 0);
  return summary;
}

std::string hostile_clients::command(const std::string& line) {
  const std::string s = line + "\n";
  if (::write(child_fd_, s.data(), s.size()) != static_cast<ssize_t>(s.size())) {
    throw std::runtime_error("hostile clients: gone");
  }
  std::string reply;
  for (char c = 0; c != '\n';) {
    if (::read(child_fd_, &c, 1) != 1) throw std::runtime_error("hostile clients: gone");
    if (c != '\n') reply += c;
  }
  return reply;
}

}  // namespace relay
