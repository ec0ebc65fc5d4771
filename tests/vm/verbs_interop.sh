#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_verbs_interop.py starts them), both with
# soft-RoCE (rxe0 on eth0): one guest is a kernel rds_rdma node (no rds_tcp: RDS over RDMA or
# nothing), the other runs unmodified programs under the shim (tests/vm/rds_echo.py with
# LD_PRELOAD), whose engine picks RDMA verbs for its address as the kernel would.
# 1. the node's echo server, the shim's client (the shim connects), 0 B to 1 MiB, checked;
# 2. the shim's echo server, the node's client (the node connects to the engine's listener);
# 3. pings to port 0 each way;
# 4. two shim processes at once with the node: one engine holds the connection, the other
#    relays through it (a second connection would make the node drop the first as stale);
# 5. a daemon's fork and exec on the shim's side, sending to the node's collector throughout;
# 6. shim to shim: the node unloads rds_rdma and runs the shim too; its echo server, our client.
# Prints "RESULT <phase> <verdict>" lines.
# Usage: verbs_interop.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
SIZES=0,64,4095,4096,4097,65536,1048576
ROUNDS=2
. "$(dirname "$0")/guest_lib.sh"
sysctl -qw net.core.wmem_max=16777216 net.core.rmem_max=16777216
SHIM="env LD_PRELOAD=$BUILD/preload/librds_preload.so RDS_PRELOAD_RUNDIR=/tmp/rds RDS_PRELOAD_LOG_LEVEL=3"
modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm || { echo "RESULT setup FAIL modprobe"; exit 1; }
rdma link add rxe0 type rxe netdev eth0 || { echo "RESULT setup FAIL rdma link"; exit 1; }
if [ "$ROLE" = kernel ]; then
  modprobe rds_rdma || { echo "RESULT setup FAIL rds_rdma"; exit 1; }
  RUN=""
else
  RUN=$SHIM
fi
vm_barrier ready

client() {  # NAME PORT PEER_PORT: prints the verdict line
  local out
  out=$($RUN timeout 120 python3 "$HERE/rds_echo.py" client "$ME" "$2" "$PEER" "$3" \
        "$SIZES" "$ROUNDS" 2>/tmp/$1.err)
  echo "$out"
  grep -E "RDMA|verbs|relay|holds" /tmp/$1.err | head -8
  echo "RESULT $1 $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
}
server() {  # NAME PORT COUNT: until the client is done
  $RUN timeout 150 python3 "$HERE/rds_echo.py" server "$ME" "$2" "$3" 140 >/tmp/$1.out 2>&1 &
  echo $! >/tmp/$1.pid
  wait_for /tmp/$1.out ready 60
}
COUNT=$((7 * ROUNDS))

# 1. The node serves, the shim connects.
if [ "$ROLE" = kernel ]; then
  server kernel-server 4000 "$COUNT"
  vm_barrier p1
  vm_barrier p1-done
  kill "$(cat /tmp/kernel-server.pid)" 2>/dev/null
else
  vm_barrier p1
  client kernel-server 4001 4000
  vm_barrier p1-done
fi
# 2. The shim serves, the node connects.
if [ "$ROLE" = shim ]; then
  server shim-server 4100 "$COUNT"
  vm_barrier p2
  vm_barrier p2-done
  kill "$(cat /tmp/shim-server.pid)" 2>/dev/null
  grep -E "RDMA|verbs" /tmp/shim-server.out | head -5
else
  vm_barrier p2
  client shim-server 4101 4100
  vm_barrier p2-done
