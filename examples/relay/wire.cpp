#include "wire.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace relay {

namespace {

template <class T>
void put(std::byte* p, T v) noexcept {
  for (std::size_t i = 0; i < sizeof v; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
template <class T>
T get(const std::byte* p) noexcept {
  T v = 0;
  for (std::size_t i = 0; i < sizeof v; ++i) v |= T{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}

// Word k of frame (source, serial)'s pattern; byte i is byte i % 8 (little-endian) of word i / 8.
struct pattern {
  std::uint64_t key;
  pattern(std::uint32_t source, std::uint64_t serial) noexcept
      : key(mix64((std::uint64_t{source} << 40) ^ mix64(serial ^ 0x5ca1ab1e00000000ULL))) {}
  std::uint64_t word(std::uint64_t k) const noexcept {
    return mix64(key + (k + 1) * 0x9e3779b97f4a7c15ULL);
  }
};

}  // namespace

std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

void encode(const header& h, std::byte* out) noexcept {
  put(out + 0, h.magic);
  put(out + 4, h.kind);
  put(out + 8, h.source);
  put(out + 12, h.destination);
  put(out + 16, h.serial);
  put(out + 24, h.length);
}

header decode(const std::byte* in) noexcept {
  return {.magic = get<std::uint32_t>(in + 0),
          .kind = get<std::uint32_t>(in + 4),
          .source = get<std::uint32_t>(in + 8),
          .destination = get<std::uint32_t>(in + 12),
          .serial = get<std::uint64_t>(in + 16),
          .length = get<std::uint64_t>(in + 24)};
}

void encode_hello(std::uint32_t id, std::byte* out) noexcept {
  put(out, hello_magic);
  put(out + 4, id);
}

bool decode_hello(const std::byte* in, std::uint32_t& id) noexcept {
  if (get<std::uint32_t>(in) != hello_magic) return false;
  id = get<std::uint32_t>(in + 4);
  return true;
}

void fill_payload(std::uint32_t source, std::uint64_t serial, std::span<std::byte> out) noexcept {
  const pattern p(source, serial);
  const std::size_t words = out.size() / 8;
  for (std::size_t k = 0; k < words; ++k) put(out.data() + 8 * k, p.word(k));
  if (const std::size_t tail = out.size() % 8; tail != 0) {
    std::array<std::byte, 8> w;
    put(w.data(), p.word(words));
    std::memcpy(out.data() + 8 * words, w.data(), tail);
  }
}

std::size_t check_payload(std::uint32_t source, std::uint64_t serial,
                          std::span<const std::byte> in) noexcept {
  const pattern p(source, serial);
  std::array<std::byte, 8> w;
  for (std::size_t at = 0; at < in.size(); at += 8) {
    put(w.data(), p.word(at / 8));
    const std::size_t n = std::min<std::size_t>(8, in.size() - at);
    if (std::memcmp(w.data(), in.data() + at, n) != 0) {
      for (std::size_t i = 0; i < n; ++i) {
        if (w[i] != in[at + i]) return at + i;
      }
    }
  }
  return no_difference;
}

std::byte expected_byte(std::uint32_t source, std::uint64_t serial, std::size_t offset) noexcept {
  std::array<std::byte, 8> w;
  put(w.data(), pattern(source, serial).word(offset / 8));
  return w[offset % 8];
}

std::size_t frame_size(const size_spec& s, std::uint64_t seed, std::uint32_t source,
                       std::uint32_t destination, std::uint64_t serial) noexcept {
  if (!s.mixed) return s.fixed;
  const std::uint64_t h = mix64(mix64(seed) ^ (std::uint64_t{source} << 48) ^
                                (std::uint64_t{destination} << 32) ^ mix64(serial));
  const std::uint64_t bucket = h % 1000;
  const std::uint64_t v = h >> 20;
  // Mostly small frames, as on a real link, with enough large ones that the pool's big classes,
  // the gate and the budget all come into play. The extremes, 0 and exactly mixed_max, occur too.
  if (bucket == 0) return 0;
  if (bucket == 999) return mixed_max;
  if (bucket < 800) return 1 + v % 4096;                          // 1 B .. 4 KiB
  if (bucket < 970) return 4097 + v % (65536 - 4096);             // 4 KiB .. 64 KiB
  return 65537 + v % (mixed_max - 65536);                         // 64 KiB .. 1 MiB
}

io_result read_exact(int fd, std::byte* out, std::size_t n) noexcept {
  io_result r;
  while (r.done < n) {
    const ssize_t got = ::recv(fd, out + r.done, n - r.done, 0);
    if (got > 0) {
      r.done += static_cast<std::size_t>(got);
    } else if (got == 0) {
      break;
    } else if (errno != EINTR) {
      r.error = errno;
      break;
    }
  }
  return r;
}

int write_all(int fd, std::span<const std::byte> bytes) noexcept {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t put = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (put > 0) {
      done += static_cast<std::size_t>(put);
    } else if (put < 0 && errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

void discard_to_eof(int fd) noexcept {
  std::array<std::byte, 64 * 1024> scratch;
  for (;;) {
    const ssize_t got = ::recv(fd, scratch.data(), scratch.size(), 0);
    if (got == 0 || (got < 0 && errno != EINTR)) return;
  }
}

namespace {
[[noreturn]] void throw_errno(int fd, const char* what) {
  const int e = errno;
  if (fd >= 0) ::close(fd);
  throw std::system_error(e, std::generic_category(), what);
}
}  // namespace

int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno(-1, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    throw_errno(fd, "connect to the hub");
  }
  const int on = 1;  // frames go out whole: waiting to coalesce them only adds latency
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return fd;
}

}  // namespace relay
