#!/usr/bin/env python3
"""Print the tables of bench/harness/run.sh from the harness's summary.json.

Input: the runs file run.sh writes, one line per harness invocation:
    <label> <run dir> <load1> <load5> <load15>
labels: steady, sat_a, sat_b, chaos.  Medians are the harness's own (the
median over the phase of the adapter's 5 s rate samples, or of its 30 s
latency windows); dead tuples are the peak of n_dead_tup summed over the
system's event tables (pg_stat_user_tables), as summary.json has them.
"""
from __future__ import annotations

import json
import os
import sys


def load(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


def fmt(v, nd=0) -> str:
    if v is None:
        return "-"
    if isinstance(v, (int, float)):
        return f"{v:,.{nd}f}"
    return str(v)


def metric(pb: dict, name: str):
    m = (pb or {}).get("metrics", {}).get(name)
    return m["median"] if m else None


def ratio(a, b) -> str:
    if a is None or b in (None, 0):
        return "-"
    return f"{a / b:.2f}x"


def main() -> None:
    runs = {}
    loads = {}
    for line in open(sys.argv[1]):
        parts = line.split()
        if len(parts) >= 2 and os.path.exists(parts[1] + "/summary.json"):
            runs[parts[0]] = load(parts[1] + "/summary.json")
            loads[parts[0]] = " ".join(parts[2:5])
    systems: list[str] = []
    for s in runs.values():
        for name in s["systems"]:
            if name not in systems:
                systems.append(name)
    ref = "pgmq" if "pgmq" in systems else None

    if "steady" in runs:
        s = runs["steady"]["systems"]
        print(f"\nSteady and held xmin (fixed rate; load at end {loads['steady']})\n")
        print("| system | steady jobs/s | pickup p50 / p99 ms | peak dead tuples | "
              "held-xmin jobs/s | held-xmin pickup p99 ms | held-xmin peak dead tuples | "
              "after release: peak dead tuples, back to baseline s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name in systems:
            ph = s.get(name, {}).get("phases", {})
            c, i, r = ph.get("clean_1", {}), ph.get("idle_1", {}), ph.get("recovery_1", {})
            print(f"| {name} | {fmt(c.get('median_throughput_per_s'), 1)} | "
                  f"{fmt(metric(c, 'claim_p50_ms'))} / {fmt(metric(c, 'claim_p99_ms'))} | "
                  f"{fmt(c.get('peak_dead_tup'))} | {fmt(i.get('median_throughput_per_s'), 1)} | "
                  f"{fmt(metric(i, 'claim_p99_ms'))} | {fmt(i.get('peak_dead_tup'))} | "
                  f"{fmt(r.get('peak_dead_tup'))}, {fmt(r.get('recovery_to_baseline_s'), 1)} |")

    sat = [k for k in ("sat_a", "sat_b") if k in runs]
    if sat:
        print(f"\nSaturation (depth-target; loads at end: "
              + "; ".join(f"{k} {loads[k]}" for k in sat) + ")\n")
        print("| system | " + " | ".join(f"{k} jobs/s" for k in sat)
              + " | mean | pickup p99 ms (mean) | peak dead tuples (max) |"
              + (f" ratio to {ref} |" if ref else ""))
        print("|---|" + "---:|" * (len(sat) + 3 + (1 if ref else 0)))
        means = {}
        rows = {}
        for name in systems:
            tp, p99, dead = [], [], []
            for k in sat:
                c = runs[k]["systems"].get(name, {}).get("phases", {}).get("clean_1", {})
                tp.append(c.get("median_throughput_per_s"))
                p99.append(metric(c, "claim_p99_ms"))
                dead.append(c.get("peak_dead_tup"))
            ok = [x for x in tp if x is not None]
            means[name] = sum(ok) / len(ok) if ok else None
            okp = [x for x in p99 if x is not None]
            okd = [x for x in dead if x is not None]
            rows[name] = (tp, sum(okp) / len(okp) if okp else None, max(okd) if okd else None)
        for name in systems:
            tp, p99, dead = rows[name]
            print(f"| {name} | " + " | ".join(fmt(x, 1) for x in tp)
                  + f" | {fmt(means[name], 1)} | {fmt(p99)} | {fmt(dead)} |"
                  + (f" {ratio(means[name], means.get(ref))} |" if ref else ""))

    for label, title in (("chaos", "postgres-restart (down half the phase)"),
                         ("kill", "kill-worker (SIGKILL of the adapter), start-worker")):
        if label not in runs:
            continue
        s = runs[label]["systems"]
        print(f"\nChaos: {title} (fixed rate; load at end {loads[label]})\n")
        print("| system | baseline jobs/s | chaos phases jobs/s | recovery jobs/s | "
              "recovery to 90% of baseline s | jobs enqueued - completed (chaos + recovery) |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in systems:
            ph = s.get(name, {}).get("phases", {})
            b, r = ph.get("baseline", {}), ph.get("recovery", {})
            # a phase without samples (the adapter killed) has no entry: "-"
            labels = [p["label"] for p in runs[label]["phases"]]
            mid = ", ".join(
                f"{k} {fmt(ph.get(k, {}).get('median_throughput_per_s'), 1)}"
                for k in labels if k not in ("warmup", "baseline", "recovery"))
            print(f"| {name} | {fmt(b.get('median_throughput_per_s'), 1)} | "
                  f"{mid} | "
                  f"{fmt(r.get('median_throughput_per_s'), 1)} | "
                  f"{fmt(r.get('chaos_recovery_time_s'), 1)} | {fmt(r.get('jobs_lost'))} |")

if __name__ == "__main__":
    main()
