// relay/wire.hpp: the relay's wire format, the payload pattern every receiver checks, and the
// blocking socket helpers the ranks and the test clients share.
//
// On every connection the client first sends a hello (magic, its id), then frames. A frame is a
// 32-byte little-endian header followed by `length` payload bytes:
//
//   offset  0  u32 magic       frame_magic
//   offset  4  u32 kind        0 data, 1 end (the sender's last frame to that destination)
//   offset  8  u32 source      the sending rank
//   offset 12  u32 destination the receiving rank
//   offset 16  u64 serial      data: consecutive per (source, destination) from 0;
//                              end: how many data frames the source sent to that destination
//   offset 24  u64 length      payload bytes (0 for end)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace relay {

inline constexpr std::uint32_t hello_magic = 0x484c5253;  // "SRLH" on the wire
inline constexpr std::uint32_t frame_magic = 0x464c5253;  // "SRLF" on the wire
inline constexpr std::size_t hello_bytes = 8;
inline constexpr std::size_t header_bytes = 32;

enum class frame_kind : std::uint32_t { data = 0, end = 1 };

struct header {
  std::uint32_t magic = frame_magic;
  std::uint32_t kind = static_cast<std::uint32_t>(frame_kind::data);  // raw: the hub validates it
  std::uint32_t source = 0;
  std::uint32_t destination = 0;
  std::uint64_t serial = 0;
  std::uint64_t length = 0;

  [[nodiscard]] bool is(frame_kind k) const noexcept {
    return kind == static_cast<std::uint32_t>(k);
  }
};

void encode(const header& h, std::byte* out) noexcept;  // writes header_bytes
[[nodiscard]] header decode(const std::byte* in) noexcept;
void encode_hello(std::uint32_t id, std::byte* out) noexcept;  // writes hello_bytes
// False when the bytes are not a hello.
[[nodiscard]] bool decode_hello(const std::byte* in, std::uint32_t& id) noexcept;

// The payload of frame (source, serial): byte i is a function of source, serial and i alone, so
// a receiver recomputes it and a stale, shared or misrouted buffer shows up as a wrong byte.
void fill_payload(std::uint32_t source, std::uint64_t serial, std::span<std::byte> out) noexcept;
inline constexpr std::size_t no_difference = static_cast<std::size_t>(-1);
// The offset of the first byte that differs from the pattern, or no_difference.
[[nodiscard]] std::size_t check_payload(std::uint32_t source, std::uint64_t serial,
                                        std::span<const std::byte> in) noexcept;
[[nodiscard]] std::byte expected_byte(std::uint32_t source, std::uint64_t serial,
                                      std::size_t offset) noexcept;

// Frame sizes: a function of (seed, source, destination, serial), so a receiver also knows what
// length every frame must have.
struct size_spec {
  bool mixed = true;       // mostly small frames, some up to mixed_max
  std::size_t fixed = 0;   // when !mixed
};
inline constexpr std::size_t mixed_max = std::size_t{1} << 20;
[[nodiscard]] std::size_t frame_size(const size_spec& s, std::uint64_t seed, std::uint32_t source,
                                     std::uint32_t destination, std::uint64_t serial) noexcept;

[[nodiscard]] std::uint64_t mix64(std::uint64_t x) noexcept;  // a 64-bit finalizer (splitmix64's)

// ---- client sockets (blocking, IPv4 loopback only) ----

struct io_result {
  std::size_t done = 0;  // bytes moved
  int error = 0;         // errno of a failed call; 0 with done < n means the peer closed first
};

// Reads exactly n bytes unless the peer closes or the read fails.
[[nodiscard]] io_result read_exact(int fd, std::byte* out, std::size_t n) noexcept;
// Writes the bytes in full; 0 or an errno. Never raises SIGPIPE.
[[nodiscard]] int write_all(int fd, std::span<const std::byte> bytes) noexcept;
// Reads and throws away until the peer closes or the read fails.
void discard_to_eof(int fd) noexcept;

// A connected socket to 127.0.0.1:port with TCP_NODELAY set. Throws std::system_error.
[[nodiscard]] int connect_loopback(std::uint16_t port);

}  // namespace relay
