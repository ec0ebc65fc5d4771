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

from vmlib import HERE, Checks, run_guests

COUNT = 6000


def check_run(out, order, checks):
    """The checks of one run of kernel_relay.sh (`order`: the shim's address, for the report)."""
    sources = {port: dict(re.findall(r"(\w+)=(\w+)", rest))
               for port, rest in re.findall(r"RESULT source (\d+) (.*)", out)}
    senders = dict(re.findall(r"RESULT sender (\w) (\d+)", out))

    def check(ok, what):
        checks.check(ok, f"shim on the {order} address: {what}")

    check("RESULT killed A" in out, "the owner (A) was killed mid-stream")
    for name, port in (("B", "5002"), ("C", "5003")):
        got = sources.get(port, {})
        check(senders.get(name) == "1", f"{name} finished sending")
        check(got.get("n") == str(COUNT) and got.get("dups") == "0" and
              got.get("gaps") == "0" and got.get("order") == "ok",
              f"{name}'s {COUNT} messages arrived exactly once, in order: {got}")
    a = sources.get("5001", {})
    check(a.get("dups") == "0" and a.get("gaps") == "0" and a.get("order") == "ok",
          f"what arrived of A's is a prefix of what it sent: {a}")


def main():
    script = os.path.join(HERE, "kernel_relay.sh")
    checks = Checks("kernel relay")
    for shim_vm in ("vm1", "vm2"):
        out = run_guests(script, shim_vm, 280)
        check_run(out, "smaller" if shim_vm == "vm1" else "larger", checks)
    checks.done()


if __name__ == "__main__":
    main()
