#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_kernel_interop.py starts them): one guest
# is a kernel RDS node (modprobe rds_tcp), the other runs the shim with no RDS module. Two
# phases: the shim's client against the node's echo server, then the node's client against the
# shim's echo server (tests/vm/rds_echo.py on both sides), 64 B to 1 MiB, content and order
# checked; then pings to port 0 each way (the shim's side keeps a socket bound meanwhile: a
# host where no shim process runs does not answer); then a daemon's fork and exec on the shim's
# side (below). Prints "RESULT <phase> <client's verdict>" from the client's guest (the
# collector's for fork-exec).
# Usage: kernel_interop.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
SIZES=64,1024,65536,1048576
ROUNDS=3
COUNT=$((4 * ROUNDS))
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" "$ROLE" RDS_PRELOAD_LOG_LEVEL=3
run() { $RUN "$@"; }
phase() {  # NAME SERVER_ROLE PORT
  local name=$1 server=$2 port=$3
  if [ "$ROLE" = "$server" ]; then
    run timeout 150 python3 "$HERE/rds_echo.py" server "$ME" "$port" "$COUNT" \
      >/tmp/server-$name.out 2>&1 &
    local pid=$!
    wait_for /tmp/server-$name.out ready 60  # bound (a Python start takes seconds here)
    vm_barrier "$name"
    wait "$pid"
    cat /tmp/server-$name.out
  else
    vm_barrier "$name"
    local out
    out=$(run timeout 120 python3 "$HERE/rds_echo.py" client "$ME" $((port + 1)) "$PEER" "$port" \
          "$SIZES" "$ROUNDS" 2>&1)
    echo "$out"
    echo "RESULT $name $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
  fi
}
phase kernel-server kernel 4000
phase shim-server shim 4100
# pings: the one named pings the other's port 0.
pings() {  # NAME PINGER_ROLE
  local name=$1 pinger=$2
  if [ "$ROLE" = "$pinger" ]; then
    vm_barrier "$name"
    local out
    out=$(run timeout 60 python3 "$HERE/rds_echo.py" ping "$ME" 4200 "$PEER" 5 2>&1)
    echo "$out"
    echo "RESULT $name $(echo "$out" | grep -E '^(ok|FAIL)' | head -1 | cut -d' ' -f1)"
    vm_barrier "$name-done"
  else
    if [ "$ROLE" = shim ]; then
      $RUN python3 "$HERE/rds_echo.py" hold "$ME" 4201 120 >/tmp/hold.out 2>&1 &
      local holder=$!  # python itself (env execs it): killed below
      wait_for /tmp/hold.out holding 60
    fi
    vm_barrier "$name"
    vm_barrier "$name-done"
    [ "$ROLE" = shim ] && kill "$holder" 2>/dev/null
  fi
  return 0
}
pings shim-pings-node shim
pings node-pings-shim kernel
# A daemon's fork and exec: the shim side's socket passes from the parent (which exits at once,
# the node's connection passing with it) to its child and, across exec, to the program the child
# runs; every message each sent reaches the node's collector once, in order (fork-exec), and the
# node's paced stream to the socket meanwhile waits in it for the last program (fork-exec-receive:
# a new owner continues the node's incarnation for a socket that outlived the old one).
if [ "$ROLE" = shim ]; then
  vm_barrier fork-exec
  run timeout 100 python3 "$HERE/rds_echo.py" forked "$ME" 4300 "$PEER" 4301 200 >/tmp/forked.out 2>&1
  wait_for /tmp/forked.out "^source" 120
  sleep 1
  cat /tmp/forked.out
  if grep -q "^source 4302 n=300 dups=0 gaps=0 order=ok" /tmp/forked.out; then
    echo "RESULT fork-exec-receive ok"
  else
    echo "RESULT fork-exec-receive FAIL"
  fi
  vm_barrier fork-exec-sent
else
  timeout 150 python3 "$HERE/rds_echo.py" collect "$ME" 4301 15 60 >/tmp/collect.out 2>&1 &
  collector=$!
  wait_for /tmp/collect.out ready 60
  vm_barrier fork-exec
  RDS_ECHO_PACE=0.02 timeout 100 python3 "$HERE/rds_echo.py" stream "$ME" 4302 "$PEER" 4300 300 \
    >/tmp/stream.out 2>&1
  vm_barrier fork-exec-sent
  wait "$collector"
  cat /tmp/collect.out /tmp/stream.out
  if grep -q "^source 4300 n=600 dups=0 gaps=0 order=ok" /tmp/collect.out; then
    echo "RESULT fork-exec ok"
  else
    echo "RESULT fork-exec FAIL"
  fi
fi
