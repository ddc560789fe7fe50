#!/usr/bin/env node
// The N9 push service on ntask's Node.js library (clients/node).
//
//   export DATABASE_URL=postgresql://app@127.0.0.1/app
//   export PUSH_PROVIDER_URL=http://127.0.0.1:8099   # python3 examples/fake_provider.py
//   node examples/node/push_service.js produce --count 20
//   node examples/node/push_service.js work --name W1
//
// produce: writes chat messages and, in the same transaction, one notify
// task each (queue 'push', key notify:<user>:<device>:<message>:v1); a key
// that exists already is not enqueued twice (created: false).
//
// work: a Worker of the library on queue 'push'. For each task it reads the
// message, marks the attempt invoked, sends it to the provider with the task
// key as the Idempotency-Key, and writes push_delivery with the task's
// receipt in one transaction. What the provider answers becomes the report:
// 429 transient (retry at its Retry-After), 410 permanent (repair), a 5xx or
// no answer unknown (it may have taken effect). An attempt that follows an
// unknown one (priorOutcome 'unknown': the answer was lost, or a worker died
// after invoked) first asks the provider by the idempotency key (reconcile)
// and sends only if it has not got it. SIGTERM or Ctrl-C: graceful (running
// sends finish, what was never invoked is released); a second one: at once.
'use strict';

const { Pool } = require('pg');
const ntask = require('@ntask/client');

const QUEUE = 'push';
const DSN = process.env.DATABASE_URL || '';
const PROVIDER = process.env.PUSH_PROVIDER_URL || 'http://127.0.0.1:8099';
const SEND_TIMEOUT = 5000; // ms; the fake provider's d-slow takes 3 s
// the fake provider's test devices (examples/fake_provider.py): how a send goes
const DEVICES = ['d-slow-1', 'd-ok-1', 'd-429-1', 'd-ok-2', 'd-500-1',
  'd-ok-3', 'd-hang-1', 'd-ok-4', 'd-ok-5', 'd-gone-1'];

// ------------------------------------------------------------- producer

async function produce(count, start) {
  // node-postgres sends unnamed statements: safe behind pgbouncer in
  // transaction pooling mode (never pass `name` to query())
  const pool = new Pool({ connectionString: DSN, max: 1 });
  let created = 0;
  try {
    for (let n = start; n < start + count; n++) {
      const msg = `m-${n}`;
      const user = `u-${n % 3}`;
      const device = DEVICES[(n - 1) % DEVICES.length];
      const key = `notify:${user}:${device}:${msg}:v1`;
      const c = await pool.connect();
      try { // the message and its task: both or neither
        await c.query('BEGIN');
        await c.query('INSERT INTO push_message (id, user_id, device, body) VALUES ($1, $2, $3, $4) '
          + 'ON CONFLICT (id) DO NOTHING', [msg, user, device, `hello ${user}, message ${n}`]);
        const e = await ntask.enqueue(c, QUEUE, key, { message: msg, version: 1, device });
        await c.query('COMMIT');
        if (e.created) created++;
      } catch (err) {
        await c.query('ROLLBACK');
        throw err;
      } finally {
        c.release();
      }
    }
  } finally {
    await pool.end();
  }
  console.log(`produce: ${count} messages, ${created} tasks created, ${count - created} already there`);
}

// ------------------------------------------------------------- the provider

// POST the push; the typed failure says what is known of its effect
async function send(key, device, body) {
  let r;
  try {
    r = await fetch(`${PROVIDER}/v1/push`, {
      method: 'POST',
      headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ device, body }),
      signal: AbortSignal.timeout(SEND_TIMEOUT),
    });
  } catch (e) {
    if (e.cause && e.cause.code === 'ECONNREFUSED') throw new ntask.Transient('provider unreachable: not sent');
    throw new ntask.Unknown(`no answer (${e.name}): it may have taken effect`);
  }
  if (r.status === 200) return (await r.json()).id;
  await r.body?.cancel();
  if (r.status === 429) { // not taken; the provider says when
    const wait = Number(r.headers.get('retry-after') || 1);
    throw new ntask.Transient('429 rate limited', { retryAt: new Date(Date.now() + wait * 1000) });
  }
  if ([400, 404, 410].includes(r.status)) throw new ntask.Permanent(`${r.status} from the provider`);
  throw new ntask.Unknown(`${r.status} from the provider: it may have taken effect`);
}

