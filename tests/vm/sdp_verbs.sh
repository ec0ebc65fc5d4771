#!/bin/bash
# Runs INSIDE each of two guests of ../shared/vm (test_sdp_verbs.py starts them), both with
# soft-RoCE (rxe0 on eth0) and no RDS module: SDP stream sockets (issue 18) between unmodified
# Python programs (tests/vm/sdp_echo.py), the "kernel" role guest serving, the "shim" role guest
# connecting.
# 1. SDP over RDMA verbs, both sides under the shim: socket(AF_INET, SOCK_STREAM, 257), 0 B to
#    1 MiB streams with an urgent byte in the middle, echoed with their SHA-256; the names each
#    side reports are the SDP connection's; then two non-blocking connects (select and
#    SO_ERROR, as event loops do; CPython's settimeout);
# 2. libsdp's "both": an ordinary TCP client converted by rules reaches a server without the shim
#    (no SDP there): it falls back to TCP and works; its second connect goes to TCP at once; a
#    non-blocking one falls back too (the relay thread connects TCP and relays it);
# 3. an SDP socket (no fallback) to a port nobody serves over SDP: ECONNREFUSED, as OFED's.
# Prints "RESULT <phase> <verdict>" lines.
# Usage: sdp_verbs.sh BUILD_DIR ROLE(kernel|shim) MY_ADDR PEER_ADDR
set -u
BUILD=$1 ROLE=$2 ME=$3 PEER=$4
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/guest_lib.sh"
SDP="python3 $HERE/sdp_echo.py"
SHIM="env LD_PRELOAD=$BUILD/preload/librds_preload.so RDS_PRELOAD_RUNDIR=/tmp/rds RDS_PRELOAD_LOG_LEVEL=3"
SIZES="0 70001 1048576"
modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm &&
  rdma link add rxe0 type rxe netdev eth0 || echo "RESULT setup FAIL soft-RoCE"
vm_barrier ready

# 1. Over verbs, both under the shim.
if [ "$ROLE" = kernel ]; then
  $SHIM timeout 200 $SDP server "$ME" 5000 6 >/tmp/verbs-server.out 2>/tmp/verbs-server.err &
  server=$!
  wait_for /tmp/verbs-server.out ready 60
  vm_barrier p1
  wait "$server"
  cat /tmp/verbs-server.out
  grep -E "SDP|RDMA" /tmp/verbs-server.err | head -12
  n=$(grep -c "^served $PEER:" /tmp/verbs-server.out)
  local_ok=$(grep -c " local $ME:5000 " /tmp/verbs-server.out)
  echo "RESULT server-peers $n $local_ok"
  echo "RESULT server-verbs $(grep -c 'accepted over RDMA verbs' /tmp/verbs-server.err)"
  vm_barrier p1-done
else
  vm_barrier p1
  for size in $SIZES; do
    $SHIM timeout 60 $SDP client "$ME" 0 "$PEER" 5000 "$size" 2>>/tmp/verbs-client.err
  done >/tmp/verbs-client.out
  for how in nb timeout "nb closerange"; do
    $SHIM timeout 60 $SDP client - 0 "$PEER" 5000 200000 $how 2>>/tmp/nb-client.err
  done >/tmp/nb-client.out
  cat /tmp/verbs-client.out /tmp/nb-client.out
  grep -E "SDP|RDMA" /tmp/verbs-client.err /tmp/nb-client.err | head -16
  echo "RESULT client-ok $(grep -c "^ok .* name $ME:[0-9]* peer $PEER:5000\$" /tmp/verbs-client.out)"
  echo "RESULT client-verbs $(grep -c 'over RDMA verbs' /tmp/verbs-client.err)"
  echo "RESULT nb-ok $(grep -c "^ok .* name $ME:[0-9]* peer $PEER:5000\$" /tmp/nb-client.out)"
  echo "RESULT nb-verbs $(grep -c 'connecting to .* over RDMA verbs (non-blocking' /tmp/nb-client.err)"
  vm_barrier p1-done