fi
# 3. Pings each way (the shim side keeps a socket bound while pinged).
if [ "$ROLE" = shim ]; then
  out=$($RUN timeout 60 python3 "$HERE/rds_echo.py" ping "$ME" 4200 "$PEER" 5 2>&1)
  echo "$out"
  echo "RESULT shim-pings-node $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  $RUN python3 "$HERE/rds_echo.py" hold "$ME" 4201 120 >/tmp/hold.out 2>&1 &
  holder=$!
  wait_for /tmp/hold.out holding 60
  vm_barrier p3
  vm_barrier p3-done
  # The holder's engine owns the connection the node's pings came on: RDS_INFO_IB_CONNECTIONS
  # (asked from another process: the engines' tables are merged) and rdsctl show it.
  out=$($RUN timeout 30 python3 "$HERE/rds_echo.py" ibinfo "$ME" 4202 2>&1)
  echo "$out"
  if echo "$out" | grep -qE "^ib_conn $ME $PEER send_wr=[1-9][0-9]* recv_wr=[1-9]"; then
    echo "RESULT ib-info ok"
  else
    echo "RESULT ib-info FAIL"
  fi
  out=$(timeout 30 $RUN "$BUILD/tools/rdsctl" 2>&1)
  echo "$out" | grep -E "rdma|LINK"
  echo "RESULT rdsctl-qp $(echo "$out" | grep -qE " rdma +qp [0-9]+ rx_posted [1-9]" && echo ok || echo FAIL)"
  kill "$holder" 2>/dev/null
else
  vm_barrier p3
  out=$(timeout 60 python3 "$HERE/rds_echo.py" ping "$ME" 4200 "$PEER" 5 2>&1)
  echo "$out"
  echo "RESULT node-pings-shim $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  vm_barrier p3-done
fi
# 4. Two shim processes at once, each with its own echo conversation with the node.
if [ "$ROLE" = kernel ]; then
  server relay-a 4300 "$COUNT"
  server relay-b 4310 "$COUNT"
  vm_barrier p4
  vm_barrier p4-done
  kill "$(cat /tmp/relay-a.pid)" "$(cat /tmp/relay-b.pid)" 2>/dev/null
else
  vm_barrier p4
  client relay-a 4301 4300 >/tmp/relay-a.res &
  a=$!
  client relay-b 4311 4310 >/tmp/relay-b.res &
  b=$!
  wait "$a" "$b"
  cat /tmp/relay-a.res /tmp/relay-b.res
  vm_barrier p4-done
fi
# 5. A daemon's fork and exec on the shim's side: the parent sends, forks and exits at once; the
#    child sends, execs, and the program it runs sends: the node's collector gets all 600 once,
#    in order (the child's engine takes over the node's connection over RDMA).
if [ "$ROLE" = shim ]; then
  vm_barrier p5
  $RUN timeout 100 python3 "$HERE/rds_echo.py" forked "$ME" 4500 "$PEER" 4501 200 >/tmp/forked.out 2>&1
  wait_for /tmp/forked.out "^source\|^forked: sent" 120
  sleep 1
  grep -vE "^rds-preload" /tmp/forked.out | head -5
  grep -E "RDMA|verbs|relay|holds" /tmp/forked.out | head -12
  # The parent held the RDMA CM ports; once it is gone its heir listens (the host stays reachable):
  # two processes listened in turn.
  if [ "$(grep -oE "rds-preload\[[0-9]+\] info: RDS over RDMA: listening on IPv4" /tmp/forked.out |
          sort -u | wc -l)" -ge 2 ]; then
    echo "RESULT relisten ok"
  else
    echo "RESULT relisten FAIL"
  fi
  vm_barrier p5-sent
else
  timeout 150 python3 "$HERE/rds_echo.py" collect "$ME" 4501 15 60 >/tmp/collect.out 2>&1 &
  collector=$!
  wait_for /tmp/collect.out ready 60
  vm_barrier p5
  vm_barrier p5-sent
  wait "$collector"
  cat /tmp/collect.out
  if grep -q "^source 4500 n=600 dups=0 gaps=0 order=ok" /tmp/collect.out; then
    echo "RESULT fork-exec ok"
  else
    echo "RESULT fork-exec FAIL"
  fi
fi
# 6. Shim to shim: the node becomes a shim host.
if [ "$ROLE" = kernel ]; then
  modprobe -r rds_rdma || echo "RESULT setup FAIL modprobe -r rds_rdma"
  RUN=$SHIM
  server shim-shim 4400 "$COUNT"
  vm_barrier p6
  vm_barrier p6-done
  kill "$(cat /tmp/shim-shim.pid)" 2>/dev/null
  grep -E "RDMA|verbs" /tmp/shim-shim.out | head -5
else
  vm_barrier p6
  client shim-shim 4401 4400
  vm_barrier p6-done
fi
vm_barrier done
exit 0
