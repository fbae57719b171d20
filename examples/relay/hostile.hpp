// relay/hostile.hpp: clients that are slow, idle, early or never read, for --hostile. They send
// nothing the hub may refuse; they hold connections, bytes and windows, as unlucky or hostile
// peers do, while the ranks' traffic must complete intact:
//   early       two connections made before any rank, that never send a hello
//   idle        connections that never send a hello
//   quiet       guests that send a hello and then nothing
//   slow        guests that each announce a frame of the ceiling, send 1000 bytes of it and stop
//   non-reader  an extra rank (id = the ranks' count) that never reads, and a guest that floods
//               it with 64 KiB frames
// The idle, quiet and slow ones reconnect whenever the hub cuts them. They run in a second
// process, forked when this object is made, on one thread and one io_context: thousands of
// connections need neither a thread each nor the hub process's open files.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace relay {

class hostile_clients {
 public:
  // non_reader: the extra rank's id; guests take ids after it. connections: how many the
  // clients hold at once, at least 8: two early, the non-reader and its flood, three slow, one
  // idle; each hundred more adds a slow one, and the rest are idle and quiet, half each.
  hostile_clients(std::uint32_t non_reader, std::size_t ceiling, std::size_t connections);
  ~hostile_clients();
  hostile_clients(const hostile_clients&) = delete;
  hostile_clients& operator=(const hostile_clients&) = delete;

  // Both return once their connections are made; they throw std::runtime_error if the clients'
  // process fails.
  void start_early(std::uint16_t port);  // before the ranks connect
  // The others. The non-reader has sent its hello when this returns, so that the hub, which
  // counts it among its ranks, waits for it even if the ranks are done first.
  void start();
  // Closes every hostile connection (the clients' process exits), and says how many
  // connections of each kind were made, for the log. Call it once the ranks have sent
  // everything, so that the hub, whose ranks include the non-reader, can end.
  std::string stop();

 private:
  std::string command(const std::string& line);  // sends a line, returns the reply's

  pid_t child_ = -1;
  int child_fd_ = -1;  // a socketpair to the clients' process
};

}  // namespace relay