fi

# 2. "both": the server has no shim; the client is an ordinary TCP program converted by rules.
if [ "$ROLE" = kernel ]; then
  timeout 100 $SDP server "$ME" 5100 3 tcp >/tmp/both-server.out 2>&1 &
  server=$!
  wait_for /tmp/both-server.out ready 60
  vm_barrier p2
  wait "$server"
  vm_barrier p2-done
else
  echo "use both client * *:*" >/tmp/sdp.conf
  vm_barrier p2
  out=$($SHIM RDS_PRELOAD_SDP_CONFIG=/tmp/sdp.conf timeout 60 $SDP client - 0 "$PEER" 5100 \
        65536 tcp again 2>/tmp/both-client.err)
  echo "$out"
  grep -E "SDP|RDMA" /tmp/both-client.err | head -8
  fell=$(grep -c "over TCP (both)" /tmp/both-client.err)
  known=$(grep -c "no SDP was found there within the last minute" /tmp/both-client.err)
  echo "RESULT both $(echo "$out" | grep -c '^ok ') $fell $known"
  # Non-blocking: the relay thread falls back to TCP itself and relays it.
  out=$($SHIM RDS_PRELOAD_SDP_CONFIG=/tmp/sdp.conf timeout 60 $SDP client - 0 "$PEER" 5100 \
        100000 tcp nb 2>/tmp/both-nb.err)
  echo "$out"
  grep -E "SDP|RDMA" /tmp/both-nb.err | head -8
  echo "RESULT both-nb $(echo "$out" | cut -d' ' -f1) $(grep -c 'over TCP (both), relayed' /tmp/both-nb.err)"
  vm_barrier p2-done
fi

# 3. An SDP socket to a port with no SDP listener (a plain TCP server there): refused.
if [ "$ROLE" = kernel ]; then
  timeout 60 python3 -c "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$ME', 5200)); s.listen(1); time.sleep(40)" &
  vm_barrier p3
  vm_barrier p3-done
  kill %1 2>/dev/null
else
  vm_barrier p3
  out=$($SHIM timeout 60 $SDP client - 0 "$PEER" 5200 10 2>/tmp/refused.err)
  echo "$out"
  echo "RESULT refused $out"
  out=$($SHIM timeout 60 $SDP client - 0 "$PEER" 5200 10 nb 2>/tmp/refused-nb.err)
  echo "$out"
  echo "RESULT refused-nb $out"
  vm_barrier p3-done
fi
# 5. kill -9 of a reader that never reads (and rdsctl on both sides meanwhile).
# The state/transport of each SDP socket (of PID if given), as rdsctl shows them, sorted.
sdp_states() {
  "$BUILD/tools/rdsctl" --rundir /tmp/rds sdp --json ${1:-} | python3 -c '
import json, sys
doc = json.load(sys.stdin)
print(" ".join(sorted(k["state"] + "/" + k["transport"] for p in doc["sdp"] for k in p["sockets"])))'
}
if [ "$ROLE" = kernel ]; then
  $SHIM python3 "$HERE/sdp_echo.py" sleepy "$ME" 5400 >/tmp/sleepy.out 2>&1 &
  sleepy=$!
  wait_for /tmp/sleepy.out ready 60
  vm_barrier p5
  wait_for /tmp/sleepy.out accepted 60
  sleep 4  # the writer fills the credits and both sockets' buffers, and blocks
  echo "RESULT rdsctl-server $(sdp_states "$sleepy")"
  kill -9 "$sleepy"
  vm_barrier p5-done
else
  vm_barrier p5
  start=$SECONDS
  $SHIM timeout 60 $SDP flood "$PEER" 5400 >/tmp/flood.out 2>/tmp/flood.err &
  flood=$!
  sleep 3
  echo "RESULT rdsctl-client $(sdp_states)"  # (flood's pid is timeout's child's)
  wait "$flood"
  out=$(cat /tmp/flood.out)
  echo "$out"
  grep -E "SDP|RDMA" /tmp/flood.err | head -6
  echo "RESULT killed-reader $(echo "$out" | grep -oE '^error E[A-Z]+') $((SECONDS - start))"
  vm_barrier p5-done
