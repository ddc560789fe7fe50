#!/usr/bin/env python3
"""ntask adapter for hardbyte/postgresql-job-queue-benchmarking.

Speaks the harness's JSONL adapter protocol (CONTRIBUTING_ADAPTERS.md):
one descriptor line at start, then every SAMPLE_EVERY_S one line per
metric (claim_p50/p95/p99_ms, enqueue_rate, completion_rate, queue_depth,
plus producer/end-to-end latencies).  stdout is telemetry, stderr logs.

ntask is used through its public SQL API only, the way a worker would:
  producer  ntask_enqueue_many(queue, keys[], payloads[])   (one statement per batch)
  worker    ntask_claim(queue, worker, max_tasks => B, wait => '1 second')
            ... the job's work (JOB_WORK_MS per task) ...
            ntask_transition_many(ids[], tokens[], 'succeeded')
Every call is its own autocommit transaction; nothing is held across the
work.  Fencing, the attempt ledger and the retry budget are on, as always.

Pacing: with PRODUCER_PACING=harness (the harness default) and
PRODUCER_MODE=fixed the producer inserts what the harness's `ENQUEUE <n>`
tokens on stdin ask for; otherwise it credits PRODUCER_RATE on real
elapsed wall-clock time (the contract's normative loop).  depth-target
keeps the ready depth near TARGET_DEPTH (saturation throughput).

Needs only psycopg 3 (Debian: python3-psycopg).
"""
from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import json
import os
import signal
import sys
import time
import uuid

import psycopg
from psycopg.types.json import Jsonb

SYSTEM = "ntask"
QUEUE = os.environ.get("NTASK_BENCH_QUEUE", "long_horizon_bench")
CONN_ERRORS = (psycopg.OperationalError, psycopg.errors.ConnectionDoesNotExist,
               psycopg.errors.AdminShutdown, psycopg.InterfaceError)


def env_int(key: str, default: int) -> int:
    v = os.environ.get(key)
    return int(v) if v not in (None, "") else default


def env_str(key: str, default: str) -> str:
    v = os.environ.get(key)
    return v if v not in (None, "") else default


def instance_id() -> int:
    try:
        return int(os.environ.get("BENCH_INSTANCE_ID", "0"))
    except ValueError:
        return 0


# Global observations: only replica 0 reports them (as the other adapters do).
OBSERVER_METRICS = frozenset({"queue_depth", "producer_target_rate"})


def emit(rec: dict) -> None:
    rec.setdefault("instance_id", instance_id())
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def log(msg: str) -> None:
    print(f"[ntask-bench] {msg}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return (_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"))


def read_producer_rate(default: int) -> int:
    path = os.environ.get("PRODUCER_RATE_CONTROL_FILE")
    if not path:
        return default
    try:
        with open(path) as fh:
            return int(float(fh.read().strip()))
    except Exception:
        return default


class Window:
    """Bounded ring of (t, ms) samples; percentiles over the last window_s.

    Memory is bounded by maxlen (the contract asks for bounded memory; at
    the rates this runs at, 65536 samples cover the 30 s window)."""

    def __init__(self, maxlen: int = 65536) -> None:
        self.d: collections.deque[tuple[float, float]] = collections.deque(maxlen=maxlen)

    def add(self, t: float, v: float) -> None:
        self.d.append((t, v))

    def pct(self, now: float, window_s: float = 30.0) -> tuple[float, float, float]:
        cut = now - window_s
        vals = sorted(v for t, v in self.d if t >= cut)
        if not vals:
            return 0.0, 0.0, 0.0
        n = len(vals)

        def q(p: float) -> float:
            return float(vals[min(n - 1, max(0, int(round(p * (n - 1)))))])

        return q(0.50), q(0.95), q(0.99)


async def aconnect() -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(
        os.environ["DATABASE_URL"], autocommit=True,
        application_name=f"ntask-bench-{instance_id()}")
    return conn


class Conn:
    """A connection that reconnects after chaos (restart, terminate)."""

    def __init__(self, shutdown: asyncio.Event) -> None:
        self.c: psycopg.AsyncConnection | None = None
        self.shutdown = shutdown

    async def get(self) -> psycopg.AsyncConnection:
        while self.c is None or self.c.closed:
            if self.shutdown.is_set():
                raise asyncio.CancelledError
            try:
                self.c = await aconnect()
            except Exception:
                await asyncio.sleep(0.2)
        return self.c

    async def reset(self) -> None:
        if self.c is not None:
            try:
                await self.c.close()
            except Exception:
                pass
        self.c = None
        await asyncio.sleep(0.1)

    async def close(self) -> None:
        if self.c is not None:
            try:
                await self.c.close()
            except Exception:
                pass


