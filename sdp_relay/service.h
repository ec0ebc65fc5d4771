// sdp_relay/service.h — SDP over RDMA verbs for one process (DESIGN.md §11):
// outgoing connections, listeners, and each connection's relay, all on the
// relay loop; the application threads' calls post to it and wait.
//
// * Connect: an RDMA CM connection in the TCP port space to the peer's port,
//   the Hello in the request's private data (truncated to the 56 bytes the
//   CM leaves), the HelloAck in the answer; then a loopback "gate" listener
//   of this connection, which the application's own socket connects to
//   (Expect names that socket's address: no other connection is taken). The
//   relay joins the two.
// * Listen: the application's listening socket, bound to A:P, is served on
//   the RDMA CM's port P at A; each request is answered (HelloAck) and, once
//   established, the relay connects over loopback to the application's
//   listener — accept() returns that connection, whose SDP addresses
//   Accepted() tells.
//
// Thread-safety: every method from any thread (they post to the loop).
#ifndef RDS_SDP_RELAY_SERVICE_H_
#define RDS_SDP_RELAY_SERVICE_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rds::sdp {

class Service {
 public:
  // The process's service, or why SDP over verbs cannot run here (no RDMA
  // device, rdma-core missing; decided once, said once at info level), or a
  // fork child of the process that made it (SDP there runs over TCP).
  static absl::StatusOr<Service*> Get();
  // The service if this process has started it, else null (never starts it).
  static Service* IfRunning();

  // Before the process image ends (exit, exec): its relay thread ends with
  // it, so whatever the application wrote must reach the peers first, as a
  // kernel's TCP delivers it after the process is gone. Waits until every
  // relayed connection has flushed (Relay::Flushed, TcpProxy::Flushed) or
  // nothing has moved for `stall`. (The caller shuts the application's
  // connected sockets for writing first: their end of file goes as DisConn.)
  virtual void FlushBeforeExit(absl::Duration stall) = 0;

  // Whether `addr` (an address of this host; any-address counts when some
  // device exists) is on an RDMA device.
  virtual bool OnRdmaDevice(const sockaddr_storage& addr) = 0;

  struct Outgoing {
    uint64_t token = 0;
    sockaddr_storage gate{};  // where the application's socket connects
    socklen_t gate_len = 0;
    sockaddr_storage local{};  // the SDP connection's own addresses
    sockaddr_storage peer{};
  };
  // An SDP connection from `local` (any address or port allowed) to `peer`,
  // waiting at most `timeout`. Errors are RdsError(errno) with the errno a
  // TCP connect would give (ECONNREFUSED: nobody serves SDP there;
  // ETIMEDOUT; ENETUNREACH; EHOSTUNREACH); the reason is logged.
  virtual absl::StatusOr<Outgoing> Connect(const sockaddr_storage& local,
                                           const sockaddr_storage& peer,
                                           absl::Duration timeout) = 0;
  // The application's socket, connected to the gate of `token`, has this
  // local address. (Abandon: it will not come; the connection is dropped.)
  virtual void Expect(uint64_t token, const sockaddr_storage& app_local) = 0;
  virtual void Abandon(uint64_t token) = 0;

  // A non-blocking connect (DESIGN.md §11, the gate): Begin starts the SDP
  // connection and returns at once with a gate that takes the application's
  // socket at once but holds its POLLOUT back: the gate's receive buffer is
  // the smallest, and Join's `filler` bytes — which the caller wrote into
  // its socket, its send buffer set to the smallest, until EAGAIN — stay
  // queued. When the SDP connection is up the relay reads and drops exactly
  // those bytes (the application's POLLOUT), raises both buffers (the
  // application's through `app_dup`, a duplicate of its fd the relay owns
  // and closes), and relays. If it fails, the application's socket is reset
  // and the state says why (its SO_ERROR).
  struct ConnectState {
    enum class Phase { kPending, kUp, kFailed };
    std::mutex mu;
    Phase phase = Phase::kPending;  // guarded by mu
    int error = 0;                  // kFailed: the errno a TCP connect would give
    sockaddr_storage local{};       // kUp: the SDP connection's own address
    bool over_tcp = false;          // kUp: "both" found no SDP; TCP relayed
    // Called on the relay thread after each change of phase, outside mu
    // (set under mu; a caller that sets it late reads the phase itself).
    std::function<void()> on_change;  // guarded by mu
  };
  struct Begun {
    uint64_t token = 0;
    sockaddr_storage gate{};
    socklen_t gate_len = 0;
    std::shared_ptr<ConnectState> state;
  };
  // `tcp_fallback` (libsdp's "both"): where no SDP connection comes, the
  // relay connects TCP to `peer` itself and relays that (tcp_proxy.h); the
  // state then says up, or the TCP connect's error.
  virtual absl::StatusOr<Begun> Begin(const sockaddr_storage& local,
                                      const sockaddr_storage& peer, bool tcp_fallback) = 0;
  virtual void Join(uint64_t token, const sockaddr_storage& app_local, size_t filler,
                    int app_dup) = 0;

  // Destinations (address and port) found without SDP under "both", for a
  // minute (sdp/no_sdp_cache.h): their connects go to TCP at once.
  virtual bool NoSdpAt(const sockaddr_storage& peer) = 0;
  virtual void NoteSdpAt(const sockaddr_storage& peer, bool serves_sdp) = 0;

  // Serves SDP connections to the application's listener bound to `bound`
  // (an error: the address is on no RDMA device, or the CM's port is taken).
  virtual absl::Status Listen(const sockaddr_storage& bound, int backlog) = 0;
  // Stops serving `bound` (its listener closed).
  virtual void Unlisten(const sockaddr_storage& bound) = 0;
  // The SDP connection's own addresses, for a connection the relay made to
  // a listener, found by its address as the application's accept() sees
  // its peer; nullopt for any other connection (a plain TCP client).
  struct Names {
    sockaddr_storage local{}, peer{};
  };
  virtual std::optional<Names> Accepted(const sockaddr_storage& loopback_peer) = 0;

 protected:
  virtual ~Service() = default;
};

}  // namespace rds::sdp

#endif  // RDS_SDP_RELAY_SERVICE_H_
