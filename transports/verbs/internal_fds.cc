// transports/verbs/internal_fds.cc — see internal_fds.h.
#include "transports/verbs/internal_fds.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/sys.h"

namespace rds::verbs {

namespace {

// Moves *fd high as an internal fd and makes it non-blocking.
bool Adopt(int* fd) {
  *fd = sys::MakeInternal(*fd);
  const int flags = sys::Fcntl(*fd, F_GETFL, 0);
  return flags >= 0 && sys::Fcntl(*fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// The command and async-event fds of librdmacm's device contexts, once.
void AdoptDeviceFds(const VerbsApi& api) {
  static std::once_flag once;
  std::call_once(once, [&api] {
    int n = 0;
    ibv_context** devices = api.cm.get_devices(&n);
    if (devices == nullptr) return;
    for (int k = 0; k < n; ++k) {
      for (int* fd : {&devices[k]->cmd_fd, &devices[k]->async_fd}) {
        // Kept in fork children: rdma-core there uses the same contexts.
        if (*fd >= 0 && !sys::IsInternal(*fd)) *fd = sys::MakeInternalKeptInForkChild(*fd);
      }
    }
    api.cm.free_devices(devices);
  });
}

}  // namespace

absl::StatusOr<ibv_comp_channel*> CreateCompChannel(const VerbsApi& api, ibv_context* device) {
  ibv_comp_channel* channel = api.ibv.create_comp_channel(device);
  if (channel == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("ibv_create_comp_channel: ", strerror(errno)));
  }
  if (!Adopt(&channel->fd)) {
    const int err = errno;
    DestroyCompChannel(api, channel);
    return absl::InternalError(
        absl::StrCat("cannot make a completion channel non-blocking: ", strerror(err)));
  }
  return channel;
}

void DestroyCompChannel(const VerbsApi& api, ibv_comp_channel* channel) {
  if (channel == nullptr) return;
  sys::ForgetInternal(channel->fd);
  api.ibv.destroy_comp_channel(channel);
}

absl::StatusOr<rdma_event_channel*> CreateEventChannel(const VerbsApi& api) {
  rdma_event_channel* channel = api.cm.create_event_channel();
  if (channel == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rdma_create_event_channel: ", strerror(errno)));
  }
  if (!Adopt(&channel->fd)) {
    const int err = errno;
    DestroyEventChannel(api, channel);
    return absl::InternalError(
        absl::StrCat("cannot make the RDMA CM channel non-blocking: ", strerror(err)));
  }
  AdoptDeviceFds(api);
  return channel;
}

void DestroyEventChannel(const VerbsApi& api, rdma_event_channel* channel) {
  if (channel == nullptr) return;
  sys::ForgetInternal(channel->fd);
  api.cm.destroy_event_channel(channel);
}

}  // namespace rds::verbs
