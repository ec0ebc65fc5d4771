#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_kernel_relay.py starts them): several shim
# processes of one host talk to one kernel RDS node, which keeps one connection per address pair
# (DESIGN.md §3.5: the first engine to reach the node owns that connection, the others relay
# through it). The node's guest runs an echo server and a collector (tests/vm/rds_echo.py); the
# shim's guest starts process A, then B and C once A has done its round trips (so A owns the
# connection); each does round trips through the node's echo server and then streams numbered
# messages to the collector; A is killed with kill -9 in mid-stream. Prints from the node's guest
# "RESULT source PORT n=… dups=… gaps=… order=…" per sender, from the shim's guest
# "RESULT sender NAME <its verdict>" and "RESULT killed A".
# Usage: kernel_relay.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
ROUNDS=10
COUNT=6000
KILL_AT=1500
. "$(dirname "$0")/guest_lib.sh"
# KERNEL_PATHS (kernel_relay_8paths.sh): the shim's RDS_PRELOAD_KERNEL_PATHS (0: automatic).
guest_setup "$BUILD" "$ROLE" RDS_PRELOAD_LOG_LEVEL=3 RDS_PRELOAD_KERNEL_PATHS="${KERNEL_PATHS:-0}"
if [ "$ROLE" = kernel ]; then
  timeout 250 $ECHO server "$ME" 4000 $((3 * ROUNDS)) >/tmp/echo.out 2>&1 &
  timeout 250 $ECHO collect "$ME" 4001 25 >/tmp/collect.out 2>&1 &
  collector=$!
  wait_for /tmp/echo.out ready 60
  wait_for /tmp/collect.out ready 60
  vm_barrier start
  wait "$collector"
  sed -n 's/^source/RESULT source/p' /tmp/collect.out
  cat /tmp/collect.out /tmp/echo.out
  exit 0
fi
# Not a function: `env … &` is the program itself (env execs it), so $! is what kill -9 hits.
SHIM=$RUN
vm_barrier start
$SHIM $ECHO echo_stream "$ME" 5001 "$PEER" 4000 "$ROUNDS" 4001 $((10 * COUNT)) >/tmp/A.out 2>&1 &
A=$!
wait_for /tmp/A.out echoed 90 || echo "A did not finish its round trips"
# B kills A (the owner) itself once it has sent KILL_AT messages: exactly in mid-stream, however
# the guest's one CPU is shared.
RDS_ECHO_KILL_AT=$KILL_AT:$A $SHIM timeout 200 $ECHO echo_stream "$ME" 5002 "$PEER" 4000 "$ROUNDS" 4001 \
  "$COUNT" >/tmp/B.out 2>&1 &
B=$!
$SHIM timeout 200 $ECHO echo_stream "$ME" 5003 "$PEER" 4000 "$ROUNDS" 4001 "$COUNT" >/tmp/C.out 2>&1 &
C=$!
wait "$B"; wait "$C"
grep -q "^killed $A" /tmp/B.out && ! grep -q '^sent' /tmp/A.out && echo "RESULT killed A"
for p in B C; do
  cat /tmp/$p.out
  echo "RESULT sender $p $(grep -c '^sent' /tmp/$p.out)"
done
echo "--- A"; cat /tmp/A.out
exit 0
