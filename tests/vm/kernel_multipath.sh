#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_kernel_multipath.py starts them): a kernel
# RDS node (modprobe rds_tcp) and a shim host whose processes use the node's 8 paths
# (RDS_PRELOAD_KERNEL_PATHS=8; automatic would choose 1 with this 6.1 node). Two phases, each
# with 16 sender sockets (their ports hash to every path) streaming numbered 64 B messages at
# once (tests/vm/rds_echo.py fan) to one receiving socket (collect):
#  shim-sends   the shim's senders, the node receiving; the shim's guest then counts its TCP
#               connections to the node (8: every path);
#  node-sends   the node's senders, the shim receiving.
# The shim's sending process stays until the end, holding the node's connections (its engine
# owns them; the collecting process relays through it): nothing reconnects between the phases.
# A reconnect is a fault with a 6.x node, which puts connections in the first free slot rather
# than the slot they were opened for (DESIGN.md §3.5); this test is about paths without faults.
# Prints "RESULT <phase> <verdict…>" lines.
# Usage: kernel_multipath.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
PORTS=16
COUNT=300
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" "$ROLE" RDS_PRELOAD_LOG_LEVEL=3 RDS_PRELOAD_KERNEL_PATHS=8

phase() {  # NAME SENDER_ROLE BASE_PORT
  local name=$1 sender=$2 base=$3
  if [ "$ROLE" = "$sender" ]; then
    vm_barrier "$name-ready"
    # The senders stay after the last send (the node's connections are counted meanwhile; on
    # the shim, see above). The paths come up one after another: each sender's first message
    # waits for its own.
    $RUN timeout 170 $ECHO fan "$ME" $((base + 100)) "$PORTS" "$PEER" "$base" "$COUNT" 160 \
      >/tmp/fan-$name.out 2>&1 &
    fans+=($!)
    wait_for /tmp/fan-$name.out fanned 60
    if [ "$ROLE" = shim ]; then
      local n=0
      for _ in $(seq 70); do
        n=$(ss -Htn state established '( dport = :16385 or sport = :16385 )' | wc -l)
        [ "$n" -ge 8 ] && break
        sleep 0.1
      done
      echo "RESULT $name-connections $n"
    fi
    grep -v "^sent " /tmp/fan-$name.out | tail -20
    vm_barrier "$name-sent"
  else
    # The first message may take seconds (a Python start, the paths opened one by one).
    $RUN timeout 150 $ECHO collect "$ME" "$base" 6 60 >/tmp/collect.out 2>&1 &
    local pid=$!
    wait_for /tmp/collect.out ready 60
    vm_barrier "$name-ready"
    vm_barrier "$name-sent"
    wait "$pid"
    cat /tmp/collect.out
    local good
    good=$(grep -c "^source .* n=$COUNT dups=0 gaps=0 order=ok" /tmp/collect.out)
    echo "RESULT $name $good of $PORTS senders complete, in order, no duplicate"
  fi
}
fans=()
phase shim-sends shim 7000
phase node-sends kernel 7200
[ ${#fans[@]} -gt 0 ] && kill "${fans[@]}" 2>/dev/null
wait
