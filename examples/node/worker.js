#!/usr/bin/env node
// An ntask worker in Node.js (node-postgres, `npm ci` in examples/node).
//
//   node worker.js "postgresql://app_jobs@127.0.0.1/app" W-node-1 [queue]
//
// The loop (docs/guide.md "Using ntask from Python / Node / Java"):
//   1. claim one task in its own short transaction (autocommit);
//   2. prior_outcome 'committed': an earlier attempt committed the business
//      write, only report success; 'unknown': an earlier attempt may have
//      called out, so ask the provider (by task key) before calling again;
//   3. ntask_invoked just before the call ('stale': do not call);
//   4. the call, heartbeating while it runs long;
//   5. the business write and ntask_receipt in ONE transaction;
//   6. ntask_transition with the error class that says what is known:
//      transient (it did not take effect), permanent (never will),
//      unknown (it may have: a timeout after sending).
// SIGTERM: a task claimed and not yet invoked is handed back
// (ntask_release), one being worked is finished, then the worker exits 0.
//
// The "provider" is the table example_provider (examples/schema.sql); the
// payload's "kind" says how it answers (see examples/python/worker.py).
// Replace callProvider() with your own call.  Queries carry no `name`, so
// they are unnamed statements: safe behind pgbouncer in transaction mode.
'use strict';

const { Client } = require('pg');

const LEASE = '5 seconds';
let stopping = false;
process.on('SIGTERM', () => { stopping = true; });

class Lost extends Error {}
class Outcome extends Error {
  constructor(errorClass, detail) { super(errorClass); this.errorClass = errorClass; this.detail = detail; }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function providerLookup(db, taskKey) {
  const r = await db.query('SELECT token FROM example_provider WHERE task_key = $1', [taskKey]);
  return r.rows.length ? r.rows[0].token : null;
}

async function callProvider(db, task, heartbeat) {
  const kind = task.payload.kind || 'ok';
  if (kind === 'transient' && task.attempt === 1) throw new Outcome('transient', { http_status: 503 });
  if (kind === 'permanent') throw new Outcome('permanent', { http_status: 400 });
  if (kind === 'slow') {
    for (let i = 0; i < 6; i++) { await sleep(1000); await heartbeat(); }
  }
  await db.query(
    'INSERT INTO example_provider (task_key, task_id, token, worker) VALUES ($1, $2, $3, $4) '
    + 'ON CONFLICT (task_key) DO UPDATE SET calls = example_provider.calls + 1',
    [task.task_key, task.task_id, task.token, task.worker]);
  if (kind === 'unknown' && task.attempt === 1) throw new Outcome('unknown', { timeout_ms: 5000 });
  return providerLookup(db, task.task_key);
}

async function transition(db, task, toState, errorClass = null, detail = null, outcome = null, errorStage = null) {
  const r = await db.query(
    'SELECT result, state FROM ntask_transition($1, $2, $3, $4, $5::jsonb, outcome => $6, error_stage => $7)',
    [task.task_id, task.token, toState, errorClass, detail === null ? null : JSON.stringify(detail),
      outcome, errorStage]);
  const { result } = r.rows[0];
  if (result !== 'applied' && result !== 'duplicate') {
    console.error(`${task.worker}: transition of ${task.task_id} answered ${result}`);
  }
  return result;
}

async function work(db, task) {
  const heartbeat = async () => {
    const r = await db.query('SELECT ntask_heartbeat($1, $2) AS until', [task.task_id, task.token]);
    if (r.rows[0].until === null) throw new Lost();
  };
  if (task.prior_outcome === 'committed') {
    return transition(db, task, 'succeeded', null, null, 'already_committed');
  }
  let effect = null;
  if (task.prior_outcome === 'unknown') effect = await providerLookup(db, task.task_key);
  if (effect === null) {
    const inv = await db.query('SELECT ntask_invoked($1, $2) AS r', [task.task_id, task.token]);
    if (inv.rows[0].r === 'stale') return 'stale';
    try {
      effect = await callProvider(db, task, heartbeat);
    } catch (e) {
      if (!(e instanceof Outcome)) throw e;
      if (e.errorClass === 'permanent') return transition(db, task, 'repair_required', 'permanent', e.detail);
      return transition(db, task, 'retry_wait', e.errorClass, e.detail, null,
        e.errorClass === 'unknown' ? 'response_lost' : null);
    }
  }

  // the business write, exactly once per task, with its receipt
  let receipt;
  await db.query('BEGIN');
  try {
    const r = await db.query('SELECT ntask_receipt($1, $2, $3::jsonb) AS r',
      [task.task_id, task.token, JSON.stringify({ provider_token: Number(effect) })]);
    receipt = r.rows[0].r;
    if (receipt === 'applied') {
      await db.query(
        'INSERT INTO example_business (task_id, token, worker, provider_token) VALUES ($1, $2, $3, $4)',
        [task.task_id, task.token, task.worker, effect]);
    }
    await db.query('COMMIT');
  } catch (e) {
    await db.query('ROLLBACK');
    throw e;
  }
  if (receipt === 'stale') return 'stale';
  if (receipt === 'conflict') {
    return transition(db, task, 'repair_required', 'permanent', { reason: 'receipt conflict' });
  }
  return transition(db, task, 'succeeded', null, null, 'business_committed');
}

async function main() {
  const [conn, worker, queue = 'examples'] = process.argv.slice(2);
  const db = new Client({ connectionString: conn });
  await db.connect();
  let done = 0;
  while (!stopping) {
    const r = await db.query(
      'SELECT task_id, task_key, payload, attempt, token, prior_outcome '
      + 'FROM ntask_claim($1, $2, 1, $3::interval)', [queue, worker, LEASE]);
    if (r.rows.length === 0) { await sleep(50); continue; }
    // bigint columns arrive as strings: keep them as they are for SQL
    const task = { ...r.rows[0], worker };
    if (stopping) {
      // claimed, not started: hand it back (never invoked: no attempt spent)
      await db.query('SELECT ntask_release($1, $2)', [task.task_id, task.token]);
      break;
    }
    try {
      await work(db, task);
    } catch (e) {
      if (!(e instanceof Lost)) throw e;
    }
    done += 1;
  }
  await db.end();
  console.error(`${worker}: ${done} tasks, stopped`);
}

main().catch((e) => { console.error(e); process.exit(1); });
