#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_kernel_faults.py starts them): a kernel RDS
# node (modprobe rds_tcp) and a shim host; with MEDIUM=rdma (verbs_faults.sh) over soft-RoCE with
# rds_rdma, where a reset is a silence long enough for the node to drop the connection itself.
# Three phases (tests/vm/rds_echo.py on both sides):
#  reconnect   both send a numbered stream to the other at once (one socket each, "duplex"),
#              at least COUNT messages and on until the shim's guest has destroyed the TCP
#              connections between them three times (ss -K, after a silence in which nothing
#              left the guest and the shim delivered more: the node retransmits what the shim
#              had delivered): each side must receive the other's stream exactly once, in
#              order; the shim prints its recv_drop_old_seq counter (those retransmissions);
#  cong-shim   the node sends non-blocking to a shim socket that reads nothing: ENOBUFS once the
#              shim's congestion map reaches it, and sends succeed again once the shim drained;
#  cong-node   the same, shim sending to a kernel socket.
# Prints "RESULT <phase> <verdict…>" lines.
# Usage: kernel_faults.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
COUNT=20000
. "$(dirname "$0")/guest_lib.sh"
guest_setup "$BUILD" "$ROLE" RDS_PRELOAD_LOG_LEVEL=3


# --- reconnect
port=$([ "$ROLE" = kernel ] && echo 4001 || echo 5001)
peer_port=$([ "$ROLE" = kernel ] && echo 5001 || echo 4001)
vm_barrier reconnect
# Idle limits sized for the emulated guests: the first message may wait for the
# two sides to meet (a node whose application sends all the time frees its path
# only between pokes, kernel-rds.md §C.7); after a silence of up to 8 s the
# node's TCP may wait as long again before it retransmits, then the reconnect.
# Both streams go on past COUNT until the shim's guest has destroyed the connections three
# times (/vmshare/resets-done): each destroy comes while the node is sending.
RDS_ECHO_UNTIL=/vmshare/resets-done $RUN timeout 300 $ECHO duplex "$ME" "$port" "$PEER" \
  "$peer_port" "$COUNT" 60 60 >/tmp/duplex.out 2>&1 &
duplex=$!
if [ "$ROLE" = shim ]; then
  modprobe inet_diag 2>/dev/null; modprobe tcp_diag 2>/dev/null
  # Each time: a silence in which nothing leaves this guest (the node's messages still arrive and
  # are delivered, but it hears no acknowledgement), then the connection is destroyed: the
  # node retransmits, after the reconnect, messages the shim already delivered.
  node_next_rx() {  # the next sequence number the shim expects on the node's path
    # At most 2 s: on a loaded guest rdsctl can take far longer, and the silence around it
    # would stall both streams past the receivers' idle limit (seen: 30 s without a message).
    timeout 2 $RUN "$BUILD/tools/rdsctl" 2>/dev/null |
      awk '$6 == "kernel" && $7 == "up" { print $9; exit }'
  }
  paths_down() {  # how often the engine logged a path going down
    grep -c "path to pid .* down:" /tmp/duplex.out
  }
  wait_for /tmp/duplex.out "progress 1000" 60
  for i in 1 2 3; do
    if [ "${MEDIUM:-tcp}" = rdma ]; then
      # Over RDMA: a silence (nothing leaves this guest: the node's messages still arrive and are
      # delivered, but neither our RC acknowledgements nor our h_acks reach it; RC alone would
      # ride it out, seen for 25 s), then the host's connection is dropped (RDS_CONN_RESET) and
      # the silence ends: the node's queue pair finds ours gone, the node reconnects and
      # retransmits, among the rest, what we had delivered.
      # (The engine's log, not rdsctl: on a loaded guest rdsctl can take seconds.)
      # A reset that finds the connection still coming back up (after the last one both sides
      # may race for a while, rds-ib.md §1.8) destroys nothing: tried again, as over TCP.
      for attempt in 1 2 3; do
        sleep 3  # up again, and traffic flowing
        before=$(paths_down)
        tc qdisc add dev eth0 root netem loss 100%
        sleep 1.5
        $RUN timeout 20 $ECHO reset "$ME" "$PEER" >/dev/null 2>&1
        n=0
        start=$SECONDS
        while [ $((SECONDS - start)) -lt 10 ]; do
          [ "$(paths_down)" -gt "$before" ] && { n=1; break; }
          sleep 0.3
        done
        tc qdisc del dev eth0 root
        [ "$n" -ge 1 ] && break
      done
      echo "reset $i: $n connections destroyed"
      continue
    fi
    # Up again (after a reset the node refuses us until its side of the old connection has
    # failed too: a second or two); a connection that came up only to be refused is gone by
    # the time of the destroy, which is then tried again on the next one.
    for attempt in 1 2 3; do
      for _ in $(seq 200); do
        ss -Htn state established '( sport = :16385 or dport = :16385 )' | grep -q . && break
        sleep 0.1
      done
      sleep 0.3
      tc qdisc add dev eth0 root netem loss 100%
      # Until the shim has delivered messages the node sent in the silence (at least 20 more,
      # by the node path's NEXT_RX; at most 8 s): a 1-vCPU guest whose sender runs flat out,
      # beside other guests, read nothing in 1 s in CI, and what it never read is no duplicate
      # when the node sends it again.
      before=$(node_next_rx)
      start=$SECONDS
      sleep 0.3
      while [ $((SECONDS - start)) -lt 8 ]; do
        now=$(node_next_rx)
        [ -n "$before" ] && [ -n "$now" ] && [ "$now" -ge $((before + 20)) ] && break
        sleep 0.2
      done
      n=$(ss -K 'sport = :16385 or dport = :16385' 2>&1 | grep -c ESTAB)
      tc qdisc del dev eth0 root
      [ "$n" -ge 1 ] && break
    done
    echo "reset $i: $n connections destroyed"
  done
  : > /vmshare/resets-done
