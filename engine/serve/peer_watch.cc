#include "engine/serve/peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace specgen::serve {
namespace {

// Port and numeric host of a socket address (IPv4 or IPv6); port -1 for other families.
int PortOf(const sockaddr_storage& a, std::string* host) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    if (host) *host = inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf) ? buf : "";
    return ntohs(in.sin_port);
  }
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (host) *host = inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf) ? buf : "";
    return ntohs(in6.sin6_port);
  }
  return -1;
}

}  // namespace

PeerWatch::PeerWatch(int local_port, const std::string& remote_addr, int remote_port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;  // not a socket
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;   // not connected
    std::string host;
    if (PortOf(local, nullptr) != local_port || PortOf(peer, &host) != remote_port) continue;
    // An IPv4 client of a dual-stack socket reads as ::ffff:a.b.c.d on one side only.
    if (host != remote_addr && host != "::ffff:" + remote_addr && "::ffff:" + host != remote_addr) continue;
    fd_ = fd;
    break;
  }
}

bool PeerWatch::Closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
  if (!(p.revents & POLLIN)) return false;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // an orderly close
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace specgen::serve
