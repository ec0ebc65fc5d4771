// preload/real.cc — dlsym(RTLD_NEXT) resolution of libc's definitions.
#include "preload/real.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <type_traits>

namespace rds::real {
namespace {

// Resolves `name` once. If libc does not have it (older glibc), the
// function-local fallback is used instead.
template <typename F>
F* Next(const char* name, F* fallback = nullptr) {
  void* p = dlsym(RTLD_NEXT, name);
  return p ? reinterpret_cast<F*>(p) : fallback;
}

// What a call whose libc entry point is missing returns: -1, or a null pointer.
template <typename R>
R NoEntryPoint() {
  if constexpr (std::is_pointer_v<R>) {
    return nullptr;
  } else {
    return -1;
  }
}

int RawCloseRange(unsigned int first, unsigned int last, int flags) {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

int RawEpollPwait2(int ep, epoll_event* ev, int max, const struct timespec* t, const sigset_t* m) {
  return static_cast<int>(syscall(SYS_epoll_pwait2, ep, ev, max, t, m, size_t{8}));
}

int RawExecveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  return static_cast<int>(syscall(SYS_execveat, dirfd, path, argv, envp, flags));
}

[[noreturn]] void RawExit(int status) {
  for (;;) syscall(SYS_exit_group, status);
}

}  // namespace

#define RDS_REAL(name, ...) static auto* fn = Next<decltype(::name)>(#name); return fn(__VA_ARGS__)

int socket(int d, int t, int p) { RDS_REAL(socket, d, t, p); }
int socketpair(int d, int t, int p, int sv[2]) { RDS_REAL(socketpair, d, t, p, sv); }
int bind(int fd, const sockaddr* a, socklen_t l) { RDS_REAL(bind, fd, a, l); }
int connect(int fd, const sockaddr* a, socklen_t l) { RDS_REAL(connect, fd, a, l); }
int listen(int fd, int b) { RDS_REAL(listen, fd, b); }
int accept(int fd, sockaddr* a, socklen_t* l) { RDS_REAL(accept, fd, a, l); }
int accept4(int fd, sockaddr* a, socklen_t* l, int f) { RDS_REAL(accept4, fd, a, l, f); }
int shutdown(int fd, int how) { RDS_REAL(shutdown, fd, how); }
int getsockname(int fd, sockaddr* a, socklen_t* l) { RDS_REAL(getsockname, fd, a, l); }
int getpeername(int fd, sockaddr* a, socklen_t* l) { RDS_REAL(getpeername, fd, a, l); }
int setsockopt(int fd, int lv, int n, const void* v, socklen_t l) {
  RDS_REAL(setsockopt, fd, lv, n, v, l);
}
int getsockopt(int fd, int lv, int n, void* v, socklen_t* l) { RDS_REAL(getsockopt, fd, lv, n, v, l); }
ssize_t send(int fd, const void* b, size_t n, int f) { RDS_REAL(send, fd, b, n, f); }
ssize_t sendto(int fd, const void* b, size_t n, int f, const sockaddr* a, socklen_t l) {
  RDS_REAL(sendto, fd, b, n, f, a, l);
}
ssize_t sendmsg(int fd, const msghdr* m, int f) { RDS_REAL(sendmsg, fd, m, f); }
int sendmmsg(int fd, mmsghdr* v, unsigned int n, int f) { RDS_REAL(sendmmsg, fd, v, n, f); }
ssize_t recv(int fd, void* b, size_t n, int f) { RDS_REAL(recv, fd, b, n, f); }
ssize_t recvfrom(int fd, void* b, size_t n, int f, sockaddr* a, socklen_t* l) {
  RDS_REAL(recvfrom, fd, b, n, f, a, l);
}
ssize_t recvmsg(int fd, msghdr* m, int f) { RDS_REAL(recvmsg, fd, m, f); }
int recvmmsg(int fd, mmsghdr* v, unsigned int n, int f, struct timespec* t) {
  using Fn = int(int, mmsghdr*, unsigned int, int, struct timespec*);
  static auto* fn = Next<Fn>("recvmmsg");
  return fn(fd, v, n, f, t);
}
ssize_t read(int fd, void* b, size_t n) { RDS_REAL(read, fd, b, n); }
ssize_t readv(int fd, const iovec* v, int n) { RDS_REAL(readv, fd, v, n); }
ssize_t write(int fd, const void* b, size_t n) { RDS_REAL(write, fd, b, n); }
ssize_t writev(int fd, const iovec* v, int n) { RDS_REAL(writev, fd, v, n); }
ssize_t recv_chk(int fd, void* b, size_t n, size_t bl, int f) {
  using Fn = ssize_t(int, void*, size_t, size_t, int);
  static auto* fn = Next<Fn>("__recv_chk");
  return fn(fd, b, n, bl, f);
}
ssize_t recvfrom_chk(int fd, void* b, size_t n, size_t bl, int f, sockaddr* a, socklen_t* l) {
  using Fn = ssize_t(int, void*, size_t, size_t, int, sockaddr*, socklen_t*);
  static auto* fn = Next<Fn>("__recvfrom_chk");
  return fn(fd, b, n, bl, f, a, l);
}
ssize_t read_chk(int fd, void* b, size_t n, size_t bl) {
  using Fn = ssize_t(int, void*, size_t, size_t);
  static auto* fn = Next<Fn>("__read_chk");
  return fn(fd, b, n, bl);
}
int poll(pollfd* f, nfds_t n, int t) { RDS_REAL(poll, f, n, t); }
int ppoll(pollfd* f, nfds_t n, const struct timespec* t, const sigset_t* m) {
  RDS_REAL(ppoll, f, n, t, m);
}
int select(int n, fd_set* r, fd_set* w, fd_set* e, struct timeval* t) {
  RDS_REAL(select, n, r, w, e, t);
}
int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const struct timespec* t, const sigset_t* m) {
  RDS_REAL(pselect, n, r, w, e, t, m);
}
int epoll_ctl(int ep, int op, int fd, epoll_event* ev) { RDS_REAL(epoll_ctl, ep, op, fd, ev); }
int epoll_wait(int ep, epoll_event* ev, int max, int t) { RDS_REAL(epoll_wait, ep, ev, max, t); }
int epoll_pwait(int ep, epoll_event* ev, int max, int t, const sigset_t* m) {
  RDS_REAL(epoll_pwait, ep, ev, max, t, m);
}
int epoll_pwait2(int ep, epoll_event* ev, int max, const struct timespec* t, const sigset_t* m) {
  // glibc before 2.35 lacks the wrapper: the system call itself.
  static auto* fn = Next<decltype(::epoll_pwait2)>("epoll_pwait2", &RawEpollPwait2);
  return fn(ep, ev, max, t, m);
}
int fcntl(int fd, int cmd, long arg) {
  using Fn = int(int, int, ...);
  static auto* fn = Next<Fn>("fcntl64") ? Next<Fn>("fcntl64") : Next<Fn>("fcntl");
  return fn(fd, cmd, arg);
}
int ioctl(int fd, unsigned long r, void* a) {
  using Fn = int(int, unsigned long, ...);
  static auto* fn = Next<Fn>("ioctl");
  return fn(fd, r, a);
}
int dup(int fd) { RDS_REAL(dup, fd); }
int dup2(int o, int n) { RDS_REAL(dup2, o, n); }
int dup3(int o, int n, int f) { RDS_REAL(dup3, o, n, f); }
int sigaction(int sig, const struct sigaction* a, struct sigaction* o) {
  RDS_REAL(sigaction, sig, a, o);
}
sighandler_t signal(int sig, sighandler_t h) { RDS_REAL(signal, sig, h); }
sighandler_t sysv_signal(int sig, sighandler_t h) { RDS_REAL(sysv_signal, sig, h); }
sighandler_t sigset(int sig, sighandler_t h) { RDS_REAL(sigset, sig, h); }
int siginterrupt(int sig, int flag) { RDS_REAL(siginterrupt, sig, flag); }
int close(int fd) { RDS_REAL(close, fd); }
int close_range(unsigned int first, unsigned int last, int flags) {
  using Fn = int(unsigned int, unsigned int, int);
  static auto* fn = Next<Fn>("close_range", &RawCloseRange);
  return fn(first, last, flags);
}

