// Unit tests: no server. The worker runs against a fake pool that answers
// each ntask function as the test says and records the calls.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Awaiting, classify, enqueue, enqueueMany, isTransportError, Lost, Permanent, result, sqlFunctions, Success,
  Task, Transient, Unknown, Worker,
} from '../src/index';
import { interval } from '../src/sql';

type Call = { fn: string; text: string; values: unknown[] };
type Script = (c: Call, pool: FakePool) => Promise<any[]> | any[];

class FakePool {
  calls: Call[] = [];
  constructor(private script: Script) {}
  async query(text: string, values: unknown[] = []) {
    const m = /(ntask_[a-z_]+)\(/.exec(text);
    const c = { fn: m ? m[1] : text, text, values };
    this.calls.push(c);
    return { rows: await this.script(c, this) };
  }
  fns(name: string) { return this.calls.filter((c) => c.fn === name); }
  on() { return this; }
  off() { return this; }
  connect() { throw new Error('not in the unit tests'); }
  end() { return Promise.resolve(); }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const quiet = { info() {}, warn() {}, error() {} };

function row(id: number, extra: Record<string, unknown> = {}) {
  const now = Date.now();
  return {
    task_id: String(id), task_key: `k${id}`, payload: { n: id }, attempt: 1, token: '7',
    lease_until: new Date(now + 30000), server_now: new Date(now), prior_outcome: null, context: null, ...extra,
  };
}

/** A pool whose claim hands out `rows` once, then waits 20 ms and claims nothing. */
function claimsOnce(rows: any[], answers: Record<string, (c: Call) => any[] | Promise<any[]>> = {}) {
  let given = false;
  return new FakePool(async (c) => {
    if (answers[c.fn]) return answers[c.fn](c);
    switch (c.fn) {
      case 'ntask_claim':
        if (!given) { given = true; return rows; }
        await sleep(20);
        return [];
      case 'ntask_invoked': return [{ answer: 'applied' }];
      case 'ntask_heartbeat': return [{ lease_until: new Date(Date.now() + 30000) }];
      case 'ntask_transition': return [{ result: 'applied', state: 'succeeded', run_at: null }];
      case 'ntask_release': return [{ answer: 'applied' }];
      default: throw new Error(`unexpected ${c.fn}`);
    }
  });
}

async function until(cond: () => boolean, ms = 5000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await sleep(5);
  }
}

test('classify: Success, plain return, typed failures', () => {
  assert.deepEqual(classify(new Success({ outcome: 'sent', result: { id: 1 } }), false, true),
    { toState: 'succeeded', errorClass: null, detail: null, retryAt: null, outcome: 'sent', result: { id: 1 } });
  assert.equal(classify(undefined, false, false).toState, 'succeeded');
  assert.equal(classify({ some: 'value' }, false, true).toState, 'succeeded');
  const at = new Date('2030-01-01T00:00:00Z');
  const t = classify(new Transient('503', { retryAt: at, detail: { http: 503 } }), true, true);
  assert.deepEqual([t.toState, t.errorClass, t.retryAt, t.detail], ['retry_wait', 'transient', at, { message: '503', http: 503 }]);
  const p = classify(new Permanent('400'), false, true);
  assert.deepEqual([p.toState, p.errorClass], ['repair_required', 'permanent']);
  const u = classify(new Unknown('timeout'), true, false);
  assert.deepEqual([u.toState, u.errorClass], ['retry_wait', 'unknown']);
});

test('classify: an unclassified error is unknown after invoked, else transient', () => {
  const before = classify(new TypeError('boom'), true, false);
  assert.deepEqual([before.toState, before.errorClass, before.detail], ['retry_wait', 'transient', { message: 'boom', error: 'TypeError' }]);
  const after = classify(new Error('boom'), true, true);
  assert.deepEqual([after.toState, after.errorClass], ['retry_wait', 'unknown']);
  assert.equal(classify('a string', true, true).detail!.message, 'a string');
});

test('isTransportError: connection errors are retried, server answers are not', () => {
  assert.equal(isTransportError(new Error('Connection terminated unexpectedly')), true);
  assert.equal(isTransportError(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })), true);
  assert.equal(isTransportError(Object.assign(new Error('x'), { code: 'EPIPE' })), true);
  assert.equal(isTransportError({ severity: 'FATAL', code: '57P01', message: 'terminating' }), true);
  assert.equal(isTransportError({ severity: 'ERROR', code: '08006', message: '' }), true);
  assert.equal(isTransportError({ severity: 'ERROR', code: '22023', message: '' }), false);
  assert.equal(isTransportError({ severity: 'ERROR', code: 'NT003', message: '' }), false);
});

