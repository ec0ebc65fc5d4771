// preload/real.h — libc's own definitions of the functions we interpose.
//
// A wrapper that finds its fd is not an RDS socket calls straight through to
// libc with these (resolved once with dlsym(RTLD_NEXT)), so programs keep
// libc's exact behaviour — cancellation points, fortify checks, errno — on
// every other fd.
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_PRELOAD_REAL_H_
#define RDS_PRELOAD_REAL_H_

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/ipc.h>
#include <sys/stat.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace rds::real {

int socket(int domain, int type, int protocol);
int socketpair(int domain, int type, int protocol, int sv[2]);
int bind(int fd, const sockaddr* addr, socklen_t len);
int connect(int fd, const sockaddr* addr, socklen_t len);
int listen(int fd, int backlog);
int accept(int fd, sockaddr* addr, socklen_t* len);
int accept4(int fd, sockaddr* addr, socklen_t* len, int flags);
int shutdown(int fd, int how);
int getsockname(int fd, sockaddr* addr, socklen_t* len);
int getpeername(int fd, sockaddr* addr, socklen_t* len);
int setsockopt(int fd, int level, int name, const void* val, socklen_t len);
int getsockopt(int fd, int level, int name, void* val, socklen_t* len);
ssize_t send(int fd, const void* buf, size_t n, int flags);
ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* to, socklen_t len);
ssize_t sendmsg(int fd, const msghdr* msg, int flags);
int sendmmsg(int fd, mmsghdr* vec, unsigned int n, int flags);
ssize_t recv(int fd, void* buf, size_t n, int flags);
ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* from, socklen_t* len);
ssize_t recvmsg(int fd, msghdr* msg, int flags);
int recvmmsg(int fd, mmsghdr* vec, unsigned int n, int flags, struct timespec* timeout);
ssize_t read(int fd, void* buf, size_t n);
ssize_t readv(int fd, const iovec* iov, int n);
ssize_t write(int fd, const void* buf, size_t n);
ssize_t writev(int fd, const iovec* iov, int n);
ssize_t recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags);
ssize_t recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* from,
                     socklen_t* len);
ssize_t read_chk(int fd, void* buf, size_t n, size_t buflen);
int poll(pollfd* fds, nfds_t n, int timeout);
int ppoll(pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask);
int select(int n, fd_set* r, fd_set* w, fd_set* e, struct timeval* timeout);
int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout,
            const sigset_t* mask);
int epoll_ctl(int epfd, int op, int fd, epoll_event* ev);
int epoll_wait(int epfd, epoll_event* events, int max, int timeout);
int epoll_pwait(int epfd, epoll_event* events, int max, int timeout, const sigset_t* mask);
int epoll_pwait2(int epfd, epoll_event* events, int max, const struct timespec* timeout,
                 const sigset_t* mask);
int fcntl(int fd, int cmd, long arg);
int ioctl(int fd, unsigned long request, void* arg);
int dup(int fd);
int dup2(int oldfd, int newfd);
int dup3(int oldfd, int newfd, int flags);
int close(int fd);
int close_range(unsigned int first, unsigned int last, int flags);
int execve(const char* path, char* const argv[], char* const envp[]);
int execv(const char* path, char* const argv[]);
int execvp(const char* file, char* const argv[]);
int execvpe(const char* file, char* const argv[], char* const envp[]);
int fexecve(int fd, char* const argv[], char* const envp[]);
int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags);
[[noreturn]] void _exit(int status);
key_t ftok(const char* path, int proj_id);
// Path calls (preload/module_paths.cc). `mode` is passed whether or not the
// flags need one, as the variadic libc calls read it only then.
int open(const char* path, int flags, mode_t mode);
int open64(const char* path, int flags, mode_t mode);
int openat(int dirfd, const char* path, int flags, mode_t mode);
int openat64(int dirfd, const char* path, int flags, mode_t mode);
int open_2(const char* path, int flags);
int open64_2(const char* path, int flags);
int openat_2(int dirfd, const char* path, int flags);
int openat64_2(int dirfd, const char* path, int flags);
FILE* fopen(const char* path, const char* mode);
FILE* fopen64(const char* path, const char* mode);
int stat(const char* path, struct stat* st);
int stat64(const char* path, struct stat64* st);
int lstat(const char* path, struct stat* st);
int lstat64(const char* path, struct stat64* st);
int fstatat(int dirfd, const char* path, struct stat* st, int flags);
int fstatat64(int dirfd, const char* path, struct stat64* st, int flags);
int xstat(int ver, const char* path, struct stat* st);
int xstat64(int ver, const char* path, struct stat64* st);
int lxstat(int ver, const char* path, struct stat* st);
int lxstat64(int ver, const char* path, struct stat64* st);
int fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags);
int fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags);
int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* st);
int access(const char* path, int how);
int faccessat(int dirfd, const char* path, int how, int flags);
DIR* opendir(const char* path);
int sigaction(int sig, const struct sigaction* act, struct sigaction* old);
sighandler_t signal(int sig, sighandler_t handler);
sighandler_t sysv_signal(int sig, sighandler_t handler);
sighandler_t sigset(int sig, sighandler_t handler);
int siginterrupt(int sig, int flag);

}  // namespace rds::real

#endif  // RDS_PRELOAD_REAL_H_
