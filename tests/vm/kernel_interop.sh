#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_kernel_interop.py starts them): one guest
# is a kernel RDS node (modprobe rds_tcp), the other runs the shim with no RDS module. Two
# phases: the shim's client against the node's echo server, then the node's client against the
# shim's echo server (tests/vm/rds_echo.py on both sides), 64 B to 1 MiB, content and order
# checked; then pings to port 0 each way (the shim's side keeps a socket bound meanwhile: a
# host where no shim process runs does not answer). Prints "RESULT <phase> <client's verdict>"
# from the client's guest.
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
    run timeout 150 python3 "$HERE/rds_echo.py" server "$ME" "$port" "$COUNT" &
    local pid=$!
    sleep 2
    vm_barrier "$name"
    wait "$pid"
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
      run python3 "$HERE/rds_echo.py" hold "$ME" 4201 120 &
      local holder=$!
      sleep 2
    fi
    vm_barrier "$name"
    vm_barrier "$name-done"
    [ "$ROLE" = shim ] && kill "$holder" 2>/dev/null
  fi
  return 0
}
pings shim-pings-node shim
pings node-pings-shim kernel