test('interval: milliseconds to an interval parameter', () => {
  assert.equal(interval(null), null);
  assert.equal(interval(undefined), null);
  assert.equal(interval(1500), '1500 milliseconds');
  assert.throws(() => interval(-1), RangeError);
  assert.throws(() => interval(NaN), RangeError);
});

test('enqueue: named arguments, only the options given; payload as JSON', async () => {
  const pool = new FakePool(() => [{ task_id: '42', created: true, state: 'ready', outcome: null, result: null }]);
  const e = await enqueue(pool, 'q', 'k1', [1, 2]);
  assert.deepEqual(e, { taskId: '42', created: true, state: 'ready', outcome: null, result: null });
  assert.equal(pool.calls[0].text,
    'SELECT task_id, created, state, outcome, result FROM ntask_enqueue(queue => $1::text, task_key => $2::text, payload => $3::jsonb)');
  assert.deepEqual(pool.calls[0].values, ['q', 'k1', '[1,2]']);
  const at = new Date();
  await enqueue(pool, 'q', 'k2', {}, { runAt: at, priority: 5, dependsOn: ['a', 'b:c'], traceparent: 'tp' });
  assert.match(pool.calls[1].text, /run_at => \$4::timestamptz, priority => \$5::integer, traceparent => \$6::text, depends_on => \$7::text\[\]\)$/);
  assert.deepEqual(pool.calls[1].values.slice(3), [at, 5, 'tp', ['a', 'b:c']]);
});

test('enqueueMany: one statement, payloads as JSON, partition keys only when given', async () => {
  const pool = new FakePool(() => [
    { task_id: '1', created: true, state: 'ready', outcome: null, result: null },
    { task_id: '2', created: false, state: 'succeeded', outcome: 'sent', result: { x: 1 } }]);
  const r = await enqueueMany(pool, 'q', [{ key: 'a', payload: [1] }, { key: 'b' }]);
  assert.deepEqual(r.map((e) => [e.taskId, e.created, e.outcome]), [['1', true, null], ['2', false, 'sent']]);
  assert.deepEqual(pool.calls[0].values, ['q', ['a', 'b'], ['[1]', '{}']]);
  assert.doesNotMatch(pool.calls[0].text, /partition_keys/);
  await enqueueMany(pool, 'q', [{ key: 'a', partitionKey: 'p' }, { key: 'b' }]);
  assert.match(pool.calls[1].text, /partition_keys => \$4::text\[\]/);
  assert.deepEqual(pool.calls[1].values[3], ['p', null]);
});

test('result: null when there is no such task', async () => {
  assert.equal(await result(new FakePool(() => []), 'q', 'k'), null);
  const at = new Date();
  assert.deepEqual(await result(new FakePool(() => [{ state: 'succeeded', outcome: 'o', result: 1, finished_at: at }]), 'q', 'k'),
    { state: 'succeeded', outcome: 'o', result: 1, finishedAt: at });
});

test('sqlFunctions: the functions and argument names the library sends', () => {
  const f = sqlFunctions();
  assert.deepEqual(Object.keys(f).sort(), ['ntask_await', 'ntask_checkpoint', 'ntask_claim', 'ntask_enqueue',
    'ntask_enqueue_many', 'ntask_heartbeat', 'ntask_invoked', 'ntask_receipt', 'ntask_release', 'ntask_result',
    'ntask_transition']);
  assert.deepEqual(f.ntask_claim, ['queue', 'worker', 'max_tasks', 'lease', 'wait']);
  assert.ok(f.ntask_enqueue.includes('on_parent_failed'));
  assert.ok(f.ntask_transition.includes('result'));
});

test('worker: a task the claim brings after stop() is released, never handled', async () => {
  let stopNow!: () => void;
  const stopped = new Promise<void>((r) => { stopNow = r; });
  let handled = 0;
  const pool = claimsOnce([], {
    // the waiting claim returns its task only after the stop was requested
    ntask_claim: async () => { await stopped; return [row(1)]; },
  });
  const w = new Worker(pool as any, 'q', async () => { handled++; }, { logger: quiet, wait: 1000 });
  const done = w.run();
  await until(() => pool.fns('ntask_claim').length === 1);
  w.stop();
  stopNow();
  await done;
  assert.equal(handled, 0);
  assert.deepEqual(pool.fns('ntask_release').map((c) => c.values), [['1', '7', null]]);
  assert.equal(pool.fns('ntask_transition').length, 0);
  assert.equal(pool.fns('ntask_claim').length, 1, 'no claim after the stop');
  assert.equal(w.counters.claimed, 1);
  assert.equal(w.counters.released, 1);
});

