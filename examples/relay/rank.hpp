// relay/rank.hpp: a rank, one TCP connection to the hub with two threads on it. The sender sends
// frames to the other ranks and then one end marker to each; the receiver checks every byte of
// every frame, its length, and its serial against the last one from the same source, until the
// hub closes the connection.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "latency.hpp"
#include "wire.hpp"

namespace relay {

// What the ranks of one run share: the traffic's shape, the verdict, and the counters the
// progress reports read.
struct run_context {
  std::uint32_t ranks = 3;
  size_spec sizes;
  std::uint64_t seed = 1;
  std::size_t ceiling = 0;  // the hub's: a receiver refuses a header announcing more
  std::optional<std::chrono::steady_clock::time_point> deadline;  // --duration
  double slow_rate = 0;  // --slow-rank: rank 0's most payload bytes read a second; 0: no limit

  std::atomic<bool> failed{false};
  std::atomic<std::uint64_t> frames_received{0}, bytes_received{0};

  // Progress, for the main thread and the bad-input clients to wait on.
  std::mutex mu;
  std::condition_variable cv;
  std::uint32_t senders_done = 0;    // guarded by mu
  std::uint32_t receivers_done = 0;  // guarded by mu
  bool traffic_flowing = false;      // guarded by mu: set once traffic_threshold frames arrived
  bool hold_end = false;             // guarded by mu: senders wait before their end markers
  std::uint32_t senders_holding = 0; // guarded by mu: senders that reached that wait
  std::uint64_t traffic_threshold = 1;

  // Reports a failed check (the first few are printed) and marks the run failed.
  void fail(std::uint32_t rank, const std::string& message);
  void note_received(std::uint64_t payload_bytes);
  void count_done(std::uint32_t& counter);  // senders_done or receivers_done, under mu

  // Each data frame's latency from its sender's first byte written to its receiver's last byte
  // read, the whole way through the hub, once time_frames() has been called (before the ranks
  // start). A pair's send times queue in order, and its receiver takes them in the same order:
  // serials are consecutive per pair and arrive so.
  void time_frames();
  void note_sending(std::uint32_t source, std::uint32_t destination);
  void note_arrived(std::uint32_t source, std::uint32_t destination);
  latency_histogram sent_to_received;
  latency_histogram to_rank0, to_others;  // the same split by destination (rank 0: --slow-rank's)

 private:
  struct pair_times {
    std::mutex mu;
    std::deque<std::chrono::steady_clock::time_point> sent;
  };
  std::unique_ptr<pair_times[]> pairs_;  // source x ranks + destination
  std::atomic<int> printed_{0};
};

class rank_node {
 public:
  rank_node(run_context& ctx, std::uint32_t id, std::uint64_t frames);
  ~rank_node();
  rank_node(const rank_node&) = delete;
  rank_node& operator=(const rank_node&) = delete;

  void start(std::uint16_t hub_port);  // connects (throws on failure) and starts both threads
  void join();

  // Valid after join(): data frames sent to each destination, and received from each source.
  [[nodiscard]] const std::vector<std::uint64_t>& sent() const noexcept { return sent_; }
  [[nodiscard]] const std::vector<std::uint64_t>& received() const noexcept { return received_; }
  // Valid after join(): data frames received from guests (ids past the ranks), and how many of
  // them did not follow the pattern or the serials (counted, not failed: see receive_loop).
  [[nodiscard]] std::uint64_t guest_frames() const noexcept { return guest_frames_; }
  [[nodiscard]] std::uint64_t guest_frames_off_pattern() const noexcept {
    return guest_frames_off_pattern_;
  }

 private:
  void send_loop();
  void receive_loop();
  [[nodiscard]] std::uint32_t destination(std::uint64_t k) const noexcept;

  run_context& ctx_;
  const std::uint32_t id_;
  const std::uint64_t frames_;  // ignored with a deadline
  int fd_ = -1;
  std::thread sender_, receiver_;
  std::vector<std::uint64_t> sent_, received_;
  std::uint64_t guest_frames_ = 0, guest_frames_off_pattern_ = 0;
};

}  // namespace relay