// the provider's id for this idempotency key, or null
async function lookup(key) {
  const r = await fetch(`${PROVIDER}/v1/push/${encodeURIComponent(key)}`,
    { signal: AbortSignal.timeout(SEND_TIMEOUT) });
  if (r.status === 404) { await r.body?.cancel(); return null; }
  if (r.status !== 200) throw new ntask.Unknown(`lookup: ${r.status}: still not known`);
  return (await r.json()).id;
}

// ------------------------------------------------------------- worker

let worker;

function say(task, what) {
  console.log(`${worker.name}: ${task.key} attempt ${task.attempt}: ${what}`);
}

// the business write with its receipt, in one transaction
async function record(task, providerId, via) {
  const c = await worker.pool.connect();
  let answer;
  try {
    await c.query('BEGIN');
    answer = await task.receipt(c, { provider_id: providerId });
    if (answer === 'applied') {
      await c.query('INSERT INTO push_delivery (task_key, message_id, provider_id, via, attempt, token, worker) '
        + 'VALUES ($1, $2, $3, $4, $5, $6, $7)',
      [task.key, task.payload.message, providerId, via, task.attempt, task.token, worker.name]);
    }
    await c.query(answer === 'applied' || answer === 'duplicate' ? 'COMMIT' : 'ROLLBACK');
  } catch (e) {
    await c.query('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
  // stale: not ours any more, report nothing
  if (answer === 'stale') throw new ntask.Lost(`task ${task.id}: receipt answered stale`);
  if (answer === 'conflict') throw new ntask.Permanent('receipt conflict: another delivery was recorded');
  return new ntask.Success({ outcome: 'provider_accepted', result: { provider_id: providerId, via } });
}

// priorOutcome 'unknown': an earlier attempt may have sent it
async function reconcile(task) {
  const providerId = await lookup(task.key);
  if (providerId === null) {
    say(task, 'reconcile: the provider has not got it, sending');
    return null;
  }
  say(task, `reconcile: the provider has it (${providerId}), not sending again`);
  return record(task, providerId, 'reconcile');
}

async function handle(task) {
  if (task.priorOutcome === 'committed') {
    say(task, 'an earlier attempt committed its delivery');
    return new ntask.Success({ outcome: 'provider_accepted', result: { via: 'committed' } });
  }
  const p = task.payload;
  const m = await worker.pool.query('SELECT body FROM push_message WHERE id = $1 AND version = $2',
    [p.message, p.version]);
  if (m.rows.length === 0) throw new ntask.Permanent(`message ${p.message} v${p.version} is gone`);
  await task.invoked(); // from here a crash is 'unknown', not 'not sent'
  let providerId;
  try {
    providerId = await send(task.key, p.device, m.rows[0].body);
  } catch (e) {
    if (e instanceof ntask.TaskFailure) say(task, `${e.errorClass}: ${e.message}`);
    throw e;
  }
  say(task, `sent, provider id ${providerId}`);
  return record(task, providerId, 'send');
}

async function work(name, concurrency) {
  worker = new ntask.Worker(DSN, QUEUE, handle, {
    name, concurrency, wait: 5000, shutdownGrace: 10000, invoked: 'manual', reconcile,
    onLost: (task, answer, where) => say(task, `lost (${where}: ${answer}): not reporting`),
  });
  console.log(`${worker.name}: working queue ${QUEUE}, provider ${PROVIDER}`);
  await ntask.runUntilSignal(worker); // SIGTERM / Ctrl-C: graceful; a second: at once
  console.log(`${worker.name}: stopped ${JSON.stringify(worker.counters)}`);
}

function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  const opt = (flag, dflt) => {
    const i = rest.indexOf(flag);
    return i >= 0 && i + 1 < rest.length ? rest[i + 1] : dflt;
  };
  if (!DSN) throw new Error('set DATABASE_URL');
  if (cmd === 'produce') return produce(Number(opt('--count', 20)), Number(opt('--start', 1)));
  if (cmd === 'work') return work(opt('--name', undefined), Number(opt('--concurrency', 4)));
  throw new Error('usage: push_service.js produce [--count N] [--start N] | work [--name W] [--concurrency N]');
}

Promise.resolve().then(main).catch((e) => { console.error(e.message || e); process.exit(1); });
