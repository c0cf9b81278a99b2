#!/usr/bin/env python3
"""Lease sets at scale through the CLI: PROCS `picolease run --name
's{0..LEASES-1}' --json` processes on one database, then SIGTERM; prints
when every lease was first held, when the shares first balanced (max - min
<= 1), how many terms ended by expiry under a live holder (`follower` with
reason `expired`: the goal is none), how many terms started beyond one per
lease before the shutdown (leases that moved: none for processes started
together), and the shares once a second.

    python3 tools/scripts/cli_set_scale.py --db postgres://postgres@127.0.0.1:5432/test --ttl 2s
    python3 tools/scripts/cli_set_scale.py --db sqlite:///tmp/scale.db --ttl 2s --stagger 1 --load 2

--stagger S starts the processes S seconds apart; --load N keeps N busy
loops running meanwhile (a loaded machine); --logs keeps each process's
stderr. The binary is $PICOLEASE, or
target/release/picolease.
"""

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--ttl", default="2s")
    parser.add_argument("--procs", type=int, default=10)
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--stagger", type=float, default=0.0)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--table", default="pl_cli_set_scale")
    parser.add_argument("--logs", action="store_true",
                        help="keep each process's stderr (its warnings: failed, timed-out batches) and print where")
    args = parser.parse_args()
    binary = os.environ.get("PICOLEASE", "target/release/picolease")
    base = [binary, "--db", args.db, "--table", args.table]
    subprocess.run(base + ["init"], check=True, capture_output=True)
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.load)]
    out = tempfile.mkdtemp(prefix="picolease-scale-")
    names = "s{0..%d}" % (args.leases - 1)
    procs = []
    start_ms = time.time() * 1000
    try:
        for i in range(args.procs):
            stdout = open(os.path.join(out, "p%d.jsonl" % i), "w")
            procs.append(subprocess.Popen(
                base + ["run", "--name", names, "--ttl", args.ttl, "--json", "--node", "p%d" % i],
                stdout=stdout,
                stderr=open(os.path.join(out, "p%d.log" % i), "w") if args.logs else subprocess.DEVNULL))
            if args.stagger and i + 1 < args.procs:
                time.sleep(args.stagger)
        last_start_ms = time.time() * 1000
        time.sleep(args.seconds)
    finally:
        stop_ms = time.time() * 1000
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()
        for h in hogs:
            h.kill()
    events = []
    for i in range(args.procs):
        for line in open(os.path.join(out, "p%d.jsonl" % i)):
            e = json.loads(line)
            if e["event"] in ("leader", "follower"):
                e["p"] = i
                events.append(e)
    events.sort(key=lambda e: e["unix_ms"])
    holder = {}
    counts = [0] * args.procs
    all_held = balanced = None
    expired = collections.Counter()
    shares = []
    next_sample = start_ms + 1000
    for e in events:
        t = e["unix_ms"]
        while t >= next_sample:
            shares.append(((next_sample - start_ms) / 1000, counts[:]))
            next_sample += 1000
        name = e["name"]
        if e["event"] == "leader":
            if name in holder:
                counts[holder[name]] -= 1
            holder[name] = e["p"]
            counts[e["p"]] += 1
        elif holder.get(name) == e["p"]:
            del holder[name]
            counts[e["p"]] -= 1
            if e.get("reason") == "expired":
                expired[e["p"]] += 1
        if len(holder) == args.leases:
            if all_held is None:
                all_held = t
            if balanced is None and t >= last_start_ms and max(counts) - min(counts) <= 1:
                balanced = t
    since = lambda t: "never" if t is None else "%.2f s" % ((t - start_ms) / 1000)
    print("%d processes x %d leases, ttl %s, stagger %s s, load %d, on %s" % (
        args.procs, args.leases, args.ttl, args.stagger, args.load, args.db))
    print("all held at %s; balanced (after the last start, %.2f s) at %s" % (
        since(all_held), (last_start_ms - start_ms) / 1000, since(balanced)))
    print("terms ended by expiry under a live holder: %d %s" % (
        sum(expired.values()), dict(expired) if expired else ""))
    started = sum(1 for e in events if e["event"] == "leader" and e["unix_ms"] < stop_ms)
    print("terms started before the shutdown: %d (%d beyond one per lease: leases that moved)" % (
        started, started - args.leases))
    for at, c in shares:
        print("  %5.1f s  %s" % (at, c))
    if args.logs:
        print("stderr of each process: %s/p*.log" % out)
    return 1 if expired or balanced is None else 0


if __name__ == "__main__":
    sys.exit(main())
