#!/usr/bin/env python3
"""The shim against kernel RDS in a guest of ../shared/vm (issue 21, points 1 and 2).

One guest (Debian's 6.1 kernel under qemu) runs tests/vm/lifetime_vs_kernel.sh: every scenario
first under the shim with no RDS module loaded, then on kernel rds_tcp with the same programs.
For each scenario the receiver's count must be the kernel's:
  * a message sent just before close(), exit(), _exit(), exec or the end of a Python script,
    on one host and across two network namespaces (N senders after a warm-up sender);
  * a blocking sender whose receiver took 200 messages and exited: the sender finishes.

Skips (exit 77) with a message when the harness is not beside the checkout (a fresh clone
without ../shared) or qemu is not installed (scripts/test.sh installs it with the harness's
setup.sh). Expected run time: ~1 min (emulated CPU).
"""

import os
import re
import subprocess

from vmlib import HERE, build_dir, command, fail

SENDERS = 5


def main():
    build = build_dir()
    script = os.path.join(HERE, "lifetime_vs_kernel.sh")
    cmd = command("-c", "2", "-t", "500")
    cmd += ["--", f"{script} {build} {SENDERS}"]
    print("+ " + " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=560)
    except subprocess.TimeoutExpired:
        fail("the guest did not finish within 560 s")
    print(r.stdout + r.stderr, flush=True)
    if r.returncode != 0:
        fail(f"the guest's script exited {r.returncode}")
    results = {}
    for m in re.finditer(r"^RESULT (shim|kernel) (\S+) (\S*)$", r.stdout, re.M):
        results[(m.group(1), m.group(2))] = m.group(3)
    scenarios = sorted({name for _, name in results})
    if len(scenarios) < 12:
        fail(f"only {len(scenarios)} scenarios reported")
    bad = []
    for name in scenarios:
        shim, kernel = results.get(("shim", name)), results.get(("kernel", name))
        if shim is None or kernel is None:
            bad.append(f"{name}: shim {shim}, kernel {kernel} (one side did not report)")
        elif shim != kernel:
            bad.append(f"{name}: shim {shim}, kernel {kernel}")
        else:
            print(f"ok {name}: {shim} on both", flush=True)
    want = f"{SENDERS + 1}/{SENDERS + 1}"
    for name in scenarios:
        if name.startswith(("same-host-", "netns-")) and results.get(("kernel", name)) != want:
            bad.append(f"{name}: the kernel itself got {results.get(('kernel', name))}, not "
                       f"{want}: the scenario no longer measures what it should")
    if results.get(("kernel", "receiver-gone-sender")) != "done":
        bad.append("receiver-gone: the kernel's sender did not finish: the scenario is broken")
    if bad:
        fail("the shim differs from kernel RDS:\n  " + "\n  ".join(bad))
    print("all scenarios match kernel RDS", flush=True)


if __name__ == "__main__":
    main()