async def long_horizon() -> None:
    sample_every = env_int("SAMPLE_EVERY_S", 5)
    rate = env_int("PRODUCER_RATE", 800)
    mode = env_str("PRODUCER_MODE", "fixed")
    pacing = env_str("PRODUCER_PACING", "adapter")
    target_depth = env_int("TARGET_DEPTH", 1000)
    workers = env_int("WORKER_COUNT", 32)
    payload_bytes = env_int("JOB_PAYLOAD_BYTES", 256)
    work_ms = env_int("JOB_WORK_MS", 1)
    batch_ms = env_int("PRODUCER_BATCH_MS", 10)
    batch_max = env_int("PRODUCER_BATCH_MAX", 128)
    # Tasks per claim: the same default formula as pgmq-bench's
    # CONSUMER_BATCH_SIZE (its poll interval 50 ms), so both lease batches
    # of one size at one offered load.
    claim_batch = env_int(
        "CONSUMER_BATCH_SIZE",
        max(8, min(64, round((rate * 1.25) / max(workers * 20, 1)))))
    wait = env_str("NTASK_CLAIM_WAIT", "1 second")
    lease = env_str("NTASK_LEASE", "30 seconds")

    db_name = os.environ["DATABASE_URL"].rsplit("/", 1)[-1].split("?", 1)[0]
    async with await aconnect() as c:
        # max_attempts / lease: the defaults of a worker queue; the queue
        # is created once and kept across adapter restarts (chaos).
        await c.execute(
            "SELECT 1 FROM ntask_queue_set(%s, max_attempts => 25, lease => %s::interval)",
            (QUEUE, lease))
        cur = await c.execute("SELECT extversion FROM pg_extension WHERE extname = 'ntask'")
        row = await cur.fetchone()
        extversion = row[0] if row else None

    emit({
        "kind": "descriptor",
        "system": SYSTEM,
        "event_tables": ["ntask.task", "ntask.attempt"],
        "event_indexes": ["ntask.task_due_idx"],
        "extensions": ["ntask"],
        "version": f"ntask {extversion}",
        "schema_version": extversion,
        "db_name": db_name,
        "started_at": now_iso(),
    })

    prod_lat, claim_lat, e2e_lat = Window(), Window(), Window()
    counts = {"enq": 0, "done": 0, "depth": 0}
    target_rate = [float(rate)]
    pad = "x" * max(0, payload_bytes - 96)
    run_tag = f"{instance_id()}:{uuid.uuid4().hex[:8]}"  # task keys unique per process

    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, shutdown.set)

    tokens: asyncio.Queue[int] | None = None
    if pacing == "harness" and mode == "fixed":
        tokens = asyncio.Queue(maxsize=4096)

        async def stdin_reader() -> None:
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            while not shutdown.is_set():
                raw = await reader.readline()
                if not raw:
                    return
                parts = raw.decode(errors="replace").split()
                if len(parts) == 2 and parts[0] == "ENQUEUE" and parts[1].isdigit():
                    n = int(parts[1])
                    if n > 0 and not tokens.full():
                        tokens.put_nowait(n)

    seq = 0

    async def insert(conn: Conn, n: int) -> None:
        nonlocal seq
        keys, payloads = [], []
        now_ms = int(time.time() * 1000)
        for _ in range(n):
            seq += 1
            keys.append(f"{run_tag}:{seq}")
            payloads.append(Jsonb({"seq": seq, "enqueued_at_ms": now_ms,
                                   "payload_padding": pad}))
        t0 = time.monotonic()
        while not shutdown.is_set():
            try:
                c = await conn.get()
                await c.execute(
                    "SELECT count(*) FROM ntask_enqueue_many(%s, %s::text[], %s::jsonb[])",
                    (QUEUE, keys, payloads))
                break
            except CONN_ERRORS:
                await conn.reset()
        else:
            return
        per = (time.monotonic() - t0) * 1000 / n
        t = loop.time()
        for _ in range(n):
            prod_lat.add(t, per)
        counts["enq"] += n

    async def producer() -> None:
        conn = Conn(shutdown)
        credit, last = 0.0, loop.time()
        try:
            while not shutdown.is_set():
                if mode == "depth-target":
                    n = min(batch_max, max(0, target_depth - counts["depth"]))
                    if n <= 0:
                        await asyncio.sleep(batch_ms / 1000)
                        continue
                    await insert(conn, n)
                    counts["depth"] += n
                    continue
                if tokens is not None:
                    try:
                        n = await asyncio.wait_for(tokens.get(), 0.5)
                    except asyncio.TimeoutError:
                        continue
                    # tokens that arrived while the last insert ran go in
                    # this one (up to batch_max rows), so a slow commit
                    # does not make the producer fall behind the offer
                    while n < batch_max and not tokens.empty():
                        n += tokens.get_nowait()
                    target_rate[0] = float(read_producer_rate(rate))
                    await insert(conn, n)
                    continue
                # adapter-side pacing: credit on real elapsed time
                r = read_producer_rate(rate)
                target_rate[0] = float(r)
                now = loop.time()
                credit += r * (now - last)
                last = now
                n = min(batch_max, int(credit))
                if n > 0:
                    credit -= n
                    await insert(conn, n)
                await asyncio.sleep(batch_ms / 1000)
        finally:
            await conn.close()

    async def worker(idx: int) -> None:
        conn = Conn(shutdown)
        name = f"bench-{run_tag}-w{idx}"
        try:
            while not shutdown.is_set():
                try:
                    c = await conn.get()
                    cur = await c.execute(
                        "SELECT task_id, token, payload FROM ntask_claim(%s, %s, "
                        "max_tasks => %s, wait => %s::interval)",
                        (QUEUE, name, claim_batch, wait))
                    rows = await cur.fetchall()
                except CONN_ERRORS:
                    await conn.reset()
                    continue
                if not rows:
                    continue
                start_ms = int(time.time() * 1000)
                t = loop.time()
                for _, _, p in rows:
                    if isinstance(p, dict) and "enqueued_at_ms" in p:
                        claim_lat.add(t, float(start_ms - int(p["enqueued_at_ms"])))
                if work_ms > 0:
                    await asyncio.sleep(work_ms * len(rows) / 1000)
                ids = [r[0] for r in rows]
                toks = [r[1] for r in rows]
                try:
                    c = await conn.get()
                    await c.execute(
                        "SELECT count(*) FROM ntask_transition_many(%s::bigint[], "
                        "%s::bigint[], 'succeeded')", (ids, toks))
                except CONN_ERRORS:
                    # The finish may or may not have committed: the lease
                    # runs out and another worker takes the tasks over
                    # (a new token); nothing is lost, nothing counted twice here.
                    await conn.reset()
                    continue
                end_ms = int(time.time() * 1000)
                t = loop.time()
                for _, _, p in rows:
                    if isinstance(p, dict) and "enqueued_at_ms" in p:
                        e2e_lat.add(t, float(end_ms - int(p["enqueued_at_ms"])))
                counts["done"] += len(rows)
        finally:
            await conn.close()

    async def depth_poller() -> None:
        if instance_id() != 0 and mode != "depth-target":
            return
        conn = Conn(shutdown)
        try:
            while not shutdown.is_set():
                try:
                    c = await conn.get()
                    cur = await c.execute(
                        "SELECT count(*) FROM ntask.task WHERE queue = %s "
                        "AND state = 'ready' AND due_at <= now() AND due_at IS NOT NULL",
                        (QUEUE,))
                    counts["depth"] = int((await cur.fetchone())[0])
                except CONN_ERRORS:
                    await conn.reset()
                    continue
                await asyncio.sleep(0.25)
        finally:
            await conn.close()

    async def sampler() -> None:
        # clock-aligned first tick
        await asyncio.sleep(sample_every - (time.time() % sample_every))
        last_enq, last_done = counts["enq"], counts["done"]
        while not shutdown.is_set():
            now = loop.time()
            p = prod_lat.pct(now)
            s = claim_lat.pct(now)
            e = e2e_lat.pct(now)
            enq, done = counts["enq"], counts["done"]
            ts = now_iso()
            metrics = [
                ("producer_p50_ms", p[0], 30), ("producer_p95_ms", p[1], 30),
                ("producer_p99_ms", p[2], 30),
                ("subscriber_p50_ms", s[0], 30), ("subscriber_p95_ms", s[1], 30),
                ("subscriber_p99_ms", s[2], 30),
                ("claim_p50_ms", s[0], 30), ("claim_p95_ms", s[1], 30),
                ("claim_p99_ms", s[2], 30),
                ("end_to_end_p50_ms", e[0], 30), ("end_to_end_p95_ms", e[1], 30),
                ("end_to_end_p99_ms", e[2], 30),
                ("enqueue_rate", (enq - last_enq) / sample_every, sample_every),
                ("completion_rate", (done - last_done) / sample_every, sample_every),
                ("queue_depth", counts["depth"], 0),
                ("producer_target_rate", target_rate[0], 0),
            ]
            last_enq, last_done = enq, done
            for m, v, w in metrics:
                if m in OBSERVER_METRICS and instance_id() != 0:
                    continue
                emit({"t": ts, "system": SYSTEM, "kind": "adapter",
                      "subject_kind": "adapter", "subject": "", "metric": m,
                      "value": v, "window_s": w})
            await asyncio.sleep(sample_every - (time.time() % sample_every))

    tasks = [asyncio.create_task(producer()), asyncio.create_task(depth_poller()),
             asyncio.create_task(sampler())]
    if tokens is not None:
        tasks.append(asyncio.create_task(stdin_reader()))
    tasks += [asyncio.create_task(worker(i)) for i in range(workers)]
    log(f"queue={QUEUE} workers={workers} claim_batch={claim_batch} wait={wait} "
        f"mode={mode} pacing={pacing} rate={rate}")
    await shutdown.wait()
    # Leased tasks of this process are not released: a crashed worker
    # would not release them either; their leases run out and the next
    # claim takes them over (ntask's recovery path, measured by chaos).
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    scenario = env_str("SCENARIO", "long_horizon")
    if scenario != "long_horizon":
        raise SystemExit(f"ntask-bench: unsupported SCENARIO {scenario!r}")
    asyncio.run(long_horizon())


if __name__ == "__main__":
    main()
