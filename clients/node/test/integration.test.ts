// Integration tests against a real server with ntask (t/042_client_node.pl
// starts it and pgbouncer in transaction mode): NTASK_DSN, NTASK_BOUNCER_DSN,
// and for the restart NTASK_PG_CTL, NTASK_PGDATA, NTASK_PG_LOG. Without
// NTASK_DSN every test here is skipped (the TAP file fails on a skip).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import { Client, Pool } from 'pg';
import { Awaiting, enqueue, enqueueMany, result, sqlFunctions, Success, Task, Worker } from '../src/index';
import { callProvider, hold } from './proc';

const DSN = process.env.NTASK_DSN;
const skip = DSN ? false : 'NTASK_DSN is not set';
// a hang fails the test instead of the whole TAP file
const T = 120000;
const quiet = { info() {}, warn() {}, error() {} };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let db: Client;
async function q(text: string, values: unknown[] = []): Promise<any[]> {
  return (await db.query(text, values)).rows;
}
async function one(text: string, values: unknown[] = []): Promise<any> {
  const r = await q(text, values);
  return r.length ? Object.values(r[0])[0] : undefined;
}
async function until(what: string, cond: () => Promise<boolean> | boolean, ms = 30000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
async function queue(name: string, lease = '30 seconds', extra = ''): Promise<void> {
  await q(`SELECT 1 FROM ntask_queue_set($1, lease => $2::interval, backoff_base => '1 hour', backoff_max => '1 hour'${extra})`, [name, lease]);
}
/** attempt:result:error_class of each attempt of the task, in order */
async function ledger(queueName: string, key: string): Promise<string> {
  return one(`SELECT string_agg(a.attempt || ':' || coalesce(a.result, 'open') || ':' || coalesce(a.error_class, '-'), ' ' ORDER BY a.attempt)
    FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = $1 AND t.task_key = $2`, [queueName, key]);
}
/** waits until a waiting claim of the worker is in pg_stat_activity */
async function claimWaiting(): Promise<void> {
  await until('a waiting claim', async () => Number(await one(
    `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%FROM ntask_claim(queue =>%' AND pid <> pg_backend_pid()`)) > 0);
}

interface Proc { child: ChildProcess; lines: any[]; exited: Promise<{ code: number | null; signal: string | null }>; err: string[] }
function startProc(env: Record<string, string>): Proc {
  const child = spawn(process.execPath, [join(__dirname, 'proc.js')],
    { env: { ...process.env, NTASK_DSN: DSN!, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const p: Proc = { child, lines: [], err: [], exited: new Promise((r) => child.on('exit', (code, signal) => r({ code, signal }))) };
  let buf = '';
  child.stdout!.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) { p.lines.push(JSON.parse(buf.slice(0, i))); buf = buf.slice(i + 1); }
  });
  child.stderr!.on('data', (d) => p.err.push(String(d)));
  return p;
}

before(async () => {
  if (!DSN) return;
  db = new Client({ connectionString: DSN });
  await db.connect();
  await q(`CREATE TABLE IF NOT EXISTS node_provider (task_key text PRIMARY KEY, calls int NOT NULL DEFAULT 1,
    token bigint, worker text)`);
  await q(`CREATE TABLE IF NOT EXISTS node_business (task_id bigint PRIMARY KEY, token bigint, note text)`);
});
after(async () => { if (db) await db.end(); });

test('drift: every ntask function the library calls exists with the argument names it passes', { skip, timeout: T }, async () => {
  const fns = sqlFunctions();
  assert.ok(Object.keys(fns).length >= 11);
  for (const [fn, args] of Object.entries(fns)) {
    const rows = await q(`SELECT p.proargnames, p.proargmodes::text[] AS modes FROM pg_proc p
      JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'ntask' WHERE p.proname = $1`, [fn]);
    assert.equal(rows.length, 1, `${fn}: one function of extension ntask`);
    const names: string[] = rows[0].proargnames ?? [];
    const modes: string[] | null = rows[0].modes;
    const inputs = names.filter((_n, i) => !modes || modes[i] === 'i' || modes[i] === 'b');
    for (const a of args) assert.ok(inputs.includes(a), `${fn} has an input argument ${a} (it has ${inputs.join(', ')})`);
  }
});

test('producer: enqueue, duplicate with its result, enqueueMany, result()', { skip, timeout: T }, async () => {
  await queue('n_prod');
  await q('BEGIN');
  const e = await enqueue(db, 'n_prod', 'p:1', { a: [1, 2] }, { priority: 3 });
  await q('ROLLBACK');
  assert.equal(e.created, true);
  assert.equal(await one(`SELECT count(*) FROM ntask.task WHERE queue = 'n_prod'`), '0', 'in the caller\'s transaction: rolled back with it');
  const first = await enqueue(db, 'n_prod', 'p:1', { a: [1, 2] }, { priority: 3, dependsOn: [] });
  assert.deepEqual([first.created, first.state], [true, 'ready']);
  assert.match(first.taskId, /^\d+$/);
  const many = await enqueueMany(db, 'n_prod', [{ key: 'p:2', payload: [1] }, { key: 'p:1', payload: { a: [1, 2] } }]);
  assert.deepEqual(many.map((m) => m.created), [true, false]);
  assert.equal(many[1].taskId, first.taskId);
  assert.equal(await result(db, 'n_prod', 'p:nope'), null);
  const w = new Worker(DSN!, 'n_prod', async (t) => new Success({ outcome: 'done', result: { echo: t.payload } }), { logger: quiet, wait: 1000 });
  const run = w.run();
  await until('2 succeeded', () => w.counters.succeeded === 2);
  w.stop();
  await run;
  const r = await result(db, 'n_prod', 'p:2');
  assert.deepEqual([r!.state, r!.outcome, r!.result], ['succeeded', 'done', { echo: [1] }]);
  const dup = await enqueue(db, 'n_prod', 'p:2', [1]);
  assert.deepEqual([dup.created, dup.outcome, dup.result], [false, 'done', { echo: [1] }]);
  const child = await enqueue(db, 'n_prod', 'p:3', {}, { dependsOn: ['p:1', 'n_prod:p:nope2'] }).catch((err) => err);
  assert.equal(child.code, '22023', 'a missing parent is the server\'s 22023');
});

test('traceparent: the enqueue\'s trace context reaches the handler with the attempt\'s span id', { skip, timeout: T }, async () => {
  await queue('n_trace');
  const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  await enqueue(db, 'n_trace', 'tr:1', {}, { traceparent: tp });
  let seen: string | null = null;
  const w = new Worker(DSN!, 'n_trace', async (t) => { seen = t.traceparent; }, { logger: quiet, wait: 1000 });
  const run = w.run();
  await until('handled', () => w.counters.succeeded === 1);
  w.stop();
  await run;
  assert.match(seen!, /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
  assert.notEqual(seen, tp, 'the attempt\'s own span id');
});

test('workflow: checkpoint, awaitSignal / Awaiting, the signal in the next claim, progress, release', { skip, timeout: T }, async () => {
  await queue('n_flow');
  await enqueueMany(db, 'n_flow', [{ key: 'f:1' }, { key: 'f:2' }]);
  const seen: string[] = [];
  const w = new Worker(DSN!, 'n_flow', async (t) => {
    if (t.key === 'f:2') {
      if (t.attempt === 1) { seen.push(`release ${await t.release()}`); return undefined; }
      return new Success({ outcome: 'after-release' });
    }
    if (t.attempt === 1) {
      seen.push(`checkpoint ${await t.checkpoint('fetch', { rows: 3 })}`);
      seen.push(`await ${await t.awaitSignal('sig:f1', 600000)}`);
      return Awaiting;
    }
    seen.push(`context ${JSON.stringify(t.context.checkpoints)} ${JSON.stringify(t.context.signal)}`);
    await t.progress({ step: 'send' });
    return new Success({ outcome: 'after-signal' });
  }, { logger: quiet, wait: 1000, concurrency: 1 });
  const run = w.run();
  await until('f:1 awaiting, f:2 done', async () => await one(`SELECT string_agg(state, ' ' ORDER BY task_key) FROM ntask.task
    WHERE queue = 'n_flow'`) === 'awaiting succeeded');
  assert.equal(await one(`SELECT ntask_signal('n_flow', 'sig:f1', '{"paid": true}')`), 'applied');
  await until('f:1 done', () => w.counters.succeeded === 2);
  w.stop();
  await run;
  assert.deepEqual(seen.sort(), ['await applied', 'checkpoint applied',
    'context {"fetch":{"rows":3}} {"key":"sig:f1","payload":{"paid":true}}', 'release applied']);
  assert.equal(await ledger('n_flow', 'f:1'), '1:awaiting:- 2:succeeded:-');
  assert.equal(await ledger('n_flow', 'f:2'), '1:released:- 2:succeeded:-');
  assert.deepEqual(await q(`SELECT a.progress FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
    WHERE t.queue = 'n_flow' AND t.task_key = 'f:1' AND a.attempt = 2`), [{ progress: { step: 'send' } }]);
  assert.equal(w.counters.released, 1);
});

test('takeover W1/W2: the stale report of W1 is refused and surfaced', { skip, timeout: T }, async () => {
  await queue('n_take', '1 second');
  await enqueue(db, 'n_take', 't:1', {});
  const lost: string[] = [];
  let w2done = false;
  const w1 = new Worker(DSN!, 'n_take', async (t) => {
    // W1 stops heartbeating (heartbeatEvery is a minute): W2 takes over
    await until('W2 succeeded', () => w2done);
    return new Success({ outcome: 'w1' });
  }, { name: 'W1', logger: quiet, heartbeatEvery: 60000, wait: 1000, concurrency: 1,
    onLost: (t, a, where) => lost.push(`${t.key} ${a} ${where}`) });
  const r1 = w1.run();
  await until('W1 holds t:1', async () => await one(`SELECT lease_owner FROM ntask.task WHERE queue = 'n_take'`) === 'W1');
  const w2 = new Worker(DSN!, 'n_take', async () => new Success({ outcome: 'w2' }),
    { name: 'W2', logger: quiet, wait: 1000, concurrency: 1, reconcile: () => null });
  const r2 = w2.run();
  await until('W2 succeeded', () => w2.counters.succeeded === 1);
  w2done = true;
  await until('W1 surfaced', () => lost.length === 1);
  w1.stop(); w2.stop();
  await Promise.all([r1, r2]);
  assert.deepEqual(lost, ['t:1 stale transition']);
  assert.equal(w1.counters.stale, 1);
  assert.equal(w1.counters.succeeded, 0);
  assert.equal(await ledger('n_take', 't:1'), '1:lease_expired:- 2:succeeded:-');
  assert.equal(await one(`SELECT outcome FROM ntask.task WHERE queue = 'n_take'`), 'w2');
});

test('handler exception before invoked is transient, after invoked unknown', { skip, timeout: T }, async () => {
  await queue('n_exc');
  await enqueueMany(db, 'n_exc', [{ key: 'before' }, { key: 'after' }]);
  const w = new Worker(DSN!, 'n_exc', async (t) => {
    if (t.key === 'after') await t.invoked();
    throw new Error(`boom ${t.key}`);
  }, { logger: quiet, invoked: 'manual', wait: 1000 });
  const run = w.run();
  await until('2 failures', () => w.counters.failedTransient + w.counters.failedUnknown === 2);
  w.stop();
  await run;
  assert.deepEqual([w.counters.failedTransient, w.counters.failedUnknown], [1, 1]);
  assert.equal(await ledger('n_exc', 'before'), '1:retry_wait:transient');
  assert.equal(await ledger('n_exc', 'after'), '1:retry_wait:unknown');
  assert.equal(await one(`SELECT string_agg(a.outcome_known::text || ':' || (a.detail->>'message'), ' ' ORDER BY t.task_key DESC)
    FROM ntask.attempt_all a JOIN ntask.task t USING (task_id) WHERE t.queue = 'n_exc'`),
    'true:boom before false:boom after');
});

test('SIGTERM: graceful; the invoked task finishes, the never-invoked one is released', { skip, timeout: T }, async () => {
  await queue('n_term');
  await enqueueMany(db, 'n_term', [{ key: 'a', payload: { kind: 'provider', holdMs: 1500 } }, { key: 'b', payload: { kind: 'uninvoked' } }]);
  const p = startProc({ PROC_QUEUE: 'n_term', PROC_NAME: 'term-1', PROC_LEASE_MS: '10000', PROC_GRACE_MS: '3000' });
  await until('both held, a invoked', async () => await one(`SELECT count(*) FILTER (WHERE lease_owner = 'term-1')
    || ':' || count(*) FILTER (WHERE invoked_at IS NOT NULL) FROM ntask.task WHERE queue = 'n_term'`) === '2:1');
  p.child.kill('SIGTERM');
  const ex = await p.exited;
  assert.deepEqual(ex, { code: 0, signal: null }, p.err.join(''));
  const counters = p.lines.find((l) => l.event === 'exit').counters;
  assert.deepEqual([counters.succeeded, counters.released], [1, 1]);
  assert.equal(await ledger('n_term', 'a'), '1:succeeded:-');
  assert.equal(await ledger('n_term', 'b'), '1:released:-');
  assert.equal(await one(`SELECT count(*) FROM ntask.task WHERE lease_owner IS NOT NULL AND queue = 'n_term'`), '0', 'nothing left leased');
  assert.equal(await one(`SELECT state FROM ntask.task WHERE queue = 'n_term' AND task_key = 'b'`), 'ready');
});

test('a second SIGTERM stops at once: the invoked task is left to its lease', { skip, timeout: T }, async () => {
  await queue('n_term2');
  await enqueue(db, 'n_term2', 'a', { kind: 'provider', holdMs: 600000 });
  // a grace of 10 minutes: only the second signal can end it in time
  const p = startProc({ PROC_QUEUE: 'n_term2', PROC_NAME: 'term-2', PROC_LEASE_MS: '10000', PROC_GRACE_MS: '600000' });
  await until('a invoked', async () => Number(await one(`SELECT count(*) FROM ntask.task
    WHERE queue = 'n_term2' AND lease_owner = 'term-2' AND invoked_at IS NOT NULL`)) === 1);
  p.child.kill('SIGTERM');
  await until('the first signal taken', () => /stopping: no new claims/.test(p.err.join('')));
  p.child.kill('SIGTERM');
  const ex = await p.exited;
  assert.deepEqual(ex, { code: 0, signal: null }, p.err.join(''));
  assert.match(p.err.join(''), /second stop: stopping at once/);
  assert.equal(await one(`SELECT lease_owner FROM ntask.task WHERE queue = 'n_term2'`), 'term-2',
    'left leased: the lease expires and the task is taken over');
  assert.equal(await ledger('n_term2', 'a'), '1:open:-');
});

test('SIGKILL mid-task: taken over with prior_outcome unknown, reconciled, the provider called once', { skip, timeout: T }, async () => {
  await queue('n_kill');
  await enqueue(db, 'n_kill', 'k:1', { kind: 'provider', holdMs: 600000 });
  const p = startProc({ PROC_QUEUE: 'n_kill', PROC_NAME: 'kill-1', PROC_LEASE_MS: '2000' });
  await until('the provider took effect', async () => Number(await one(`SELECT count(*) FROM node_provider WHERE task_key = 'k:1'`)) === 1);
  p.child.kill('SIGKILL');
  assert.equal((await p.exited).signal, 'SIGKILL');
  const seen: string[] = [];
  const w = new Worker(DSN!, 'n_kill', async (t) => { await callProvider(db, t); return new Success({ outcome: 'sent' }); }, {
    name: 'kill-2', logger: quiet, wait: 1000,
    reconcile: async (t) => {
      seen.push(`${t.attempt}:${t.priorOutcome}`);
      const calls = await one('SELECT calls FROM node_provider WHERE task_key = $1', [t.key]);
      return calls ? new Success({ outcome: 'reconciled' }) : null;
    },
  });
  const run = w.run();
  await until('taken over and reconciled', () => w.counters.succeeded === 1);
  w.stop();
  await run;
  assert.deepEqual(seen, ['2:unknown']);
  assert.equal(await one(`SELECT calls FROM node_provider WHERE task_key = 'k:1'`), 1, 'the fake provider was called once');
  assert.equal(await ledger('n_kill', 'k:1'), '1:lease_expired:- 2:succeeded:-');
  assert.equal(await one(`SELECT outcome FROM ntask.task WHERE queue = 'n_kill'`), 'reconciled');
});

test('SIGSTOP past the lease: stale on resume, one success', { skip, timeout: T }, async () => {
  await queue('n_stop');
  await enqueue(db, 'n_stop', 's:1', { kind: 'provider', holdMs: 4000 });
  const p = startProc({ PROC_QUEUE: 'n_stop', PROC_NAME: 'stop-1', PROC_LEASE_MS: '1500' });
  await until('the provider took effect', async () => Number(await one(`SELECT count(*) FROM node_provider WHERE task_key = 's:1'`)) === 1);
  p.child.kill('SIGSTOP');
  const w = new Worker(DSN!, 'n_stop', async () => new Success({ outcome: 'sent-again' }), {
    name: 'stop-2', logger: quiet, wait: 1000,
    reconcile: async (t) => (await one('SELECT calls FROM node_provider WHERE task_key = $1', [t.key])) ? new Success({ outcome: 'reconciled' }) : null,
  });
  const run = w.run();
  try {
    await until('taken over', () => w.counters.succeeded === 1);
  } finally {
    p.child.kill('SIGCONT');
  }
  w.stop();
  await run;
  // the resumed worker's heartbeat (or its report) finds the task gone
  await until('the resumed worker noticed', () => /answered (NULL \(lease lost\)|stale)/.test(p.err.join('')));
  p.child.kill('SIGTERM');
  const ex = await p.exited;
  assert.equal(ex.code, 0, p.err.join(''));
  const c = p.lines.find((l) => l.event === 'exit').counters;
  assert.equal(c.succeeded, 0, 'the stale worker reported no success');
  assert.ok(c.heartbeatsLost + c.stale >= 1, `surfaced: ${JSON.stringify(c)}`);
  assert.equal(await ledger('n_stop', 's:1'), '1:lease_expired:- 2:succeeded:-');
  assert.equal(await one(`SELECT outcome FROM ntask.task WHERE queue = 'n_stop'`), 'reconciled');
});

test('claim-stop race: a task the waiting claim brings after stop() is released, none stranded', { skip, timeout: T }, async () => {
  await queue('n_race');
  let handled = 0;
  const w = new Worker(DSN!, 'n_race', async () => { handled++; }, { name: 'race-1', logger: quiet, wait: 20000 });
  const run = w.run();
  await claimWaiting();
  w.stop();
  // the claim is not cancelled: it is still waiting, and the enqueue wakes it
  await enqueue(db, 'n_race', 'r:1', {});
  await run;
  assert.equal(handled, 0);
  assert.deepEqual([w.counters.claimed, w.counters.released], [1, 1]);
  assert.equal(await ledger('n_race', 'r:1'), '1:released:-');
  assert.deepEqual(await q(`SELECT state, lease_owner, attempts - max_attempts + 3 AS spent FROM ntask.task WHERE queue = 'n_race'`),
    [{ state: 'ready', lease_owner: null, spent: 0 }]);
});

test('pgbouncer in transaction mode: claims, heartbeats, receipts in business transactions', { timeout: T, skip: skip || (process.env.NTASK_BOUNCER_DSN ? false : 'NTASK_BOUNCER_DSN is not set') }, async () => {
  await queue('n_pool', '2 seconds');
  const pool = new Pool({ connectionString: process.env.NTASK_BOUNCER_DSN, max: 4 });
  pool.on('error', () => undefined);
  const c = await pool.connect();
  await c.query('BEGIN');
  await enqueueMany(c, 'n_pool', Array.from({ length: 20 }, (_v, i) => ({ key: `b:${i}`, payload: { i } })));
  await c.query('COMMIT');
  c.release();
  const receipts: string[] = [];
  const w = new Worker(pool, 'n_pool', async (t: Task<{ i: number }>) => {
    if (t.payload.i === 0) await hold(t, 3000); // outlives the 2 s lease: heartbeats through the pool
    const tx = await pool.connect();
    try {
      await tx.query('BEGIN');
      const a = await t.receipt(tx, { i: t.payload.i });
      if (a === 'applied') await tx.query('INSERT INTO node_business VALUES ($1, $2, $3)', [t.id, t.token, 'pool']);
      await tx.query('COMMIT');
      receipts.push(a);
    } catch (e) {
      await tx.query('ROLLBACK');
      throw e;
    } finally {
      tx.release();
    }
    return new Success();
  }, { name: 'pool-1', logger: quiet, concurrency: 3, wait: 1000 });
  const run = w.run();
  await until('20 succeeded', () => w.counters.succeeded === 20);
  w.stop();
  await run;
  await pool.end();
  assert.equal(receipts.filter((a) => a === 'applied').length, 20);
  assert.equal(await one(`SELECT count(*) FROM node_business b JOIN ntask.task t USING (task_id) WHERE t.queue = 'n_pool'`), '20');
  assert.equal(await one(`SELECT count(*) FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
    WHERE t.queue = 'n_pool' AND a.result <> 'succeeded'`), '0', 'no lease lost, no retry');
  assert.equal(w.counters.heartbeatsLost + w.counters.stale, 0);
});

test('server restart mid-wait: the worker reconnects and goes on', { timeout: T, skip: skip || (process.env.NTASK_PG_CTL ? false : 'NTASK_PG_CTL is not set') }, async () => {
  await queue('n_restart');
  const w = new Worker(DSN!, 'n_restart', async () => new Success({ outcome: 'after-restart' }),
    { name: 'restart-1', logger: quiet, wait: 5000 });
  const run = w.run();
  await claimWaiting();
  await db.end();
  execFileSync(process.env.NTASK_PG_CTL!, ['-D', process.env.NTASK_PGDATA!, '-l', process.env.NTASK_PG_LOG!,
    '-m', 'fast', '-w', 'restart'], { stdio: 'ignore' });
  db = new Client({ connectionString: DSN });
  await db.connect();
  await enqueue(db, 'n_restart', 'x:1', {});
  await until('the task done after the restart', () => w.counters.succeeded === 1, 60000);
  w.stop();
  await run;
  assert.equal(await ledger('n_restart', 'x:1'), '1:succeeded:-');
  assert.equal(await one(`SELECT outcome FROM ntask.task WHERE queue = 'n_restart'`), 'after-restart');
});
