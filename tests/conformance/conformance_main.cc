// main() for every conformance test binary.
//
// 1. Before any RDS call: a private run directory (mkdtemp under /tmp) is exported as
//    RDS_PRELOAD_RUNDIR, so test binaries running in parallel never share the shim's host
//    registry (DESIGN.md §4).
// 2. The shim must really be loaded: every LD_PRELOAD entry must be mapped, and
//    socket(AF_RDS, SOCK_SEQPACKET, 0) must not fail with EAFNOSUPPORT (that is what a kernel
//    without the rds module says, §A.1). Otherwise the binary fails loudly; it never skips.
// 3. A per-test watchdog (alarm) turns a hang into a reported failure of the hung test.
// 4. The run directory is removed afterwards.
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

#ifndef AF_RDS
#define AF_RDS 21
#endif

namespace {

constexpr unsigned kPerTestSeconds = 20;

char g_current_test[512] = "(none)";

void OnAlarm(int) {
  static const char kMsg[] = "\nconformance: WATCHDOG: test did not finish within its time limit: ";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  ignored = write(STDERR_FILENO, g_current_test, strlen(g_current_test));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  _exit(3);
}

class Watchdog : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo& info) override {
    snprintf(g_current_test, sizeof g_current_test, "%s.%s", info.test_suite_name(), info.name());
    alarm(kPerTestSeconds);
  }
  void OnTestEnd(const testing::TestInfo&) override { alarm(0); }
};

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  remove(path);
  return 0;
}

// True if `entry` (a path or a bare file name from LD_PRELOAD) is mapped in this process.
bool IsMapped(const std::string& entry) {
  std::string want;
  if (entry.find('/') != std::string::npos) {
    char real[PATH_MAX];
    if (!realpath(entry.c_str(), real)) return false;
    want = real;
  } else {
    want = "/" + entry;
  }
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return true;  // cannot tell
  char line[PATH_MAX + 256];
  bool found = false;
  while (!found && fgets(line, sizeof line, maps)) {
    line[strcspn(line, "\n")] = '\0';
    const char* path = strchr(line, '/');
    if (!path) continue;
    std::string p(path);
    if (entry.find('/') != std::string::npos) {
      found = p == want;
    } else {
      found = p.size() >= want.size() && p.compare(p.size() - want.size(), want.size(), want) == 0;
    }
  }
  fclose(maps);
  return found;
}

bool CheckPreloadMapped() {
  const char* env = getenv("LD_PRELOAD");
  if (!env || !*env) return true;
  std::string all(env);
  size_t pos = 0;
  bool ok = true;
  while (pos <= all.size()) {
    size_t end = all.find_first_of(" :", pos);
    if (end == std::string::npos) end = all.size();
    std::string tok = all.substr(pos, end - pos);
    if (!tok.empty() && !IsMapped(tok)) {
      fprintf(stderr, "conformance: FATAL: LD_PRELOAD entry '%s' is not loaded in this process\n",
              tok.c_str());
      ok = false;
    }
    pos = end + 1;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  char dir[] = "/tmp/rds-conformance-XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "conformance: mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  setenv("RDS_PRELOAD_RUNDIR", dir, 1);

  testing::InitGoogleTest(&argc, argv);

  int rc = 1;
  // Listing the tests needs no shim.
  bool listing = testing::GTEST_FLAG(list_tests);
  bool loaded = listing || CheckPreloadMapped();
  if (loaded && !listing) {
    int probe = socket(AF_RDS, SOCK_SEQPACKET, 0);
    if (probe < 0) {
      int e = errno;
      if (e == EAFNOSUPPORT) {
        fprintf(stderr,
                "conformance: FATAL: socket(AF_RDS, SOCK_SEQPACKET, 0) failed with EAFNOSUPPORT:\n"
                "  the RDS shim is not active. Run with LD_PRELOAD=.../librds_preload.so\n"
                "  (e.g. 'meson test --suite conformance'); LD_PRELOAD is '%s'.\n",
                getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
      } else {
        fprintf(stderr, "conformance: FATAL: socket(AF_RDS, SOCK_SEQPACKET, 0) failed: %s (%d)\n",
                strerror(e), e);
      }
      loaded = false;
    } else {
      close(probe);
    }
  }

  if (loaded) {
    struct sigaction sa {};
    sa.sa_handler = OnAlarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, nullptr);
    testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
    rc = RUN_ALL_TESTS();
  }

  nftw(dir, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}
