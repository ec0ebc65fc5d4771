// preload/module_paths.cc — paths that exist only where the RDS kernel module
// is loaded, as programs use them to identify "the RDS module of this host".
//
// rds-stress 2.3.11 keys a System V semaphore shared by the rds-stress
// processes of a host with ftok("/sys/module/rds", 'S') (its burst modes), and
// exits at start when that fails (ENOENT without the module). Under the shim,
// ftok of a path under /sys/module/rds that does not exist is computed on a
// stand-in directory of the host registry, <rundir>/sys/module/<same path>,
// so every shim process of the host (same RDS_PRELOAD_RUNDIR) gets the same
// key, as every process of a host with the module does. Where the real path
// exists (the module is loaded), it is used. No other path is touched.
// glibc's ftok stats the path internally, so ftok itself is interposed.
#include <sys/ipc.h>
#include <sys/stat.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/registry.h"
#include "preload/real.h"

namespace {

constexpr char kModuleDir[] = "/sys/module/";

// "/sys/module/rds", "/sys/module/rds_tcp/…", "/sys/module/rds_rdma": the RDS
// modules' sysfs directories (and anything below them).
bool IsRdsModulePath(const char* path) {
  if (path == nullptr || std::strncmp(path, kModuleDir, sizeof(kModuleDir) - 1) != 0) return false;
  const absl::string_view rest(path + sizeof(kModuleDir) - 1);
  const absl::string_view name = rest.substr(0, rest.find('/'));
  return name == "rds" || name == "rds_tcp" || name == "rds_rdma";
}

}  // namespace

extern "C" key_t ftok(const char* path, int proj_id) {
  struct stat st;
  if (!IsRdsModulePath(path) || stat(path, &st) == 0) return rds::real::ftok(path, proj_id);
  const std::string stand_in = absl::StrCat(rds::HostRegistry::Get().rundir(), path);
  if (!rds::HostRegistry::EnsureDir(stand_in).ok()) return rds::real::ftok(path, proj_id);
  return rds::real::ftok(stand_in.c_str(), proj_id);
}
