// engine/sys.h — the kernel calls the shim makes for itself.
//
// The shim's library exports libc names (read, close, socket, ...) to
// interpose them, so a plain call from inside the library would come back to
// the wrappers. Everything the engine, transports and configuration do with
// kernel fds goes through these functions instead: raw system calls that
// return -1 and set errno exactly as libc does, never re-entering the shim.
//
// Internal fds (engine sockets, listeners, registry files, per-thread
// eventfds) are created through MakeInternal(), which moves them to a high
// number and records them so the preload layer can protect them from the
// application's close(), close_range() and dup2().
//
// Thread-safety: all functions are safe for concurrent use.
#ifndef RDS_ENGINE_SYS_H_
#define RDS_ENGINE_SYS_H_

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"

namespace rds::sys {

ssize_t Read(int fd, void* buf, size_t n);
ssize_t Write(int fd, const void* buf, size_t n);
// Writes all of buf, retrying on EINTR and short writes (blocking fds only).
bool WriteAll(int fd, const void* buf, size_t n);
ssize_t Readv(int fd, const struct iovec* iov, int n);
ssize_t Writev(int fd, const struct iovec* iov, int n);
int Close(int fd);
int Socket(int domain, int type, int protocol);
int SocketPair(int domain, int type, int protocol, int sv[2]);
int Bind(int fd, const struct sockaddr* addr, socklen_t len);
int Connect(int fd, const struct sockaddr* addr, socklen_t len);
int Listen(int fd, int backlog);
int Shutdown(int fd, int how);
int Accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags);
int Getsockname(int fd, struct sockaddr* addr, socklen_t* len);
int Getpeername(int fd, struct sockaddr* addr, socklen_t* len);
int Setsockopt(int fd, int level, int name, const void* val, socklen_t len);
int Getsockopt(int fd, int level, int name, void* val, socklen_t* len);
ssize_t Sendmsg(int fd, const struct msghdr* msg, int flags);
// sendmsg of `iov` with `pass_fd` attached (SCM_RIGHTS) unless it is -1.
ssize_t SendmsgPassingFd(int fd, const struct iovec* iov, int iovcnt, int pass_fd, int flags);
ssize_t Recvmsg(int fd, struct msghdr* msg, int flags);
ssize_t Sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* to,
               socklen_t len);
ssize_t Recv(int fd, void* buf, size_t n, int flags);
int Fcntl(int fd, int cmd, long arg);
int FcntlLock(int fd, int cmd, struct flock* lock);
int Flock(int fd, int operation);
// stat(2) of a path (newfstatat): libc's stat is interposed (preload/module_paths.cc).
int Stat(const char* path, struct stat* st);
// The names in a directory, "." and ".." left out (getdents64: libc's opendir
// is interposed). False if it cannot be opened or read.
bool ListDir(const char* path, std::vector<std::string>* names);
int Ioctl(int fd, unsigned long request, void* arg);
int Poll(struct pollfd* fds, nfds_t n, int timeout_ms);
// ppoll: `timeout` null waits forever; `mask` (null: unchanged) is the signal mask while waiting.
int Ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask);
int Open(const char* path, int flags, mode_t mode);
int EpollWait(int epfd, struct epoll_event* events, int max, int timeout_ms);
int EpollCtl(int epfd, int op, int fd, struct epoll_event* event);
// A signal's disposition as the kernel keeps it (rt_sigaction(2) with no new
// action): the application's `sigaction`, which the shim interposes, is not
// involved. glibc's internal signals (32 .. SIGRTMIN-1) are reported too.
struct SignalDisposition {
  void* handler;        // SIG_DFL, SIG_IGN or a function
  unsigned long flags;  // SA_*
  void* restorer;
  uint64_t mask;
};
int GetSignalDisposition(int sig, SignalDisposition* out);
// epoll_pwait: `mask` is the signal mask while waiting (the kernel's 8-byte sigset).
int EpollPwait(int epfd, struct epoll_event* events, int max, int timeout_ms,
               const sigset_t* mask);
int EventFd(unsigned int initval, int flags);
int Setns(int fd, int nstype);
int Pipe2(int fds[2], int flags);
pid_t GetPid();
ssize_t Vmsplice(int fd, const struct iovec* iov, unsigned long n, unsigned int flags);
// splice(2) between two fds at their current positions (no offsets).
ssize_t Splice(int fd_in, int fd_out, size_t len, unsigned int flags);
// Splice into a socket without SIGPIPE: the kernel raises it for a peer that
// is gone (splice has no MSG_NOSIGNAL), and this may run on an application
// thread. SIGPIPE is blocked for the call and the one it raised consumed;
// the error is EPIPE as from send(MSG_NOSIGNAL).
ssize_t SpliceToSocketNoSignal(int pipe_fd, int sock, size_t len, unsigned int flags);

// 64 random bits from the kernel (getrandom(2)), fresh in every process: for
// what must differ between a process and its fork children (socket id bases,
// engine generations, ephemeral ports). A user-space generator's state is
// copied by fork, so every child of one parent would draw the same values.
uint64_t RandomU64();

// Moves `fd` to a high number (close-on-exec) and records it as internal.
// Returns the new fd, or `fd` itself if it cannot be moved (still recorded).
int MakeInternal(int fd);
// Closes an internal fd and forgets it.
int CloseInternal(int fd);
// Forgets an internal fd without closing it: for an fd that a library closes
// itself (rdma-core's channels), whose close() would otherwise be refused.
void ForgetInternal(int fd);
// True if `fd` is one of the shim's own fds.
bool IsInternal(int fd);
// Calls fn(fd) for every internal fd, in ascending order.
void ForEachInternal(absl::FunctionRef<void(int fd)> fn);
// An internal fd that a fork child keeps, and keeps internal: a library's own
// fd that its state in the child still needs (rdma-core's device command
// fds, transports/verbs/internal_fds.h). The fork child closes the others.
int MakeInternalKeptInForkChild(int fd);
bool KeptInForkChild(int fd);
// Forgets every internal fd without closing it (and the canary below),
// except those kept in fork children.
void ForgetAllInternal();

// True if the internal fds were closed or replaced behind the shim's back: a
// raw close_range(2) or close(2) system call, which no wrapper sees. The
// first internal fd made is a canary at the lowest internal number (an
// eventfd whose inode is remembered): a range closed from below, as "close
// everything above stdio" does, takes it with the rest. One fstat(2).
bool InternalFdsLost();

}  // namespace rds::sys

#endif  // RDS_ENGINE_SYS_H_
