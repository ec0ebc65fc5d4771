// transports/verbs/verbs_api.cc — see verbs_api.h.
#include "transports/verbs/verbs_api.h"

#include <dlfcn.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/sys.h"

namespace rds::verbs {

namespace {

// Resolves `name` in `lib` into `*fn`; false (and `why` set) if absent.
template <typename Fn>
bool Resolve(void* lib, const char* soname, const char* name, Fn* fn, std::string* why) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    if (why->empty()) absl::StrAppend(why, soname, " has no ", name);
    return false;
  }
  *fn = reinterpret_cast<Fn>(sym);
  return true;
}

void* Open(const std::string& soname, std::string* why) {
  // RTLD_LOCAL: the application's own rdma-core use (if any) keeps its
  // symbols; RTLD_NODELETE: the table outlives any dlclose.
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* err = dlerror();
    *why = absl::StrCat("cannot open ", soname, " (", err ? err : "unknown error",
                        "): install rdma-core's libibverbs1 and librdmacm1");
  }
  return lib;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VerbsApi>> OpenVerbs(const std::string& ibverbs_soname,
                                                    const std::string& rdmacm_soname) {
  std::string why;
  void* ibv = Open(ibverbs_soname, &why);
  if (ibv == nullptr) return absl::NotFoundError(why);
  void* cm = Open(rdmacm_soname, &why);
  if (cm == nullptr) return absl::NotFoundError(why);
  auto api = std::make_unique<VerbsApi>();
  const char* i = ibverbs_soname.c_str();
  const char* c = rdmacm_soname.c_str();
  bool ok = true;
#define RDS_RESOLVE(lib, soname, table, field, symbol) \
  ok &= Resolve(lib, soname, symbol, &api->table.field, &why)
  RDS_RESOLVE(ibv, i, ibv, get_device_list, "ibv_get_device_list");
  RDS_RESOLVE(ibv, i, ibv, free_device_list, "ibv_free_device_list");
  RDS_RESOLVE(ibv, i, ibv, get_device_name, "ibv_get_device_name");
  RDS_RESOLVE(ibv, i, ibv, open_device, "ibv_open_device");
  RDS_RESOLVE(ibv, i, ibv, close_device, "ibv_close_device");
  RDS_RESOLVE(ibv, i, ibv, query_device, "ibv_query_device");
  RDS_RESOLVE(ibv, i, ibv, alloc_pd, "ibv_alloc_pd");
  RDS_RESOLVE(ibv, i, ibv, dealloc_pd, "ibv_dealloc_pd");
  RDS_RESOLVE(ibv, i, ibv, reg_mr, "ibv_reg_mr");
  RDS_RESOLVE(ibv, i, ibv, reg_mr_iova, "ibv_reg_mr_iova");
  RDS_RESOLVE(ibv, i, ibv, dereg_mr, "ibv_dereg_mr");
  RDS_RESOLVE(ibv, i, ibv, create_comp_channel, "ibv_create_comp_channel");
  RDS_RESOLVE(ibv, i, ibv, destroy_comp_channel, "ibv_destroy_comp_channel");
  RDS_RESOLVE(ibv, i, ibv, create_cq, "ibv_create_cq");
  RDS_RESOLVE(ibv, i, ibv, destroy_cq, "ibv_destroy_cq");
  RDS_RESOLVE(ibv, i, ibv, get_cq_event, "ibv_get_cq_event");
  RDS_RESOLVE(ibv, i, ibv, ack_cq_events, "ibv_ack_cq_events");
  RDS_RESOLVE(ibv, i, ibv, wc_status_str, "ibv_wc_status_str");
  RDS_RESOLVE(cm, c, cm, create_event_channel, "rdma_create_event_channel");
  RDS_RESOLVE(cm, c, cm, get_devices, "rdma_get_devices");
  RDS_RESOLVE(cm, c, cm, free_devices, "rdma_free_devices");
  RDS_RESOLVE(cm, c, cm, destroy_event_channel, "rdma_destroy_event_channel");
  RDS_RESOLVE(cm, c, cm, create_id, "rdma_create_id");
  RDS_RESOLVE(cm, c, cm, destroy_id, "rdma_destroy_id");
  RDS_RESOLVE(cm, c, cm, bind_addr, "rdma_bind_addr");
  RDS_RESOLVE(cm, c, cm, resolve_addr, "rdma_resolve_addr");
  RDS_RESOLVE(cm, c, cm, resolve_route, "rdma_resolve_route");
  RDS_RESOLVE(cm, c, cm, create_qp, "rdma_create_qp");
  RDS_RESOLVE(cm, c, cm, destroy_qp, "rdma_destroy_qp");
  RDS_RESOLVE(cm, c, cm, connect, "rdma_connect");
  RDS_RESOLVE(cm, c, cm, listen, "rdma_listen");
  RDS_RESOLVE(cm, c, cm, accept, "rdma_accept");
  RDS_RESOLVE(cm, c, cm, reject, "rdma_reject");
  RDS_RESOLVE(cm, c, cm, disconnect, "rdma_disconnect");
  RDS_RESOLVE(cm, c, cm, get_cm_event, "rdma_get_cm_event");
  RDS_RESOLVE(cm, c, cm, ack_cm_event, "rdma_ack_cm_event");
  RDS_RESOLVE(cm, c, cm, event_str, "rdma_event_str");
  RDS_RESOLVE(cm, c, cm, set_option, "rdma_set_option");
#undef RDS_RESOLVE
  if (!ok) return absl::NotFoundError(why);
  return api;
}

absl::StatusOr<const VerbsApi*> LoadVerbs() {
  static std::once_flag once;
  static absl::StatusOr<std::unique_ptr<VerbsApi>>* loaded;
  std::call_once(once, [] {
    loaded = new absl::StatusOr<std::unique_ptr<VerbsApi>>(
        OpenVerbs("libibverbs.so.1", "librdmacm.so.1"));
  });
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

std::vector<std::string> DeviceNames(const VerbsApi& api) {
  std::vector<std::string> names;
  int n = 0;
  ibv_device** list = api.ibv.get_device_list(&n);
  if (list == nullptr) return names;
  for (int k = 0; k < n; ++k) names.emplace_back(api.ibv.get_device_name(list[k]));
  api.ibv.free_device_list(list);
  return names;
}

namespace {

bool HasRdmaDevice() {
  std::vector<std::string> names;  // (raw getdents: the shim interposes opendir)
  if (!sys::ListDir("/sys/class/infiniband", &names)) return false;
  for (const std::string& n : names) {
    if (!n.empty() && n[0] != '.') return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<const VerbsApi*> UsableVerbs() {
  static const absl::StatusOr<const VerbsApi*>* result = [] {
    absl::StatusOr<const VerbsApi*> r;
    if (!HasRdmaDevice()) {
      r = absl::FailedPreconditionError("no RDMA device on this host (/sys/class/infiniband)");
    } else if (absl::StatusOr<const VerbsApi*> api = LoadVerbs(); !api.ok()) {
      r = absl::FailedPreconditionError(api.status().message());
    } else if (DeviceNames(**api).empty()) {
      r = absl::FailedPreconditionError("rdma-core finds no RDMA device");
    } else {
      r = *api;
    }
    return new absl::StatusOr<const VerbsApi*>(std::move(r));
  }();
  return *result;
}

}  // namespace rds::verbs
