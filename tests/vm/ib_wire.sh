#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_ib_wire.py starts them), both with
# soft-RoCE (rxe0 on eth0): a kernel rds_rdma node, and a host without RDS where
# tests/vm/ib_ping_probe (the verbs transport's wire and rdma-core loading, no engine)
# 1. connects to the node through the RDMA CM and exchanges pings and pongs;
# 2. accepts the node's connection and receives its messages of 0 B to 1 MiB;
# 3. connects over IPv6 (port 16385, the 56-byte private data) for pings and pongs;
# 4. runs the verbs link against the node's echo server (done before 3);
# 5. connects through the verbs transport to the node's echo server;
# 6. serves through the verbs transport, and the node's client connects;
# 7. the node unloads rds_rdma and serves through the verbs transport too: shim to shim.
# Prints "RESULT <name> <verdict>" lines.
# Usage: ib_wire.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm || { echo "RESULT setup FAIL modprobe"; exit 1; }
# IPv6 too (a ULA on each side: the 56-byte private data, port 16385).
ME6=fd77::${ME##*.} PEER6=fd77::${PEER##*.}
sysctl -qw net.core.wmem_max=16777216 net.core.rmem_max=16777216  # 1 MiB messages
ip -6 addr add "$ME6/64" dev eth0 nodad
rdma link add rxe0 type rxe netdev eth0 || { echo "RESULT setup FAIL rdma link"; exit 1; }
if [ "$ROLE" = kernel ]; then
  modprobe rds_rdma || { echo "RESULT setup FAIL rds_rdma"; exit 1; }
fi
SIZES=0,1,48,4095,4096,4097,8192,10000,65536,1048576
vm_barrier ready
# 1. We connect: pings and pongs.
if [ "$ROLE" = shim ]; then
  out=$(timeout 60 "$BUILD/tests/ib_ping_probe" connect "$ME" "$PEER" 20 2>&1)
  echo "$out"
  echo "RESULT ping $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  echo "RESULT ping-acked $(echo "$out" | sed -n 's/^ok [0-9]* pongs, acked through \([0-9]*\).*/\1/p')"
  echo "RESULT map $(echo "$out" | grep -q 'congestion map: 8192 bytes' && echo ok || echo missing)"
  echo "RESULT version $(echo "$out" | sed -n 's/^established: protocol \([0-9.]*\),.*/\1/p')"
fi
vm_barrier pinged
# 2. The node connects: it has messages for this host, of sizes around the 4 KiB fragment.
if [ "$ROLE" = shim ]; then
  timeout 90 "$BUILD/tests/ib_ping_probe" accept "$ME" "$SIZES" >/tmp/accept.out 2>&1 &
  probe=$!
  for _ in $(seq 100); do grep -q listening /tmp/accept.out && break; sleep 0.1; done
  vm_barrier listening
  wait "$probe"
  cat /tmp/accept.out
  echo "RESULT accept $(grep -E '^(ok|FAIL)' /tmp/accept.out | head -1 | cut -d' ' -f1)"
  echo "RESULT request-version $(sed -n 's/^request: protocol \([0-9.]*\),.*/\1/p' /tmp/accept.out)"
  vm_barrier received
else
  sysctl -qw net.core.wmem_max=16777216
  vm_barrier listening
  python3 - "$ME" "$PEER" "$SIZES" <<'PY'
import socket, sys
me, peer, sizes = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
def payload(i, size):
    head = f"{i:08d}".encode()
    return (head * (size // len(head) + 1))[:size]
s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
s.bind((me, 5000))
for i, size in enumerate(sizes):
    s.sendto(payload(i, size), (peer, 4000))
print(f"node sent {len(sizes)}", flush=True)
PY
  vm_barrier received  # the socket stayed open until the probe had everything
fi
# 4. The verbs link (transports/verbs/verbs_link.h, no engine): messages of 0 B to 1 MiB and a
#    burst of 200 small ones, all queued at once, to the node's echo server; every echo back.
if [ "$ROLE" = kernel ]; then
  # The server keeps its socket open after the last echo until killed: the kernel drops a closed
  # socket's messages not yet posted, and the 200-message burst queues behind the 1 MiB one.
  timeout 90 python3 "$(dirname "$0")/rds_echo.py" server "$ME" 4001 210 85 >/tmp/echo.out 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q ready /tmp/echo.out && break; sleep 0.1; done
  vm_barrier echo-ready
  vm_barrier echoed
  kill "$server" 2>/dev/null
  cat /tmp/echo.out
else
  vm_barrier echo-ready
  out=$(timeout 80 "$BUILD/tests/verbs_link_probe" "$ME" "$PEER" 4001 2>&1)
  echo "$out"
  echo "RESULT link $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  vm_barrier echoed
fi
# 3. We connect over IPv6: pings and pongs.
if [ "$ROLE" = shim ]; then
  out=$(timeout 60 "$BUILD/tests/ib_ping_probe" connect "$ME6" "$PEER6" 5 2>&1)
  echo "$out"
  echo "RESULT ping6 $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
fi
vm_barrier pinged6
# 5. The verbs transport (transports/verbs/verbs_transport.h, no engine) connects to the node's
#    echo server: address and route resolution, the REQ, 60 messages of 0 B to 64 KiB echoed.
TPROBE="$BUILD/tests/verbs_transport_probe"
if [ "$ROLE" = kernel ]; then
  timeout 90 python3 "$(dirname "$0")/rds_echo.py" server "$ME" 4002 60 85 >/tmp/techo.out 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q ready /tmp/techo.out && break; sleep 0.1; done
  vm_barrier techo-ready
  vm_barrier techoed
  kill "$server" 2>/dev/null
else
  vm_barrier techo-ready
  out=$(timeout 80 "$TPROBE" connect "$ME" "$PEER" 4002 60 2>&1)
  echo "$out"
  echo "RESULT transport-connect $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  vm_barrier techoed
fi
# 6. The transport serves (the kernel's listeners) and the node connects to it: the node's
#    client sends 0 B to 64 KiB twice over and checks each echo.
if [ "$ROLE" = shim ]; then
  timeout 120 "$TPROBE" serve "$ME" 110 >/tmp/tserve.out 2>&1 &
  tserver=$!
  for _ in $(seq 100); do grep -q listening /tmp/tserve.out && break; sleep 0.1; done
  vm_barrier tserving
  vm_barrier tclient-done
  kill "$tserver" 2>/dev/null
  wait "$tserver" 2>/dev/null
  cat /tmp/tserve.out
else
  vm_barrier tserving
  out=$(timeout 100 python3 "$(dirname "$0")/rds_echo.py" client "$ME" 4005 "$PEER" 4004 \
        0,1,48,4095,4096,4097,8192,10000,65536 2 2>&1)
  echo "$out"
  echo "RESULT transport-accept $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  vm_barrier tclient-done
fi
# 7. Shim to shim: the node unloads rds_rdma (freeing its ports) and runs the transport's echo
#    server; we connect over IPv4 and over IPv6.
if [ "$ROLE" = kernel ]; then
  modprobe -r rds_rdma || echo "RESULT setup FAIL modprobe -r rds_rdma"
  timeout 150 "$TPROBE" serve "$ME" 140 >/tmp/tserve.out 2>&1 &
  tserver=$!
  for _ in $(seq 100); do grep -q listening /tmp/tserve.out && break; sleep 0.1; done
  vm_barrier shim-serving
  vm_barrier shim-done
  kill "$tserver" 2>/dev/null
  wait "$tserver" 2>/dev/null
  cat /tmp/tserve.out
else
  vm_barrier shim-serving
  out=$(timeout 80 "$TPROBE" connect "$ME" "$PEER" 4006 60 2>&1)
  echo "$out"
  echo "RESULT shim-shim $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  out=$(timeout 80 "$TPROBE" connect "$ME6" "$PEER6" 4007 30 2>&1)
  echo "$out"
  echo "RESULT shim-shim6 $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  vm_barrier shim-done
fi
vm_barrier done
exit 0