test('worker: invoked before the handler (auto); success reported with the token', async () => {
  const order: string[] = [];
  const pool = claimsOnce([row(3)], {
    ntask_invoked: () => { order.push('invoked'); return [{ answer: 'applied' }]; },
  });
  const w = new Worker(pool as any, 'q', async (t) => {
    order.push(`handler ${t.id} ${t.key} ${JSON.stringify(t.payload)}`);
    return new Success({ outcome: 'sent', result: { ok: true } });
  }, { logger: quiet });
  const done = w.run();
  await until(() => w.counters.succeeded === 1);
  w.stop();
  await done;
  assert.deepEqual(order, ['invoked', 'handler 3 k3 {"n":3}']);
  assert.deepEqual(pool.fns('ntask_transition')[0].values, ['3', '7', 'succeeded', null, null, null, 'sent', '{"ok":true}']);
});

test('worker: a handler error is unknown after invoked (auto), transient before (manual)', async () => {
  for (const [mode, cls] of [['auto', 'unknown'], ['manual', 'transient']] as const) {
    const pool = claimsOnce([row(4)]);
    const w = new Worker(pool as any, 'q', async () => { throw new Error('provider down'); }, { logger: quiet, invoked: mode });
    const done = w.run();
    await until(() => pool.fns('ntask_transition').length === 1);
    w.stop();
    await done;
    const v = pool.fns('ntask_transition')[0].values;
    assert.deepEqual([v[2], v[3]], ['retry_wait', cls], mode);
    assert.deepEqual(JSON.parse(v[4] as string), { message: 'provider down', error: 'Error' });
    assert.equal(pool.fns('ntask_invoked').length, mode === 'auto' ? 1 : 0);
  }
});

test('worker: a NULL heartbeat aborts the handler, surfaces, reports nothing', async () => {
  const lost: string[] = [];
  const pool = claimsOnce([row(5)], { ntask_heartbeat: () => [{ lease_until: null }] });
  let aborted: unknown = null;
  const w = new Worker(pool as any, 'q', (t) => new Promise((resolve) => {
    t.signal.addEventListener('abort', () => { aborted = t.signal.reason; resolve(undefined); });
  }), { logger: quiet, heartbeatEvery: 10, onLost: (t, a, where) => lost.push(`${t.id} ${a} ${where}`) });
  const done = w.run();
  await until(() => aborted !== null);
  await until(() => w.inFlight === 0);
  w.stop();
  await done;
  assert.ok(aborted instanceof Lost);
  assert.deepEqual(lost, ['5 heartbeat heartbeat']);
  assert.equal(w.counters.heartbeatsLost, 1);
  assert.equal(pool.fns('ntask_transition').length, 0);
});

test('worker: a heartbeat answered NULL after the report is not a lost lease', async () => {
  // the timer's heartbeat reaches the server after the transition (the
  // worker's own report): NULL then is not a loss (issue 50: seen in
  // examples/node)
  const lost: string[] = [];
  let reported!: () => void;
  const reporting = new Promise<void>((r) => { reported = r; });
  const pool = claimsOnce([row(6)], {
    ntask_heartbeat: async () => { await reporting; return [{ lease_until: null }]; },
    ntask_transition: () => { reported(); return [{ result: 'applied', state: 'succeeded', run_at: null }]; },
  });
  const w = new Worker(pool as any, 'q', async () => {
    await until(() => pool.fns('ntask_heartbeat').length > 0);
  }, { logger: quiet, heartbeatEvery: 10, onLost: (t, a, where) => lost.push(`${t.id} ${a} ${where}`) });
  const done = w.run();
  await until(() => w.counters.succeeded === 1);
  await sleep(50);
  w.stop();
  await done;
  assert.deepEqual(lost, []);
  assert.equal(w.counters.heartbeatsLost, 0);
});

test('worker: a report whose connection died is retried with the same token', async () => {
  let n = 0;
  const pool = claimsOnce([row(6)], {
    ntask_transition: () => {
      n++;
      if (n === 1) throw new Error('Connection terminated unexpectedly');
      return [{ result: n === 2 ? 'duplicate' : 'applied', state: 'succeeded', run_at: null }];
    },
  });
  const w = new Worker(pool as any, 'q', async () => undefined, { logger: quiet });
  const done = w.run();
  await until(() => w.counters.succeeded === 1);
  w.stop();
  await done;
  assert.deepEqual(pool.fns('ntask_transition').map((c) => c.values.slice(0, 3)), [['6', '7', 'succeeded'], ['6', '7', 'succeeded']]);
});

test('worker: stale and conflict answers are surfaced, never retried', async () => {
  for (const answer of ['stale', 'conflict']) {
    const lost: string[] = [];
    const pool = claimsOnce([row(8)], { ntask_transition: () => [{ result: answer, state: 'ready', run_at: null }] });
    const w = new Worker(pool as any, 'q', async () => undefined, { logger: quiet, onLost: (_t, a, where) => lost.push(`${a} ${where}`) });
    const done = w.run();
    await until(() => lost.length === 1);
    await until(() => w.inFlight === 0);
    w.stop();
    await done;
    assert.deepEqual(lost, [`${answer} transition`]);
    assert.equal(pool.fns('ntask_transition').length, 1);
    assert.equal(w.counters.succeeded, 0);
    assert.equal((w.counters as any)[answer], 1);
  }
});