fi

# 5b. A writer that leaves at once (os._exit) after writing: its relay thread goes with it, so
# the shim must deliver what it wrote (and its end of file) first.
if [ "$ROLE" = kernel ]; then
  $SHIM timeout 120 $SDP blast "$ME" 5500 3000000 >/tmp/blast.out 2>/tmp/blast.err &
  blaster=$!
  wait_for /tmp/blast.out ready 60
  vm_barrier p6
  wait "$blaster"
  echo "RESULT blast-exit $?"
  grep -E "SDP" /tmp/blast.err | tail -3
  vm_barrier p6-done
else
  vm_barrier p6
  sleep 1
  out=$($SHIM timeout 120 $SDP drain "$PEER" 5500 3000000 2>/tmp/drain.err)
  echo "$out"
  grep -E "SDP" /tmp/drain.err | tail -3
  echo "RESULT drain $out"
  vm_barrier p6-done
fi

# 5c. A reader that stops for 3 s, then the link lost for 3 s (netem 100% loss on vm1) while 30 MB
# go each way: the writer waits out both, nothing lost, duplicated or reordered (the client
# checks the echo and its SHA-256).
if [ "$ROLE" = kernel ]; then
  $SHIM timeout 200 $SDP server "$ME" 5600 1 pause 3 >/tmp/flap-server.out 2>/tmp/flap-server.err &
  server=$!
  wait_for /tmp/flap-server.out ready 60
  vm_barrier p7
  wait "$server"
  cat /tmp/flap-server.out
  vm_barrier p7-done
else
  vm_barrier p7
  $SHIM timeout 200 $SDP client "$ME" 0 "$PEER" 5600 30000000 >/tmp/flap-client.out \
    2>/tmp/flap-client.err &
  client=$!
  sleep 5
  tc qdisc add dev eth0 root netem loss 100%
  sleep 3
  tc qdisc del dev eth0 root
  wait "$client"
  cat /tmp/flap-client.out
  grep -E "SDP" /tmp/flap-client.err | tail -3
  echo "RESULT flap $(grep -c '^ok size 30000000 got 30000064 ' /tmp/flap-client.out)"
  vm_barrier p7-done
fi

# 8. Ordinary TCP programs converted by libsdp rules: CPython's http.server (threads, selectors)
# serves a 5 MB file; curl (a non-blocking connect and poll) and urllib fetch it over verbs.
if [ "$ROLE" = kernel ]; then
  mkdir -p /tmp/www && head -c 5000000 /dev/urandom >/tmp/www/blob
  sha256sum /tmp/www/blob | cut -c1-64 >/tmp/www/blob.sha
  echo "use sdp server * *:8000" >/tmp/sdp-http.conf
  $SHIM RDS_PRELOAD_SDP_CONFIG=/tmp/sdp-http.conf timeout 200 python3 -m http.server \
    --bind "$ME" --directory /tmp/www 8000 >/tmp/http.out 2>/tmp/http.err &
  server=$!
  for _ in $(seq 100); do grep -q "over RDMA verbs and TCP" /tmp/http.err && break; sleep 0.1; done
  vm_barrier p8
  vm_barrier p8-done
  kill "$server"
  grep -E "SDP" /tmp/http.err | head -4
else
  echo "use sdp client * $PEER:8000" >/tmp/sdp-http.conf
  vm_barrier p8
  want=$(curl -s "http://$PEER:8000/blob.sha")  # (plain TCP: no shim)
  $SHIM RDS_PRELOAD_SDP_CONFIG=/tmp/sdp-http.conf timeout 60 curl -s -o /tmp/blob.curl \
    "http://$PEER:8000/blob" 2>/tmp/curl.err
  $SHIM RDS_PRELOAD_SDP_CONFIG=/tmp/sdp-http.conf timeout 60 python3 -c "
