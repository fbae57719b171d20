// relay/bad_input.hpp: raw TCP clients that each send the hub one kind of bad input, for
// --selftest-bad-input. Each connects as a guest (an id past the ranks), so the hub accepts it,
// and then misbehaves; the hub must report it, close that connection, give back any buffer and
// admission the frame held, and keep routing the ranks' traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hub.hpp"

namespace relay {

enum class bad_input {
  oversize,          // a header announcing a payload above the ceiling
  truncated_header,  // 11 bytes of a header, then EOF
  close_mid_frame,   // a header for 200000 bytes, 70000 of them, then EOF
  reset_mid_frame,   // a header for 300000 bytes, 10000 of them, then a TCP reset
  bad_magic,         // an HTTP request where a frame should be
  bad_destination,   // a frame addressed to a rank that does not exist
  bad_hello,         // no relay hello at all
};

struct bad_client {
  bad_input input;
  const char* name;
  std::uint32_t id;          // the guest id its hello claims (none for bad_hello)
  conn_error_kind expected;  // what the hub must report
};

// One client per kind of bad input, with guest ids from `ranks` on.
[[nodiscard]] std::vector<bad_client> bad_clients(std::uint32_t ranks);

// Connects, sends the bad input, then reads until the hub closes the connection. Returns how
// it ended from the client's side, for the log. Throws std::system_error if it cannot connect.
std::string run_bad_client(const bad_client& c, std::uint16_t port, std::size_t ceiling);

}  // namespace relay