test('worker: invoked answering stale: the handler never runs', async () => {
  let handled = 0;
  const pool = claimsOnce([row(9)], { ntask_invoked: () => [{ answer: 'stale' }] });
  const w = new Worker(pool as any, 'q', async () => { handled++; }, { logger: quiet });
  const done = w.run();
  await until(() => w.counters.stale === 1);
  w.stop();
  await done;
  assert.equal(handled, 0);
  assert.equal(pool.fns('ntask_transition').length, 0);
});

test('worker: prior outcome unknown: reconcile first; found: reported, the handler not run', async () => {
  let handled = 0;
  let asked = 0;
  const pool = claimsOnce([row(10, { prior_outcome: 'unknown', attempt: 2 })]);
  const w = new Worker(pool as any, 'q', async () => { handled++; }, {
    logger: quiet, reconcile: async (t) => { asked++; assert.equal(t.priorOutcome, 'unknown'); return new Success({ outcome: 'reconciled' }); },
  });
  const done = w.run();
  await until(() => w.counters.succeeded === 1);
  w.stop();
  await done;
  assert.deepEqual([asked, handled], [1, 0]);
  assert.equal(pool.fns('ntask_invoked').length, 0);
  assert.equal(pool.fns('ntask_transition')[0].values[6], 'reconciled');
});

test('worker: reconcile not found: the handler runs', async () => {
  let handled = 0;
  const pool = claimsOnce([row(11, { prior_outcome: 'unknown', attempt: 2 })]);
  const w = new Worker(pool as any, 'q', async () => { handled++; }, { logger: quiet, reconcile: () => null });
  const done = w.run();
  await until(() => w.counters.succeeded === 1);
  w.stop();
  await done;
  assert.equal(handled, 1);
});

test('worker: release and Awaiting from the handler: nothing reported', async () => {
  const pool = claimsOnce([row(12), row(13)], { ntask_await: () => [{ answer: 'applied' }] });
  const w = new Worker(pool as any, 'q', async (t: Task) => {
    if (t.id === '12') { await t.release(5000); return undefined; }
    await t.awaitSignal('sig:1', 60000);
    return Awaiting;
  }, { logger: quiet });
  const done = w.run();
  await until(() => pool.fns('ntask_await').length === 1 && pool.fns('ntask_release').length === 1 && w.inFlight === 0);
  w.stop();
  await done;
  assert.deepEqual(pool.fns('ntask_release')[0].values, ['12', '7', '5000 milliseconds']);
  assert.deepEqual(pool.fns('ntask_await')[0].values, ['13', '7', 'sig:1', '60000 milliseconds', 'ready']);
  assert.equal(pool.fns('ntask_transition').length, 0);
  assert.equal(w.counters.released, 1);
});

test('worker: past the shutdown grace, a never-invoked task is released, an invoked one left', async () => {
  const pool = claimsOnce([row(14), row(15)]);
  const w = new Worker(pool as any, 'q', (t: Task) => new Promise((resolve) => {
    const go = t.id === '15' ? t.invoked() : Promise.resolve();
    go.then(() => t.signal.addEventListener('abort', () => resolve(undefined)));
  }), { logger: quiet, invoked: 'manual', shutdownGrace: 50 });
  const done = w.run();
  await until(() => pool.fns('ntask_invoked').length === 1);
  w.stop();
  await done;
  assert.deepEqual(pool.fns('ntask_release').map((c) => c.values[0]), ['14']);
  assert.equal(pool.fns('ntask_transition').length, 0, 'nothing reported after the grace');
});

test('worker: a second stop returns at once, even during a waiting claim', async () => {
  let answer!: (rows: any[]) => void;
  let claimDone = false;
  const pool = claimsOnce([], {
    ntask_claim: () => new Promise<any[]>((r) => { answer = (rows) => { claimDone = true; r(rows); }; }),
  });
  const w = new Worker(pool as any, 'q', async () => undefined, { logger: quiet });
  const done = w.run();
  await until(() => pool.fns('ntask_claim').length === 1);
  w.stop();
  w.stop();
  await done;
  assert.equal(claimDone, false, 'run() resolved while the claim was still waiting');
  // the claim, never cancelled, returns a task later: it is released
  answer([row(16)]);
  await until(() => pool.fns('ntask_release').length === 1);
  assert.deepEqual(pool.fns('ntask_release')[0].values, ['16', '7', null]);
});
