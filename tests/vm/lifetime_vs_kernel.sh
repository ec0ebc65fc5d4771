#!/bin/bash
# Runs INSIDE one guest of ../shared/vm (test_kernel_parity.py starts it): the issue-21 scenarios
# once under the shim (no RDS module loaded) and once on kernel RDS (modprobe rds_tcp), with the
# same programs (tests/integration/lifetime_probe.c, py_lifetime.py), and prints one line per
# scenario and side:
#   RESULT <shim|kernel> <scenario> <what the receiver counted, or the sender's outcome>
# The host-side driver compares the two sides. Usage: lifetime_vs_kernel.sh BUILD_DIR [N]
set -u
BUILD=$1
N=${2:-5}
SRC=$(cd "$(dirname "$0")/../integration" && pwd)
PROBE=$BUILD/tests/integration/lifetime_probe
LIB=$BUILD/preload/librds_preload.so
PY=$(command -v python3)

ip netns add ka; ip netns add kb
ip link add vka netns ka type veth peer name vkb netns kb
ip -n ka addr add 10.78.0.1/24 dev vka; ip -n ka link set vka up; ip -n ka link set lo up
ip -n kb addr add 10.78.0.2/24 dev vkb; ip -n kb link set vkb up; ip -n kb link set lo up
ip link set lo up

# run SIDE NETNS CMD...: a program as that side runs it, in a namespace ("-" for the first one).
run() {
  local side=$1 ns=$2
  shift 2
  local pre=()
  [ "$ns" != "-" ] && pre=(ip netns exec "$ns")
  if [ "$side" = shim ]; then
    "${pre[@]}" env LD_PRELOAD="$LIB" RDS_PRELOAD_RUNDIR=/tmp/rds-vm "$@"
  else
    "${pre[@]}" "$@"
  fi
}

# send_then SIDE HOW PLACE RECV_NS RECV_ADDR SEND_NS SEND_ADDR PORT: a counter, then one sender
# that warms the sending host up and stays a second (a kernel keeps its connection to the
# receiving host for every later process, while a process that exits at once loses a message
# still waiting for that connection; the shim's processes each start cold), then N senders that each send once and
# end as HOW says; prints what the counter got of the N + 1.
send_then() {
  local side=$1 how=$2 place=$3 rns=$4 raddr=$5 sns=$6 saddr=$7 port=$8
  local out=/tmp/count.$side.$how.$port
  # Patient: a CPython start takes seconds in a loaded emulated guest (a 3 s wait for the
  # next message once ended the count early); a count that completes does not wait.
  run "$side" "$rns" "$PROBE" count "$raddr" "$port" $((N + 1)) 20000 > "$out" &
  local counter=$!
  for _ in $(seq 50); do grep -q ready "$out" 2>/dev/null && break; sleep 0.1; done
  run "$side" "$sns" "$PROBE" send-then wait "$saddr" "$raddr" "$port"
  for _ in $(seq "$N"); do
    if [ "$how" = python ]; then
      run "$side" "$sns" "$PY" "$SRC/py_lifetime.py" send-and-end "$saddr" "$raddr" "$port"
    else
      run "$side" "$sns" "$PROBE" send-then "$how" "$saddr" "$raddr" "$port"
    fi
  done
  wait "$counter"
  echo "RESULT $side $place-$how $(awk '/^count/ {print $2}' "$out")/$((N + 1))"
}

# receiver_gone SIDE: a receiver across hosts takes 200 messages, closes and exits; the blocking
# sender of 2000 must finish (its messages to the unbound port are dropped at the receiving host).
receiver_gone() {
  local side=$1
  local out=/tmp/gone.$side
  run "$side" ka "$PROBE" count 10.78.0.1 4900 200 5000 > "$out" &
  local counter=$!
  for _ in $(seq 50); do grep -q ready "$out" 2>/dev/null && break; sleep 0.1; done
  local sender
  sender=$(run "$side" kb "$PROBE" stream 10.78.0.2 10.78.0.1 4900 2000 block 60000 | tail -1)
  wait "$counter"
  echo "RESULT $side receiver-gone-count $(awk '/^count/ {print $2}' "$out")"
  echo "RESULT $side receiver-gone-sender ${sender%% *}"
}

scenarios() {
  local side=$1 port=4100
  for how in close exit _exit exec python; do
    port=$((port + 1))
    send_then "$side" "$how" same-host - 127.0.0.1 - 127.0.0.1 "$port"
    send_then "$side" "$how" netns ka 10.78.0.1 kb 10.78.0.2 "$port"
  done
  receiver_gone "$side"
}

echo "== shim (no RDS module)"
scenarios shim
echo "== kernel (rds_tcp)"
modprobe rds_tcp || { echo "fatal: modprobe rds_tcp failed"; exit 1; }
scenarios kernel
exit 0
