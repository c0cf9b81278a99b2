#!/usr/bin/env python3
"""Clean handover through the CLI, as an operator sees it: SIGTERM to the
leader's `picolease run --json` until the other process prints `leader`
(ttl 2 s, interval 500 ms), over ROUNDS handovers between fresh processes.

Usage: PICOLEASE=target/release/picolease python3 tools/scripts/cli_handover.py DB_URL ROUNDS
"""
import json, os, signal, subprocess, sys, time, statistics, threading, queue
P = os.environ.get("PICOLEASE", "target/release/picolease")
db, rounds = sys.argv[1], int(sys.argv[2])
table = "hb_%d" % os.getpid()
def start(node):
    p = subprocess.Popen([P, "--db", db, "--table", table, "run", "--name", "h", "--ttl", "2s", "--interval", "500ms", "--node", node, "--json"], stdout=subprocess.PIPE, text=True)
    q = queue.Queue()
    def pump():
        for line in p.stdout:
            q.put((time.monotonic(), json.loads(line)))
    threading.Thread(target=pump, daemon=True).start()
    return p, q
def wait_event(q, kind, timeout=10):
    end = time.monotonic() + timeout
    while True:
        t, e = q.get(timeout=max(0.01, end - time.monotonic()))
        if e["event"] == kind:
            return t, e
leader, lq = start("n0")
wait_event(lq, "leader")
gaps = []
for r in range(1, rounds + 1):
    succ, sq = start("n%d" % r)
    wait_event(sq, "observed")
    time.sleep(0.1 + (r * 0.037) % 0.5)
    t0 = time.monotonic()
    leader.send_signal(signal.SIGTERM)
    t1, e = wait_event(sq, "leader")
    gaps.append((t1 - t0) * 1000)
    leader.wait()
    leader, lq = succ, sq
leader.send_signal(signal.SIGTERM)
leader.wait()
gaps.sort()
subprocess.run([P, "--db", db, "--table", table, "status"], capture_output=True)
print("CLI clean handover (SIGTERM -> successor's leader line), %d rounds on %s: p50 %.1f ms, max %.1f ms, all %s" % (rounds, db.split(":")[0], statistics.median(gaps), gaps[-1], [round(g,1) for g in gaps]))
