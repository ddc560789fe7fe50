// A worker process for the signal scenarios of the integration tests
// (SIGTERM, SIGKILL, SIGSTOP): node dist/test/proc.js, configured by the
// environment. It prints one JSON line when it runs and one with its
// counters when it exits.
//
// Handler by payload.kind:
//   provider   task.invoked(), the fake provider takes effect (a row in
//              node_provider), then hold payload.holdMs (or until the
//              task's signal aborts), then success
//   uninvoked  hold until aborted, never invoked
import { Pool } from 'pg';
import { runUntilSignal, Success, Task, Worker } from '../src/index';

const env = (k: string, d?: string) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};

export async function callProvider(db: { query(t: string, v: unknown[]): Promise<unknown> }, task: Task): Promise<void> {
  await db.query('INSERT INTO node_provider (task_key, token, worker) VALUES ($1, $2, $3)'
    + ' ON CONFLICT (task_key) DO UPDATE SET calls = node_provider.calls + 1', [task.key, task.token, 'proc']);
}

export function hold(task: Task, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    task.signal.addEventListener('abort', () => { clearTimeout(t); resolve(); });
  });
}

async function main() {
  const pool = new Pool({ connectionString: env('NTASK_DSN'), max: 6 });
  const w = new Worker(pool, env('PROC_QUEUE'), async (task: Task) => {
    if (task.payload.kind === 'provider') {
      await task.invoked();
      await callProvider(pool, task);
      await hold(task, task.payload.holdMs ?? 0);
      return new Success({ outcome: 'sent' });
    }
    await hold(task, 3600000);
    return undefined;
  }, {
    name: env('PROC_NAME'),
    concurrency: 3,
    lease: Number(env('PROC_LEASE_MS', '3000')),
    wait: 1000,
    shutdownGrace: Number(env('PROC_GRACE_MS', '3000')),
    invoked: 'manual',
    logger: {
      info: (m) => console.error(`${process.env.PROC_NAME}: ${m}`),
      warn: (m) => console.error(`${process.env.PROC_NAME}: ${m}`),
      error: (m) => console.error(`${process.env.PROC_NAME}: ${m}`),
    },
  });
  console.log(JSON.stringify({ event: 'running', pid: process.pid }));
  await runUntilSignal(w);
  await pool.end();
  console.log(JSON.stringify({ event: 'exit', counters: w.counters }));
}

if (require.main === module) main().catch((e) => { console.error(e); process.exit(1); });
