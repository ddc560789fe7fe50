// The SQL the library sends: only ntask's documented functions
// (docs/reference.md), always with named arguments, never a table.
//
// Every statement is sent without a `name`, so node-postgres uses the
// unnamed prepared statement (Parse/Bind/Execute in one round trip): safe
// behind pgbouncer in transaction pooling mode. Never add `name:` here.

/** Anything that runs a query: a pg `Client`, `PoolClient` or `Pool`. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

export const CLAIM =
  'SELECT task_id, task_key, payload, attempt, token, lease_until, prior_outcome, context,'
  + ' clock_timestamp() AS server_now'
  + ' FROM ntask_claim(queue => $1, worker => $2, max_tasks => $3, lease => $4::interval, wait => $5::interval)';

export const HEARTBEAT =
  'SELECT ntask_heartbeat(task_id => $1, token => $2, lease => $3::interval, progress => $4::jsonb) AS lease_until';

export const INVOKED = 'SELECT ntask_invoked(task_id => $1, token => $2) AS answer';

export const TRANSITION =
  'SELECT result, state, run_at FROM ntask_transition(task_id => $1, token => $2, to_state => $3,'
  + ' error_class => $4, detail => $5::jsonb, retry_at => $6::timestamptz, outcome => $7,'
  + ' result => $8::jsonb)';

/** The whole context of a task whose claim deferred it (ntask 1.1). */
export const CONTEXT = 'SELECT ntask_context(task_id => $1, token => $2) AS context';

export const RELEASE = 'SELECT ntask_release(task_id => $1, token => $2, delay => $3::interval) AS answer';

export const RECEIPT = 'SELECT ntask_receipt(task_id => $1, token => $2, payload => $3::jsonb) AS answer';

export const CHECKPOINT =
  'SELECT ntask_checkpoint(task_id => $1, token => $2, step => $3, value => $4::jsonb) AS answer';

export const AWAIT =
  'SELECT ntask_await(task_id => $1, token => $2, signal_key => $3, timeout => $4::interval,'
  + ' on_timeout => $5) AS answer';

export const RESULT =
  'SELECT state, outcome, result, finished_at FROM ntask_result(queue => $1, task_key => $2)';

/** The optional arguments of ntask_enqueue / ntask_enqueue_many, by SQL name and type. */
export const ENQUEUE_ARGS: ReadonlyArray<readonly [string, string]> = [
  ['run_at', 'timestamptz'],
  ['partition_key', 'text'],
  ['priority', 'integer'],
  ['traceparent', 'text'],
  ['depends_on', 'text[]'],
  ['on_parent_failed', 'text'],
];
export const ENQUEUE_MANY_ARGS: ReadonlyArray<readonly [string, string]> = [
  ['run_at', 'timestamptz'],
  ['partition_keys', 'text[]'],
  ['priority', 'integer'],
  ['traceparent', 'text'],
  ['depends_on', 'text[]'],
  ['on_parent_failed', 'text'],
];

/**
 * Builds `SELECT ... FROM fn(a => $1, ...)` with the fixed arguments and
 * only those optional ones that were given (an omitted one keeps the
 * function's default; an explicit NULL would not always mean the same).
 */
export function buildCall(fn: string, columns: string, fixed: ReadonlyArray<readonly [string, string, unknown]>,
  optional: ReadonlyArray<readonly [string, string]>, given: Record<string, unknown>): { text: string; values: unknown[] } {
  const parts: string[] = [];
  const values: unknown[] = [];
  const add = (name: string, type: string, v: unknown) => {
    values.push(v);
    parts.push(`${name} => $${values.length}::${type}`);
  };
  for (const [name, type, v] of fixed) add(name, type, v);
  for (const [name, type] of optional) {
    if (given[name] !== undefined) add(name, type, given[name]);
  }
  return { text: `SELECT ${columns} FROM ${fn}(${parts.join(', ')})`, values };
}

/** JSON for a jsonb parameter (node-postgres would turn a JS array into a SQL array). */
export function json(v: unknown): string | null {
  return v === undefined || v === null ? null : JSON.stringify(v);
}

/** Milliseconds as an interval parameter (NULL stays NULL). */
export function interval(ms: number | null | undefined): string | null {
  if (ms === null || ms === undefined) return null;
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`not a duration in milliseconds: ${ms}`);
  return `${Math.round(ms)} milliseconds`;
}

/**
 * The ntask functions this library calls, each with the argument names it
 * passes: the drift test (t/042_client_node.pl) checks them against
 * pg_proc. Read from the statements above, so it cannot disagree with them.
 */
export function sqlFunctions(): Record<string, string[]> {
  const out: Record<string, Set<string>> = {};
  const texts = [CLAIM, HEARTBEAT, INVOKED, TRANSITION, RELEASE, RECEIPT, CHECKPOINT, AWAIT, RESULT];
  const enq = buildCall('ntask_enqueue', 'task_id', [['queue', 'text', 0], ['task_key', 'text', 0], ['payload', 'jsonb', 0]],
    ENQUEUE_ARGS, Object.fromEntries(ENQUEUE_ARGS.map(([n]) => [n, 0])));
  const many = buildCall('ntask_enqueue_many', 'task_id', [['queue', 'text', 0], ['task_keys', 'text[]', 0], ['payloads', 'jsonb[]', 0]],
    ENQUEUE_MANY_ARGS, Object.fromEntries(ENQUEUE_MANY_ARGS.map(([n]) => [n, 0])));
  texts.push(enq.text, many.text);
  for (const t of texts) {
    const m = /(ntask_[a-z_]+)\((.*)\)/.exec(t);
    if (!m) throw new Error(`no ntask function in: ${t}`);
    const args = out[m[1]] ?? (out[m[1]] = new Set());
    for (const a of m[2].matchAll(/([a-z_]+) =>/g)) args.add(a[1]);
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, [...v]]));
}
