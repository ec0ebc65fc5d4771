#!/usr/bin/env python3
"""SDP stream sockets over RDMA verbs (issue 18): two guests of ../shared/vm with soft-RoCE and no
RDS module, unmodified Python programs (tests/vm/sdp_echo.py) under the shim on both
(tests/vm/sdp_verbs.sh): streams of 0 B to 1 MiB with an urgent byte, echoed with their SHA-256,
over RDMA verbs, with the SDP connection's names on both sides, blocking and non-blocking
connects; libsdp's "both" falling back to
TCP for a server without the shim; an SDP socket refused where nobody serves SDP; OpenJDK's
own SDP support (a Socket and an NIO SocketChannel against a ServerSocket); a blocked writer
whose reader is killed with kill -9, rdsctl showing both sides on verbs meanwhile; an
os.closerange over every fd above a connected socket (the shim's own are spared); the
differential conformance transcripts (sdp_transcript.c) over verbs against kernel TCP; a
writer that exits with os._exit right after writing (its bytes delivered first); 30 MB each way
through a reader that stops and a link lost for 3 s; curl and urllib fetching a file from
python3 -m http.server, all three converted by libsdp rules.

Skips (exit 77) as test_kernel_parity.py does. Expected run time: ~4 min (emulated CPU; the JVMs take most of it).
"""

import os
import re
import shutil
import subprocess

from vmlib import HERE, Checks, build_dir, run_guests


def compile_java():
    """SdpEcho.java into BUILD_DIR/sdp-java (the guests run it), or False without a JDK."""
    javac = shutil.which("javac")
    if not javac:
        print("no javac (apt-get install openjdk-17-jdk-headless): the Java phase is skipped")
        return False
    out = os.path.join(build_dir(), "sdp-java")
    os.makedirs(out, exist_ok=True)
    src = os.path.join(os.path.dirname(HERE), "integration", "SdpEcho.java")
    subprocess.run([javac, "-d", out, src], check=True, timeout=120)
    return True


def main():
    have_java = compile_java()
    out = run_guests(os.path.join(HERE, "sdp_verbs.sh"), "vm1", 420)
    results = dict(re.findall(r"RESULT (\S+) ?(.*)", out))
    checks = Checks("SDP over verbs")
    check = checks.check
    check("setup" not in results, f"soft-RoCE came up: {results.get('setup', 'ok')}")
    check(results.get("client-ok") == "3",
          f"3 streams (0 B, 70001 B, 1 MiB; an urgent byte each) echoed whole, the client's "
          f"names the SDP connection's: {results.get('client-ok')} of 3")
    check(results.get("client-verbs", "0") != "0" and int(results.get("client-verbs", 0)) >= 3,
          f"the client connected over RDMA verbs each time: {results.get('client-verbs')}")
    check(results.get("nb-ok") == "3",
          f"3 non-blocking connects (select and SO_ERROR; CPython's settimeout; one followed "
          f"by os.closerange over every fd above the socket's, which must spare the relay's) "
          f"echoed whole: {results.get('nb-ok')} of 3")
    check(results.get("nb-verbs") == "3",
          f"... all over RDMA verbs: {results.get('nb-verbs')}")
    check(results.get("server-peers") == "6 6",
          f"the server's accept() and getsockname() gave the SDP addresses (peer, local): "
          f"{results.get('server-peers')}")
    check(results.get("server-verbs") == "6",
          f"the server accepted over RDMA verbs each time: {results.get('server-verbs')}")
    check(results.get("both") == "2 1 1",
          f"'use both': no SDP at a server without the shim, so TCP, and the streams echoed; "
          f"the second connect went to TCP at once (echoes, fallbacks, known): "
          f"{results.get('both')}")
    check(results.get("both-nb") == "ok 1",
          f"'use both', non-blocking: no SDP there, so TCP connected and relayed by the relay "
          f"thread, the stream echoed: {results.get('both-nb')}")
    check(results.get("refused") == "error ECONNREFUSED",
          f"an SDP socket where nobody serves SDP: ECONNREFUSED: {results.get('refused')}")
    check(results.get("refused-nb") == "error ECONNREFUSED",
          f"... non-blocking, ECONNREFUSED from SO_ERROR: {results.get('refused-nb')}")
    killed = results.get("killed-reader", "").split()
    check(len(killed) == 3 and killed[1] in ("ECONNRESET", "EPIPE") and int(killed[2]) < 50,
          f"a reader that never reads, killed with kill -9: the blocked writer gets ECONNRESET "
          f"or EPIPE (error, seconds): {results.get('killed-reader')}")
    tr = results.get("transcript", "0 -1 0 0").split()
    check(len(tr) == 4 and int(tr[0]) > 100 and tr[1] == "0" and int(tr[2]) >= 20 and tr[3] == "1",
          f"the differential transcripts (tests/integration/sdp_transcript.c) over verbs match "
          f"kernel TCP's (lines, differing lines, SDP connections over verbs, completed): "
          f"{results.get('transcript')}")
    check(results.get("drain", "").startswith("ok drained 3000000") and
          results.get("blast-exit") == "0",
          f"a writer that leaves with os._exit right after writing 3 MB: every byte and the end "
          f"of file reach the reader first: {results.get('drain')} (writer's exit "
          f"{results.get('blast-exit')})")
    check(results.get("flap") == "1",
          f"30 MB each way through a reader that stops for 3 s and a link lost for 3 s (netem): "
          f"echoed whole, SHA-256 checked: {results.get('flap')}")
    http = results.get("http", "0 0").split()
    check(len(http) == 2 and http[0] == "2" and int(http[1]) >= 2,
          f"unmodified TCP programs converted by rules: curl and urllib fetched a 5 MB file from "
          f"python3 -m http.server over RDMA verbs, SHA-256 equal (equal, verbs connects): "
          f"{results.get('http')}")
    check(results.get("rdsctl-server") == "connected/verbs listening/verbs+tcp",
          f"rdsctl on the reader's side: its listener on verbs and TCP, its connection on verbs: "
          f"{results.get('rdsctl-server')}")
    check(results.get("rdsctl-client") == "connected/verbs",
          f"rdsctl on the writer's side: its connection on verbs: {results.get('rdsctl-client')}")
    if have_java:
        check(results.get("java-client") == "2 2",
              f"OpenJDK's SDP (-Dcom.sun.sdp.conf): a Socket and an NIO SocketChannel echoed "
              f"64 KiB each over RDMA verbs (echoes, verbs connects): {results.get('java-client')}")
        check(results.get("java-server") == "2 2",
              f"... its ServerSocket accepted both over RDMA verbs, with their SDP addresses: "
              f"{results.get('java-server')}")
    checks.done()


if __name__ == "__main__":
    main()
