#include "rank.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <span>
#include <stdexcept>

namespace relay {

namespace {
constexpr int max_printed_failures = 20;

std::string u64(std::uint64_t v) { return std::to_string(v); }

std::string hex_byte(std::byte b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", std::to_integer<unsigned>(b));
  return s;
}
}  // namespace

void run_context::fail(std::uint32_t rank, const std::string& message) {
  failed.store(true, std::memory_order_relaxed);
  const int n = printed_.fetch_add(1, std::memory_order_relaxed);
  if (n < max_printed_failures) {
    std::fprintf(stderr, "relay: FAIL: rank %u: %s\n", rank, message.c_str());
  } else if (n == max_printed_failures) {
    std::fprintf(stderr, "relay: FAIL: further failures not shown\n");
  }
}

void run_context::note_received(std::uint64_t payload_bytes) {
  bytes_received.fetch_add(payload_bytes, std::memory_order_relaxed);
  if (frames_received.fetch_add(1, std::memory_order_relaxed) + 1 == traffic_threshold) {
    {
      std::lock_guard lk(mu);
      traffic_flowing = true;
    }
    cv.notify_all();
  }
}

void run_context::count_done(std::uint32_t& counter) {
  {
    std::lock_guard lk(mu);
    ++counter;
  }
  cv.notify_all();
}

void run_context::time_frames() {
  pairs_ = std::make_unique<pair_times[]>(std::size_t{ranks} * ranks);
}

void run_context::note_sending(std::uint32_t source, std::uint32_t destination) {
  if (!pairs_) return;
  pair_times& p = pairs_[std::size_t{source} * ranks + destination];
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(p.mu);
  p.sent.push_back(now);
}

void run_context::note_arrived(std::uint32_t source, std::uint32_t destination) {
  if (!pairs_) return;
  pair_times& p = pairs_[std::size_t{source} * ranks + destination];
  const auto now = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point sent;
  {
    std::lock_guard lk(p.mu);
    if (p.sent.empty()) return;  // a frame the verdict fails anyway (duplicated)
    sent = p.sent.front();
    p.sent.pop_front();
  }
  sent_to_received.record(now - sent);
  (destination == 0 ? to_rank0 : to_others).record(now - sent);
}

rank_node::rank_node(run_context& ctx, std::uint32_t id, std::uint64_t frames)
    : ctx_(ctx), id_(id), frames_(frames), sent_(ctx.ranks, 0), received_(ctx.ranks, 0) {}

rank_node::~rank_node() {
  join();
  if (fd_ >= 0) ::close(fd_);
}

void rank_node::start(std::uint16_t hub_port) {
  fd_ = connect_loopback(hub_port);
  std::array<std::byte, hello_bytes> hello;
  encode_hello(id_, hello.data());
  if (const int err = write_all(fd_, hello); err != 0) {
    throw std::runtime_error("rank " + std::to_string(id_) + ": hello: " + std::strerror(err));
  }
  receiver_ = std::thread([this] { receive_loop(); });
  sender_ = std::thread([this] { send_loop(); });
}

void rank_node::join() {
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
}

std::uint32_t rank_node::destination(std::uint64_t k) const noexcept {
  // Any other rank, spread by a hash, so every pair of ranks carries traffic both ways.
  const std::uint64_t h = mix64(mix64(ctx_.seed ^ 0xd1ce) ^ (std::uint64_t{id_} << 40) ^ k);
  return static_cast<std::uint32_t>((id_ + 1 + h % (ctx_.ranks - 1)) % ctx_.ranks);
}

void rank_node::send_loop() {
  std::vector<std::uint64_t> next(ctx_.ranks, 0);  // the next serial per destination
  std::vector<std::byte> frame;
  try {
    for (std::uint64_t k = 0; !ctx_.failed.load(std::memory_order_relaxed); ++k) {
      // With a duration, every rank sends at least one frame, however short the duration.
      if (ctx_.deadline ? k > 0 && std::chrono::steady_clock::now() >= *ctx_.deadline
                        : k >= frames_) {
        break;
      }
      const std::uint32_t to = destination(k);
      header h;
      h.source = id_;
      h.destination = to;
      h.serial = next[to]++;
      h.length = frame_size(ctx_.sizes, ctx_.seed, id_, to, h.serial);
      frame.resize(header_bytes + h.length);
      encode(h, frame.data());
      fill_payload(id_, h.serial, std::span(frame).subspan(header_bytes));
      ctx_.note_sending(id_, to);
      if (const int err = write_all(fd_, frame); err != 0) {
        ctx_.fail(id_, "sending frame (serial " + u64(h.serial) + ") to the hub: " +
                           std::strerror(err));
        break;
      }
    }
    {
      std::unique_lock lk(ctx_.mu);
      ++ctx_.senders_holding;
      ctx_.cv.notify_all();
      ctx_.cv.wait(lk, [&] { return !ctx_.hold_end; });
    }
    // One end marker per destination, carrying how many frames it should have received.
    for (std::uint32_t to = 0; to < ctx_.ranks; ++to) {
      if (to == id_) continue;
      header h;
      h.kind = static_cast<std::uint32_t>(frame_kind::end);
      h.source = id_;
      h.destination = to;
      h.serial = next[to];
      std::array<std::byte, header_bytes> raw;
      encode(h, raw.data());
      if (const int err = write_all(fd_, raw); err != 0) {
        ctx_.fail(id_, std::string("sending the end marker to the hub: ") + std::strerror(err));
        break;
      }
    }
  } catch (const std::exception& e) {
    ctx_.fail(id_, std::string("sender: ") + e.what());
  }
  ::shutdown(fd_, SHUT_WR);  // the hub's pump reads EOF: this rank has nothing more to send
  sent_ = next;
  ctx_.count_done(ctx_.senders_done);
}

void rank_node::receive_loop() {
  std::vector<std::uint64_t> next(ctx_.ranks, 0);  // the serial expected next per source
  std::vector<bool> ended(ctx_.ranks, false);
  std::map<std::uint32_t, std::uint64_t> next_from_guest;  // the same for guests
  std::vector<std::byte> body;
  const auto fail = [&](const std::string& m) { ctx_.fail(id_, m); };
  // --slow-rank: rank 0 keeps to its pace, payload bytes a second since its first read.
  const double pace = id_ == 0 ? ctx_.slow_rate : 0;
  std::optional<std::chrono::steady_clock::time_point> paced_from;
  double paced_bytes = 0;
  try {
    for (;;) {
      std::array<std::byte, header_bytes> raw;
      io_result r = read_exact(fd_, raw.data(), raw.size());
      if (r.error != 0) {
        fail(std::string("reading from the hub: ") + std::strerror(r.error));
        break;
      }
      if (r.done == 0) break;  // the hub closed: everything for this rank has been written
      if (r.done < raw.size()) {
        fail("the hub closed in the middle of a frame header");
        break;
      }
      const header h = decode(raw.data());
      if (h.magic != frame_magic || h.length > ctx_.ceiling) {
        // The stream is out of step; nothing after this can be trusted. Read on to EOF so that
        // the hub's drain is not left blocked on a full socket.
        fail("a header that is not a frame's (magic " + u64(h.magic) + ", length " +
             u64(h.length) + "); the stream is out of step");
        discard_to_eof(fd_);
        break;
      }
      body.resize(h.length);
      r = read_exact(fd_, body.data(), body.size());
      if (r.done < body.size()) {
        fail("the hub closed in the middle of frame (source " + u64(h.source) + ", serial " +
             u64(h.serial) + ") after " + u64(r.done) + " of " + u64(h.length) + " bytes");
        break;
      }
      // Timed before the pace's sleep: the frame has arrived whole.
      if (h.is(frame_kind::data) && h.source < ctx_.ranks && h.source != id_ &&
          h.destination == id_) {
        ctx_.note_arrived(h.source, id_);
      }
      if (pace > 0) {  // a rate, not a condition: the hub sees a reader this slow
        if (!paced_from) paced_from = std::chrono::steady_clock::now();
        paced_bytes += static_cast<double>(h.length);
        const std::chrono::duration<double> due(paced_bytes / pace);
        std::this_thread::sleep_until(
            *paced_from + std::chrono::duration_cast<std::chrono::steady_clock::duration>(due));
      }
      const std::uint32_t s = h.source;
      const std::string frame = "frame (source " + u64(s) + ", serial " + u64(h.serial) + ")";
      if (h.destination != id_) {
        fail(frame + " is addressed to rank " + u64(h.destination) + " but arrived here");
        continue;
      }
      if (s == id_) {
        fail(frame + ": this rank's own id as the source");
        continue;
      }
      if (s >= ctx_.ranks) {
        // A guest: the hub routes its frames too. Its lengths are its own. A guest that follows
        // the protocol sends the pattern with serials from 0; one that does not is no sign of
        // the hub's corruption (a guest's bytes are its own), so it is counted, not failed.
        // End markers from guests carry nothing to check.
        if (!h.is(frame_kind::data)) continue;
        std::uint64_t& expected = next_from_guest[s];
        if (h.serial != expected || check_payload(s, h.serial, body) != no_difference) {
          ++guest_frames_off_pattern_;
        }
        expected = h.serial + 1;
        ++guest_frames_;
        continue;
      }
      if (h.is(frame_kind::end)) {
        if (ended[s]) {
          fail("a second end marker from source " + u64(s));
        } else if (h.serial > next[s]) {
          fail("lost frames: source " + u64(s) + " sent " + u64(h.serial) + " frames but serials " +
               u64(next[s]) + ".." + u64(h.serial - 1) + " never arrived");
        } else if (h.serial < next[s]) {
          fail("source " + u64(s) + "'s end marker announces " + u64(h.serial) + " frames, but " +
               u64(next[s]) + " arrived");
        }
        ended[s] = true;
        continue;
      }
      if (!h.is(frame_kind::data)) {
        fail(frame + ": unknown kind " + u64(h.kind));
        continue;
      }
      if (ended[s]) {
        fail(frame + " arrived after the source's end marker");
        continue;
      }
      if (h.serial < next[s]) {
        fail("duplicate: " + frame + " arrived again (serial " + u64(next[s]) + " was expected)");
        continue;
      }
      if (h.serial > next[s]) {
        fail("lost frames: source " + u64(s) + " serials " + u64(next[s]) + ".." +
             u64(h.serial - 1) + " never arrived (serial " + u64(h.serial) + " came next)");
      }
      next[s] = h.serial + 1;
      const std::size_t want = frame_size(ctx_.sizes, ctx_.seed, s, id_, h.serial);
      if (h.length != want) {
        fail(frame + " is " + u64(h.length) + " bytes long, expected " + u64(want));
      } else if (const std::size_t at = check_payload(s, h.serial, body);
                 at != no_difference) {
        fail(frame + ": byte offset " + u64(at) + " of " + u64(h.length) + " is " +
             hex_byte(body[at]) + ", expected " + hex_byte(expected_byte(s, h.serial, at)));
      }
      ctx_.note_received(h.length);
    }
    for (std::uint32_t s = 0; s < ctx_.ranks; ++s) {
      if (s != id_ && !ended[s]) {
        fail("lost frames: the stream from source " + u64(s) + " ended without its end marker, "
             "after " + u64(next[s]) + " frames");
      }
    }
  } catch (const std::exception& e) {
    fail(std::string("receiver: ") + e.what());
    discard_to_eof(fd_);
  }
  received_ = next;
  ctx_.count_done(ctx_.receivers_done);
}

}  // namespace relay
