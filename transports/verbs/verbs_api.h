// transports/verbs/verbs_api.h — libibverbs and librdmacm, opened with dlopen
// at first use, so that the shim loads and works over TCP on a host without
// rdma-core. Only the calls the verbs transport makes are resolved; the
// data-path calls that rdma-core defines inline (ibv_post_send, ibv_post_recv,
// ibv_poll_cq, ibv_req_notify_cq) go through the device context's ops and
// need no symbol. The headers come from the -dev packages at build time; no
// library is linked.
//
// Thread-safety: LoadVerbs and UsableVerbs are safe from any thread; the table is immutable.
#ifndef RDS_TRANSPORTS_VERBS_VERBS_API_H_
#define RDS_TRANSPORTS_VERBS_VERBS_API_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rds::verbs {

// The resolved functions, named without their library prefix (ibv_reg_mr is
// a macro in rdma-core's header: the member is the real exported function).
struct VerbsApi {
  struct Ibv {
    decltype(&::ibv_get_device_list) get_device_list;
    decltype(&::ibv_free_device_list) free_device_list;
    decltype(&::ibv_get_device_name) get_device_name;
    decltype(&::ibv_open_device) open_device;
    decltype(&::ibv_close_device) close_device;
    decltype(&::ibv_query_device) query_device;
    decltype(&::ibv_alloc_pd) alloc_pd;
    decltype(&::ibv_dealloc_pd) dealloc_pd;
    decltype(&::ibv_reg_mr) reg_mr;
    decltype(&::ibv_reg_mr_iova) reg_mr_iova;
    decltype(&::ibv_dereg_mr) dereg_mr;
    decltype(&::ibv_create_comp_channel) create_comp_channel;
    decltype(&::ibv_destroy_comp_channel) destroy_comp_channel;
    decltype(&::ibv_create_cq) create_cq;
    decltype(&::ibv_destroy_cq) destroy_cq;
    decltype(&::ibv_get_cq_event) get_cq_event;
    decltype(&::ibv_ack_cq_events) ack_cq_events;
    decltype(&::ibv_wc_status_str) wc_status_str;
  } ibv{};
  struct Cm {
    decltype(&::rdma_create_event_channel) create_event_channel;
    decltype(&::rdma_destroy_event_channel) destroy_event_channel;
    decltype(&::rdma_create_id) create_id;
    decltype(&::rdma_destroy_id) destroy_id;
    decltype(&::rdma_bind_addr) bind_addr;
    decltype(&::rdma_resolve_addr) resolve_addr;
    decltype(&::rdma_resolve_route) resolve_route;
    decltype(&::rdma_create_qp) create_qp;
    decltype(&::rdma_destroy_qp) destroy_qp;
    decltype(&::rdma_connect) connect;
    decltype(&::rdma_listen) listen;
    decltype(&::rdma_accept) accept;
    decltype(&::rdma_reject) reject;
    decltype(&::rdma_disconnect) disconnect;
    decltype(&::rdma_get_cm_event) get_cm_event;
    decltype(&::rdma_ack_cm_event) ack_cm_event;
    decltype(&::rdma_event_str) event_str;
    decltype(&::rdma_set_option) set_option;
    decltype(&::rdma_get_devices) get_devices;
    decltype(&::rdma_free_devices) free_devices;
  } cm{};
};

// The libraries of this host (libibverbs.so.1, librdmacm.so.1), opened once
// and kept; an error says why verbs cannot be used here (a library or one of
// its functions missing), in words fit for a log line.
absl::StatusOr<const VerbsApi*> LoadVerbs();

// Opens the named libraries into a new table (LoadVerbs uses the real
// names; tests name others).
absl::StatusOr<std::unique_ptr<VerbsApi>> OpenVerbs(const std::string& ibverbs_soname,
                                                    const std::string& rdmacm_soname);

// The names of the RDMA devices the verbs library finds (empty: none on this
// host, e.g. no soft-RoCE link added).
std::vector<std::string> DeviceNames(const VerbsApi& api);

// The verbs of this host if RDMA can be used here, or why not (no device
// under /sys/class/infiniband, a library or function missing, rdma-core
// finding no device), in words fit for a log line. Decided once per process;
// the callers (RDS over verbs, SDP) log the answer with their own subject.
absl::StatusOr<const VerbsApi*> UsableVerbs();

}  // namespace rds::verbs

#endif  // RDS_TRANSPORTS_VERBS_VERBS_API_H_
