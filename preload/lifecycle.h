// preload/lifecycle.h — process events the shim must follow: library load
// (inherited RDS fds), fork, and the locks that must not be inherited held.
//
// Thread-safety: EnsureForkHandlers is safe for concurrent use.
#ifndef RDS_PRELOAD_LIFECYCLE_H_
#define RDS_PRELOAD_LIFECYCLE_H_

namespace rds::preload {

// The shim's version, as `meson.project_version()`.
inline constexpr char kVersion[] = RDS_PRELOAD_VERSION;

// Once, on the first RDS socket of the process: registers the fork handlers,
// installs crash handlers if asked (RDS_PRELOAD_BACKTRACE), prints the
// banner of non-default settings if asked (RDS_PRELOAD_SHOW_CONFIG).
void OnFirstRdsSocket();

}  // namespace rds::preload

#endif  // RDS_PRELOAD_LIFECYCLE_H_