import urllib.request, sys
open('/tmp/blob.urllib', 'wb').write(urllib.request.urlopen(sys.argv[1]).read())" \
    "http://$PEER:8000/blob" 2>/tmp/urllib.err
  ok=0
  for f in /tmp/blob.curl /tmp/blob.urllib; do
    [ "$(sha256sum "$f" 2>/dev/null | cut -c1-64)" = "$want" ] && ok=$((ok + 1))
  done
  grep -E "SDP" /tmp/curl.err /tmp/urllib.err | head -6
  echo "RESULT http $ok $(cat /tmp/curl.err /tmp/urllib.err | grep -c 'over RDMA verbs')"
  vm_barrier p8-done
fi

# 4. Java.
JAVA="java -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx128m -Djava.net.preferIPv4Stack=true"
if [ ! -f "$BUILD/sdp-java/SdpEcho.class" ]; then
  echo "RESULT java skipped"
elif [ "$ROLE" = kernel ]; then
  echo "bind $ME *" >/tmp/sdp-java.conf
  $SHIM timeout 200 $JAVA -Dcom.sun.sdp.conf=/tmp/sdp-java.conf -cp "$BUILD/sdp-java" SdpEcho \
    server "$ME" 5300 >/tmp/java-server.out 2>/tmp/java-server.err &
  server=$!
  wait_for /tmp/java-server.out ready 150
  vm_barrier p4
  wait "$server"
  cat /tmp/java-server.out
  grep -E "SDP|RDMA" /tmp/java-server.err | head -8
  echo "RESULT java-server $(grep -c "^accepted /$PEER:.* at /$ME:5300" /tmp/java-server.out) $(grep -c 'accepted over RDMA verbs' /tmp/java-server.err)"
else
  echo "connect $PEER 5300" >/tmp/sdp-java.conf
  vm_barrier p4
  out=$($SHIM timeout 200 $JAVA -Dcom.sun.sdp.conf=/tmp/sdp-java.conf -cp "$BUILD/sdp-java" \
        SdpEcho client "$PEER" 5300 2>/tmp/java-client.err)
  echo "$out"
  grep -E "SDP|RDMA|Exception" /tmp/java-client.err | head -8
  echo "RESULT java-client $(echo "$out" | grep -c "^ok .* peer /$PEER:5300") $(grep -c 'connected to .* over RDMA verbs' /tmp/java-client.err)"
fi

# 6. The differential conformance transcripts over verbs (vm1 alone, both ends on its own
# addresses over rxe0): every case on kernel TCP, then on SDP sockets under the shim.
if [ "$ROLE" != kernel ]; then
  ip -6 addr add fd77::1/64 dev eth0 nodad
  TRANSCRIPT=$BUILD/tests/integration/sdp_transcript
  export SDP_TRANSCRIPT_ADDR=$ME SDP_TRANSCRIPT_ADDR6=fd77::1
  timeout 120 "$TRANSCRIPT" tcp >/tmp/tr-tcp.txt 2>&1
  $SHIM timeout 120 "$TRANSCRIPT" sdp >/tmp/tr-sdp.txt 2>/tmp/tr-sdp.err
  sed '/^== end/,$d' /tmp/tr-tcp.txt >/tmp/tr-tcp-common.txt
  sed '/^== SDP only/,$d' /tmp/tr-sdp.txt >/tmp/tr-sdp-common.txt
  diff /tmp/tr-tcp-common.txt /tmp/tr-sdp-common.txt >/tmp/tr.diff
  cat /tmp/tr.diff
  grep -E "warn|error" /tmp/tr-sdp.err | head -8
  echo "RESULT transcript $(wc -l </tmp/tr-tcp-common.txt) $(wc -l </tmp/tr.diff) $(grep -c 'over RDMA verbs' /tmp/tr-sdp.err) $(grep -c '^== end' /tmp/tr-sdp.txt)"
fi
exit 0
