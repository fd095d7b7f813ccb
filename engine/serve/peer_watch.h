// PeerWatch: tells whether the client of an HTTP request has closed its connection, so that its
// sequence is freed at the next step rather than generating for nobody. cpp-httplib (0.11) does not
// hand its handlers the socket, so the socket is found among the process's open descriptors by the
// request's two addresses, once a request.
#pragma once

#include <string>

namespace specgen::serve {

class PeerWatch {
 public:
  // The accepted socket whose local port is `local_port` and whose peer is remote_addr:remote_port;
  // none found (a test double, an odd platform): Closed() is always false.
  PeerWatch(int local_port, const std::string& remote_addr, int remote_port);
  // Whether the peer has closed (or reset) the connection; never blocks. Unread bytes the client
  // sent after its request (a pipelined request) count as open.
  bool Closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace specgen::serve