int execve(const char* p, char* const a[], char* const e[]) { RDS_REAL(execve, p, a, e); }
int execv(const char* p, char* const a[]) { RDS_REAL(execv, p, a); }
int execvp(const char* f, char* const a[]) { RDS_REAL(execvp, f, a); }
int execvpe(const char* f, char* const a[], char* const e[]) { RDS_REAL(execvpe, f, a, e); }
int fexecve(int fd, char* const a[], char* const e[]) { RDS_REAL(fexecve, fd, a, e); }
int execveat(int dirfd, const char* p, char* const a[], char* const e[], int flags) {
  using Fn = int(int, const char*, char* const[], char* const[], int);
  static auto* fn = Next<Fn>("execveat", &RawExecveat);
  return fn(dirfd, p, a, e, flags);
}
key_t ftok(const char* path, int proj_id) { RDS_REAL(ftok, path, proj_id); }

// By name, with explicit types: several are macros or absent in the headers.
// A libc without the entry point (statx before 2.28) fails the call with ENOSYS.
#define RDS_REAL_AS(type, name, ...)                       \
  using Fn = type;                                          \
  static auto* fn = Next<Fn>(name);                         \
  if (fn == nullptr) {                                      \
    errno = ENOSYS;                                         \
    return NoEntryPoint<decltype(fn(__VA_ARGS__))>();       \
  }                                                         \
  return fn(__VA_ARGS__)
