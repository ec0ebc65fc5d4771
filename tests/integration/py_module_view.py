#!/usr/bin/env python3
"""Run under LD_PRELOAD on a host without the RDS module (test_module_view.py): what a program
probing for RDS sees. Prints "ok ..." / "FAIL ...: ..." lines; exit 1 if a check failed.
Expects RDS_PRELOAD_PING_ENABLE=0 and RDS_PRELOAD_RECONNECT_MIN_DELAY_MS=7 in its environment."""

import os
import sys

failures = 0


def check(ok, what, why=""):
    global failures
    print(f"ok {what}" if ok else f"FAIL {what}: {why}", flush=True)
    failures += 0 if ok else 1


def read(path):
    with open(path) as f:
        return f.read()


check(os.path.isdir("/sys/module/rds"), "/sys/module/rds is a directory")
check(os.path.isdir("/sys/module/rds_tcp"), "/sys/module/rds_tcp is a directory")
check(not os.path.exists("/sys/module/rds_rdma"), "no rds_rdma (the shim has no RDMA transport)")
check(read("/sys/module/rds/initstate") == "live\n", "rds initstate live")
check(os.path.isdir("/proc/sys/net/rds"), "/proc/sys/net/rds is a directory")
names = sorted(os.listdir("/proc/sys/net/rds"))
want = ["max_unacked_bytes", "max_unacked_packets", "ping_enable", "reconnect_max_delay_ms",
        "reconnect_min_delay_ms", "tcp"]
check(names == want, "net.rds sysctls listed", repr(names))
check(read("/proc/sys/net/rds/ping_enable") == "0\n", "ping_enable follows the setting",
      repr(read("/proc/sys/net/rds/ping_enable")))
check(read("/proc/sys/net/rds/reconnect_min_delay_ms") == "7\n",
      "reconnect_min_delay_ms follows the setting")
check(read("/proc/sys/net/rds/max_unacked_packets") == "8\n", "max_unacked_packets default")
check(sorted(os.listdir("/proc/sys/net/rds/tcp")) == ["rds_tcp_rcvbuf", "rds_tcp_sndbuf"],
      "net.rds.tcp sysctls listed")
check(not os.path.exists("/proc/sys/net/rds/pf_rds"), "no UEK pf_rds (upstream kernel)")
try:
    with open("/proc/sys/net/rds/ping_enable", "w") as f:
        f.write("1\n")
    check(False, "a sysctl cannot be written", "the write succeeded")
except PermissionError:
    check(True, "a sysctl cannot be written")
check(not os.access("/proc/sys/net/rds/ping_enable", os.W_OK), "access(W_OK) refused")
check(os.access("/proc/sys/net/rds/ping_enable", os.R_OK), "access(R_OK) granted")
check(not os.path.exists("/sys/module/rdsx"), "a neighbouring name is not translated")
check(not os.path.exists("/proc/sys/net/rdsfoo"), "a neighbouring sysctl is not translated")
sys.exit(1 if failures else 0)
