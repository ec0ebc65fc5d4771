# tests/vm/guest_lib.sh — sourced by the guest scripts of the kernel-peer VM tests (kernel_*.sh).
# Defines HERE (tests/vm), ECHO (tests/vm/rds_echo.py), wait_for and guest_setup; after
#   guest_setup BUILD_DIR ROLE(kernel|shim) [RDS_PRELOAD_X=VALUE ...]
# RUN is the prefix of a program run on this guest's side of the test: empty on the kernel node
# (rds_tcp loaded), the preload environment with the given settings on the shim host. Both allow
# socket buffers of 16 MiB (a 1 MiB message needs a 1 MiB send buffer). With MEDIUM=rdma both
# guests get soft-RoCE and the node loads rds_rdma instead of rds_tcp.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ECHO="python3 $HERE/rds_echo.py"

guest_setup() {
  local build=$1 role=$2
  shift 2
  sysctl -qw net.core.wmem_max=16777216 net.core.rmem_max=16777216
  if [ "${MEDIUM:-tcp}" = rdma ]; then
    # RDS over RDMA: soft-RoCE on both guests, rds_rdma (and no rds_tcp) on the node.
    modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm &&
      rdma link add rxe0 type rxe netdev eth0 || echo "RESULT setup FAIL soft-RoCE"
  fi
  if [ "$role" = kernel ]; then
    if [ "${MEDIUM:-tcp}" = rdma ]; then
      modprobe rds_rdma || echo "RESULT setup FAIL rds_rdma"
    else
      modprobe rds_tcp
    fi
    RUN=""
  else
    RUN="env LD_PRELOAD=$build/preload/librds_preload.so RDS_PRELOAD_RUNDIR=/tmp/rds $*"
  fi
}

wait_for() {  # FILE PATTERN SECONDS: until PATTERN is in FILE (false after SECONDS)
  for _ in $(seq $((10 * $3))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
