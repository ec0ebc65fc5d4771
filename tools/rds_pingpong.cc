// rds-pingpong — the main-job demo: two processes exchange RDS messages
// through the preloaded shim.
//
//   rds-pingpong --preload build/preload/librds_preload.so [--count N]
//
// Starts itself twice under LD_PRELOAD: an echo server bound to
// 127.0.0.1:<port> and a client that sends N messages of mixed sizes
// (0 B … 64 KiB), checks every echo byte for byte, and prints a summary
// with round-trip latency. Exits non-zero on any mismatch.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tools/tool_flags.h"

#ifndef AF_RDS
#define AF_RDS 21
#endif

namespace {

constexpr char kSynopsis[] = "usage: rds-pingpong --preload LIB [--count N] [--port P]";

int Usage() {
  fprintf(stderr, "%s\n", kSynopsis);
  return 2;
}

// What --help prints (rds::tools::HelpOrVersion).
rds::tools::ToolHelp Help() {
  return {
      "rds-pingpong",
      kSynopsis,
      "The main-job demo: an echo server and a client process exchange N messages of mixed\n"
      "sizes (0 B ... 64 KiB) through the preloaded shim; every echo is checked byte for byte.\n"
      "Prints the round-trip latency and PASS, or FAIL and exit status 1.",
      {
          {"--preload LIB", "the rds-preload library (required)"},
          {"--count N", "messages to exchange (default 5000)"},
          {"--port P", "the server's port on 127.0.0.1 (default: 20000 + pid % 20000)"},
          {"--role server|client", "internal: run as that process (rds-pingpong starts both)"},
      },
      "",
  };
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return sin;
}

int MakeSocket(uint16_t port) {
  int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
  if (fd < 0) {
    perror("socket(AF_RDS) — is the shim preloaded?");
    exit(1);
  }
  int buf = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  sockaddr_in sin = Loopback(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    perror("bind");
    exit(1);
  }
  return fd;
}

int Server(uint16_t port, int count) {
  int fd = MakeSocket(port);
  std::vector<char> buf(1 << 20);
  for (int i = 0; i < count; ++i) {
    sockaddr_in from;
    socklen_t len = sizeof(from);
    ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) {
      perror("server recvfrom");
      return 1;
    }
    if (sendto(fd, buf.data(), n, 0, reinterpret_cast<sockaddr*>(&from), len) != n) {
      perror("server sendto");
      return 1;
    }
  }
  close(fd);
  return 0;
}

int Client(uint16_t server_port, int count) {
  int fd = MakeSocket(0);
  sockaddr_in server = Loopback(server_port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) != 0) {
    perror("connect");
    return 1;
  }
  std::mt19937 rng(42);
  std::vector<char> out(64 * 1024), in(64 * 1024 + 1);
  std::vector<double> rtts;
  size_t bytes = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    size_t size = (i % 10 == 0) ? 0 : (i % 10 == 9) ? out.size() : rng() % 2048;
    for (size_t j = 0; j < size; ++j) out[j] = static_cast<char>(rng());
    auto t0 = std::chrono::steady_clock::now();
    if (send(fd, out.data(), size, 0) != static_cast<ssize_t>(size)) {
      perror("client send");
      return 1;
    }
    ssize_t n = recv(fd, in.data(), in.size(), 0);
    auto t1 = std::chrono::steady_clock::now();
    if (n != static_cast<ssize_t>(size) || memcmp(in.data(), out.data(), size) != 0) {
      fprintf(stderr, "message %d: echo mismatch (sent %zu bytes, got %zd)\n", i, size, n);
      return 1;
    }
    bytes += size;
    rtts.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::sort(rtts.begin(), rtts.end());
  printf("rds-pingpong: %d messages echoed intact (%zu payload bytes each way) in %.2f s\n", count,
         bytes, secs);
  printf("rds-pingpong: round trip p50 %.1f us, p99 %.1f us, max %.1f us\n",
         rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100], rtts.back());
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preload, role;
  int count = 5000;
  int port = 0;
  const rds::tools::ToolHelp help = Help();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (rds::tools::HelpOrVersion(a, help)) return 0;
    if (a == "--preload" && i + 1 < argc) preload = argv[++i];
    else if (a == "--count" && i + 1 < argc) count = atoi(argv[++i]);
    else if (a == "--port" && i + 1 < argc) port = atoi(argv[++i]);
    else if (a == "--role" && i + 1 < argc) role = argv[++i];
    else return Usage();
  }
  if (role == "server") return Server(static_cast<uint16_t>(port), count);
  if (role == "client") return Client(static_cast<uint16_t>(port), count);
  if (preload.empty() || count <= 0) return Usage();

  char resolved[4096];
  if (realpath(preload.c_str(), resolved) == nullptr) {
    perror(preload.c_str());
    return 1;
  }
  if (port == 0) port = 20000 + getpid() % 20000;
  std::string rundir = "/tmp/rds-pingpong." + std::to_string(getpid());
  setenv("LD_PRELOAD", resolved, 1);
  setenv("RDS_PRELOAD_RUNDIR", rundir.c_str(), 1);
  printf("rds-pingpong: server and client processes on 127.0.0.1:%d through %s\n", port, resolved);
  fflush(stdout);
  auto spawn = [&](const char* r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string c = std::to_string(count), p = std::to_string(port);
      execl("/proc/self/exe", argv[0], "--role", r, "--count", c.c_str(), "--port", p.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  pid_t server = spawn("server");
  usleep(200 * 1000);  // let the server bind
  pid_t client = spawn("client");
  int status = 0;
  waitpid(client, &status, 0);
  int client_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!client_ok) kill(server, SIGKILL);
  waitpid(server, &status, 0);
  int server_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string cleanup = "rm -rf " + rundir;
  if (system(cleanup.c_str()) != 0) perror("cleanup");
  printf("rds-pingpong: %s\n", client_ok && server_ok ? "PASS" : "FAIL");
  return client_ok && server_ok ? 0 : 1;
}