fi
wait "$duplex"
cat /tmp/duplex.out
other=$peer_port
echo "RESULT reconnect-$ROLE-sent $(sed -n 's/^sent //p' /tmp/duplex.out)"
echo "RESULT reconnect-$ROLE-receives $(sed -n "s/^source $other //p" /tmp/duplex.out)"
[ "$ROLE" = shim ] && echo "RESULT reconnect-shim-$(grep '^counter' /tmp/duplex.out)"

# --- congestion: RECEIVER_ROLE sinks, the other fills
congestion() {  # NAME RECEIVER_ROLE
  local name=$1 receiver=$2
  if [ "$ROLE" = "$receiver" ]; then
    $RUN timeout 60 $ECHO sink "$ME" 6001 65536 12 >/tmp/sink.out 2>&1 &
    local sink=$!
    wait_for /tmp/sink.out ready 60
    vm_barrier "$name-ready"
    wait "$sink"
    cat /tmp/sink.out
    vm_barrier "$name-drained"
  else
    vm_barrier "$name-ready"
    local out
    out=$($RUN timeout 60 $ECHO fill "$ME" 6002 "$PEER" 6001 2>&1)
    echo "$out"
    echo "RESULT $name-fill $(echo "$out" | grep -E '^(congested|FAIL)' | head -1 | cut -d' ' -f1)"
    vm_barrier "$name-drained"
    out=$($RUN timeout 60 $ECHO unblocked "$ME" 6003 "$PEER" 6001 20 2>&1)
    echo "$out"
    echo "RESULT $name-after $(echo "$out" | grep -E '^(uncongested|FAIL)' | head -1 | cut -d' ' -f1)"
  fi
}
congestion cong-shim shim
congestion cong-node kernel

# --- restart: the node streams to a shim process that stalls (its TCP stops acknowledging) and
# is killed with kill -9 (the node started sending before that process ran: the process finds
# the node from the host's record); a new process binds the same port. Our new engine is a new
# incarnation (a new GEN_NUM in its handshake): what the node retransmits for the old one is
# dropped (by the node once it has our GEN_NUM, by us before); everything the node sends once
# the new process runs arrives exactly once.
if [ "$ROLE" = kernel ]; then
  rm -f /tmp/stop /tmp/stop.new
  # Before any shim process runs: the node (the larger address) pokes when it starts sending,
  # nobody answers, and it does not try again by itself. The shim process that starts later
  # must find the node from its host's record (the earlier phases talked to it) and ask it.
  vm_barrier restart-go
  timeout 150 $ECHO phased "$ME" 4003 "$PEER" 7001 /tmp/stop 50 >/tmp/phased.out 2>&1 &
  phased=$!
  vm_barrier restart-sending
  vm_barrier restart-dead
  touch /tmp/stop
  vm_barrier restart-up
  touch /tmp/stop.new
  wait "$phased"
  cat /tmp/phased.out
  echo "RESULT restart-sent-old $(sed -n 's/^old //p' /tmp/phased.out)"
else
  vm_barrier restart-go
  vm_barrier restart-sending
  sleep 2
  $RUN $ECHO stall "$ME" 7001 50 >/tmp/stall.out 2>&1 &  # no timeout wrapper: $! is python
  stall=$!
  wait_for /tmp/stall.out stopping 60
  sleep 2
  kill -9 "$stall"
  cat /tmp/stall.out
  vm_barrier restart-dead
  $RUN timeout 100 $ECHO tally "$ME" 7001 15 >/tmp/tally.out 2>&1 &
  tally=$!
  wait_for /tmp/tally.out ready 60
  sleep 2  # its engine reaches the node (the host's record) and says hello
  vm_barrier restart-up
  wait "$tally"
  out=$(cat /tmp/tally.out)
  echo "$out"
  echo "RESULT restart-old $(echo "$out" | sed -n 's/^old //p')"
  echo "RESULT restart-dropped $(echo "$out" | sed -n 's/^dropped //p')"
  echo "RESULT restart-new $(echo "$out" | sed -n 's/^new //p')"
  gens=$( (cat /tmp/stall.out; echo "$out") | grep -o 'incarnation, generation [0-9a-f]*' | awk '{print $3}' | sort -u | wc -l)
  echo "RESULT restart-generations $gens"
fi
exit 0
