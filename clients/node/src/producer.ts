// The producer: enqueue in the caller's transaction (never its own).
import { buildCall, ENQUEUE_ARGS, ENQUEUE_MANY_ARGS, Queryable, RESULT } from './sql';

/** Options of `enqueue` (each omitted one keeps ntask_enqueue's default). */
export interface EnqueueOptions {
  /** Not due before this time (`run_at`). */
  runAt?: Date;
  /** `partition_key`: tasks of one key run one at a time (see the queue's settings). */
  partitionKey?: string;
  /** Higher first (`priority`, default 0). */
  priority?: number;
  /** Parents, keys of the same queue or `"queue:key"` (`depends_on`). */
  dependsOn?: string[];
  /** `'wait'` or `'cancel'` when a parent fails (`on_parent_failed`). */
  onParentFailed?: 'wait' | 'cancel';
  /**
   * W3C traceparent stored with the task. Node has no standard tracing API
   * in core, so there is no implicit default: pass your span's
   * traceparent (omitted: the server's `ntask.traceparent` setting).
   */
  traceparent?: string;
}

/** Options of `enqueueMany`, the same for every task of the call. */
export interface EnqueueManyOptions {
  runAt?: Date;
  priority?: number;
  dependsOn?: string[];
  onParentFailed?: 'wait' | 'cancel';
  traceparent?: string;
}

/** One task of `enqueueMany`. */
export interface EnqueueItem {
  key: string;
  /** Any JSON value (default `{}`). */
  payload?: unknown;
  partitionKey?: string;
}

/** The answer of an enqueue (one row of ntask_enqueue). */
export interface Enqueued {
  /** The task's id (bigint, as a decimal string: exact). */
  taskId: string;
  /** False for a duplicate (the key existed with an equal payload). */
  created: boolean;
  state: string;
  /** A duplicate's succeeded outcome label, else null. */
  outcome: string | null;
  /** A duplicate's stored result, else null. */
  result: unknown;
}

/** The answer of `result()` (ntask_result). */
export interface TaskResult {
  state: string;
  outcome: string | null;
  result: unknown;
  finishedAt: Date | null;
}

function enqueued(r: any): Enqueued {
  return { taskId: String(r.task_id), created: r.created, state: r.state, outcome: r.outcome, result: r.result };
}

/**
 * Enqueue one task in the caller's transaction (`ntask_enqueue`):
 * idempotent on (queue, key); a duplicate answers `created: false` with
 * the first task's state, outcome and result; the same key with another
 * payload raises NT001.
 *
 * @param tx a pg `Client` / `PoolClient` inside your transaction (or a `Pool`: its own statement)
 */
export async function enqueue(tx: Queryable, queue: string, key: string, payload: unknown = {},
  options: EnqueueOptions = {}): Promise<Enqueued> {
  const c = buildCall('ntask_enqueue', 'task_id, created, state, outcome, result',
    [['queue', 'text', queue], ['task_key', 'text', key], ['payload', 'jsonb', JSON.stringify(payload)]],
    ENQUEUE_ARGS, {
      run_at: options.runAt,
      partition_key: options.partitionKey,
      priority: options.priority,
      traceparent: options.traceparent,
      depends_on: options.dependsOn,
      on_parent_failed: options.onParentFailed,
    });
  const r = await tx.query(c.text, c.values);
  return enqueued(r.rows[0]);
}

/**
 * Enqueue many tasks of one queue in one statement (`ntask_enqueue_many`):
 * one answer per item, in input order.
 */
export async function enqueueMany(tx: Queryable, queue: string, items: EnqueueItem[],
  options: EnqueueManyOptions = {}): Promise<Enqueued[]> {
  const pks = items.some((i) => i.partitionKey !== undefined)
    ? items.map((i) => i.partitionKey ?? null) : undefined;
  const c = buildCall('ntask_enqueue_many', 'task_id, created, state, outcome, result',
    [['queue', 'text', queue], ['task_keys', 'text[]', items.map((i) => i.key)],
      ['payloads', 'jsonb[]', items.map((i) => JSON.stringify(i.payload === undefined ? {} : i.payload))]],
    ENQUEUE_MANY_ARGS, {
      run_at: options.runAt,
      partition_keys: pks,
      priority: options.priority,
      traceparent: options.traceparent,
      depends_on: options.dependsOn,
      on_parent_failed: options.onParentFailed,
    });
  const r = await tx.query(c.text, c.values);
  return r.rows.map(enqueued);
}

/** The task's state, succeeded outcome and stored result (`ntask_result`); null: no such task. */
export async function result(tx: Queryable, queue: string, key: string): Promise<TaskResult | null> {
  const r = await tx.query(RESULT, [queue, key]);
  if (r.rows.length === 0) return null;
  const row = r.rows[0];
  return { state: row.state, outcome: row.outcome, result: row.result, finishedAt: row.finished_at };
}

