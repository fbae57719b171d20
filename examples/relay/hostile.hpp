// relay/hostile.hpp: clients that are slow, idle, early or never read, for --hostile. Unlike the
// bad-input clients, they send nothing the hub may refuse: they only hold connections, bytes and
// windows, as unlucky or hostile peers do, while the ranks' traffic must complete intact.
//
//   early       two connections made before any rank, that never send a hello
//   idle        a connection that never sends a hello; reconnects whenever the hub cuts it
//   slow        three guests that each announce a frame of the ceiling, send 1000 bytes of it
//               and go quiet; each reconnects whenever the hub cuts it
//   non-reader  an extra rank (id = the ranks' count) that never reads, and a guest that floods
//               it with 64 KiB frames
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace relay {

class hostile_clients {
 public:
  // non_reader: the extra rank's id; guests take ids after it.
  hostile_clients(std::uint16_t port, std::uint32_t non_reader, std::size_t ceiling);
  ~hostile_clients();
  hostile_clients(const hostile_clients&) = delete;
  hostile_clients& operator=(const hostile_clients&) = delete;

  void start_early();  // before the ranks connect
  // The others, once the ranks are connected. The non-reader has sent its hello when this
  // returns (throws std::system_error if it cannot connect), so that the hub, which counts it
  // among its ranks, waits for it even if the ranks are done before its thread runs.
  void start();
  // Closes every hostile connection and joins the clients: call it once the ranks have sent
  // everything, so that the hub, whose ranks include the non-reader, can end.
  void stop();

  // After stop(): how many connections each kind made, for the log.
  [[nodiscard]] std::string summary() const;

 private:
  enum class kind { early, idle, slow, flood, non_reader };
  void run(kind k, std::uint32_t id, int first_fd = -1);
  int open(kind k);                // a connected socket, registered, or -1 once stopping
  void close(int fd);              // unregisters and closes
  [[nodiscard]] bool stopping() const noexcept { return stopping_.load(std::memory_order_relaxed); }

  const std::uint16_t port_;
  const std::uint32_t non_reader_;
  const std::size_t ceiling_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::vector<int> open_;  // guarded by mu_: sockets stop() must shut down
  std::atomic<std::uint64_t> connects_[5] = {};
  std::vector<std::thread> threads_;
};

}  // namespace relay
