#!/usr/bin/env python3
"""Several shim processes of one host and one kernel RDS node (issue 20, point 1): the node keeps
one connection per address pair, so one engine of the shim's host owns it and the others relay
through it (DESIGN.md §3.5). Two guests of ../shared/vm: the node runs an echo server and a
collector; three shim processes do round trips through the echo server (both directions relayed)
and then stream numbered messages to the collector; the owner is killed with kill -9 in
mid-stream (tests/vm/kernel_relay.sh). Every message of the survivors must arrive exactly once and
in order, and what arrived of the killed owner's must be a prefix of what it sent. Run with the
shim on the smaller address and on the larger (the node connects to it, possibly to a non-owner).

Skips (exit 77) as test_kernel_parity.py does. Expected run time: ~3 min (emulated CPU).
"""

import os
import re
import subprocess

from vmlib import HERE, build_dir, command, fail

COUNT = 6000


def main():
    build = build_dir()
    script = os.path.join(HERE, "kernel_relay.sh")
    bad = []
    for shim_vm in ("vm1", "vm2"):
        roles = {"vm1": ("10.77.0.1", "10.77.0.2"), "vm2": ("10.77.0.2", "10.77.0.1")}
        cmds = {vm: f"{script} {build} {'shim' if vm == shim_vm else 'kernel'} {me} {peer}"
                for vm, (me, peer) in roles.items()}
        cmd = command("-c", "1", "-t", "280") + ["--peer", cmds["vm2"], "--", cmds["vm1"]]
        print("+ " + " ".join(cmd), flush=True)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=320)
        except subprocess.TimeoutExpired:
            fail(f"the guests (shim on {shim_vm}) did not finish within 320 s")
        print(r.stdout + r.stderr, flush=True)
        order = "smaller" if shim_vm == "vm1" else "larger"
        sources = {port: dict(re.findall(r"(\w+)=(\w+)", rest))
                   for port, rest in re.findall(r"RESULT source (\d+) (.*)", r.stdout)}
        senders = dict(re.findall(r"RESULT sender (\w) (\d+)", r.stdout))

        def check(ok, what):
            line = f"shim on the {order} address: {what}"
            print(("ok   " if ok else "FAIL ") + line, flush=True)
            if not ok:
                bad.append(line)

        check("RESULT killed A" in r.stdout, "the owner (A) was killed mid-stream")
        for name, port in (("B", "5002"), ("C", "5003")):
            got = sources.get(port, {})
            check(senders.get(name) == "1", f"{name} finished sending")
            check(got.get("n") == str(COUNT) and got.get("dups") == "0" and
                  got.get("gaps") == "0" and got.get("order") == "ok",
                  f"{name}'s {COUNT} messages arrived exactly once, in order: {got}")
        a = sources.get("5001", {})
        check(a.get("dups") == "0" and a.get("gaps") == "0" and a.get("order") == "ok",
              f"what arrived of A's is a prefix of what it sent: {a}")
    if bad:
        fail("\n  ".join(["kernel relay:"] + bad))
    print("every run ok", flush=True)


if __name__ == "__main__":
    main()