int open(const char* p, int f, mode_t m) { RDS_REAL_AS(int(const char*, int, ...), "open", p, f, m); }
int open64(const char* p, int f, mode_t m) {
  RDS_REAL_AS(int(const char*, int, ...), "open64", p, f, m);
}
int openat(int d, const char* p, int f, mode_t m) {
  RDS_REAL_AS(int(int, const char*, int, ...), "openat", d, p, f, m);
}
int openat64(int d, const char* p, int f, mode_t m) {
  RDS_REAL_AS(int(int, const char*, int, ...), "openat64", d, p, f, m);
}
int open_2(const char* p, int f) { RDS_REAL_AS(int(const char*, int), "__open_2", p, f); }
int open64_2(const char* p, int f) { RDS_REAL_AS(int(const char*, int), "__open64_2", p, f); }
int openat_2(int d, const char* p, int f) {
  RDS_REAL_AS(int(int, const char*, int), "__openat_2", d, p, f);
}
int openat64_2(int d, const char* p, int f) {
  RDS_REAL_AS(int(int, const char*, int), "__openat64_2", d, p, f);
}
FILE* fopen(const char* p, const char* m) { RDS_REAL_AS(FILE*(const char*, const char*), "fopen", p, m); }
FILE* fopen64(const char* p, const char* m) {
  RDS_REAL_AS(FILE*(const char*, const char*), "fopen64", p, m);
}
int stat(const char* p, struct stat* s) { RDS_REAL_AS(int(const char*, struct stat*), "stat", p, s); }
int stat64(const char* p, struct stat64* s) {
  RDS_REAL_AS(int(const char*, struct stat64*), "stat64", p, s);
}
int lstat(const char* p, struct stat* s) { RDS_REAL_AS(int(const char*, struct stat*), "lstat", p, s); }
int lstat64(const char* p, struct stat64* s) {
  RDS_REAL_AS(int(const char*, struct stat64*), "lstat64", p, s);
}
int fstatat(int d, const char* p, struct stat* s, int f) {
  RDS_REAL_AS(int(int, const char*, struct stat*, int), "fstatat", d, p, s, f);
}
int fstatat64(int d, const char* p, struct stat64* s, int f) {
  RDS_REAL_AS(int(int, const char*, struct stat64*, int), "fstatat64", d, p, s, f);
}
int xstat(int v, const char* p, struct stat* s) {
  RDS_REAL_AS(int(int, const char*, struct stat*), "__xstat", v, p, s);
}
int xstat64(int v, const char* p, struct stat64* s) {
  RDS_REAL_AS(int(int, const char*, struct stat64*), "__xstat64", v, p, s);
}
int lxstat(int v, const char* p, struct stat* s) {
  RDS_REAL_AS(int(int, const char*, struct stat*), "__lxstat", v, p, s);
}
int lxstat64(int v, const char* p, struct stat64* s) {
  RDS_REAL_AS(int(int, const char*, struct stat64*), "__lxstat64", v, p, s);
}
int fxstatat(int v, int d, const char* p, struct stat* s, int f) {
  RDS_REAL_AS(int(int, int, const char*, struct stat*, int), "__fxstatat", v, d, p, s, f);
}
int fxstatat64(int v, int d, const char* p, struct stat64* s, int f) {
  RDS_REAL_AS(int(int, int, const char*, struct stat64*, int), "__fxstatat64", v, d, p, s, f);
}
int statx(int d, const char* p, int f, unsigned int m, struct statx* s) {
  RDS_REAL_AS(int(int, const char*, int, unsigned int, struct statx*), "statx", d, p, f, m, s);
}
int access(const char* p, int h) { RDS_REAL_AS(int(const char*, int), "access", p, h); }
int faccessat(int d, const char* p, int h, int f) {
  RDS_REAL_AS(int(int, const char*, int, int), "faccessat", d, p, h, f);
}
DIR* opendir(const char* p) { RDS_REAL_AS(DIR*(const char*), "opendir", p); }
#undef RDS_REAL_AS
void _exit(int status) {
  using Fn = void(int);
  static auto* fn = Next<Fn>("_exit", &RawExit);
  fn(status);
  RawExit(status);  // libc's _exit does not return either
}

#undef RDS_REAL

}  // namespace rds::real
