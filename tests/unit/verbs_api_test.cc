// transports/verbs/verbs_api.h: rdma-core opened at run time.
#include "transports/verbs/verbs_api.h"

#include "gtest/gtest.h"

namespace rds::verbs {
namespace {

TEST(VerbsApi, ResolvesEveryFunctionFromThisHostsRdmaCore) {
  // The build host has rdma-core (the -dev packages pull in the libraries).
  absl::StatusOr<const VerbsApi*> api = LoadVerbs();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_NE((*api)->ibv.reg_mr, nullptr);
  EXPECT_NE((*api)->cm.set_option, nullptr);
  // Loaded once: the same table every time.
  EXPECT_EQ(*LoadVerbs(), *api);
  // Whatever devices there are (none without RDMA hardware or a soft-RoCE
  // link), listing them works and names each.
  for (const std::string& name : DeviceNames(**api)) EXPECT_FALSE(name.empty());
}

TEST(VerbsApi, AMissingLibrarySaysWhichAndWhatToInstall) {
  absl::StatusOr<std::unique_ptr<VerbsApi>> api =
      OpenVerbs("libibverbs-absent.so.9", "librdmacm.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_TRUE(absl::IsNotFound(api.status()));
  EXPECT_NE(api.status().message().find("libibverbs-absent.so.9"), std::string::npos);
  EXPECT_NE(api.status().message().find("install"), std::string::npos);
}

TEST(VerbsApi, ALibraryWithoutTheFunctionsIsRefusedByName) {
  // libc is a library, but not rdma-core.
  absl::StatusOr<std::unique_ptr<VerbsApi>> api = OpenVerbs("libc.so.6", "librdmacm.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("has no ibv_get_device_list"), std::string::npos)
      << api.status();
}

}  // namespace
}  // namespace rds::verbs
