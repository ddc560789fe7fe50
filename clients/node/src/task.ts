// The task a handler gets: its fields and the fenced calls on its token.
import { Lost } from './errors';
import { AWAIT, CHECKPOINT, CONTEXT, HEARTBEAT, interval, INVOKED, json, Queryable, RECEIPT, RELEASE } from './sql';

/** What the claim hands on besides the payload (`ntask_claim`'s `context`). */
export interface TaskContext {
  /** `{"queue:key": result}` of the parents (`depends_on`). */
  parents?: Record<string, unknown>;
  /** `{"step": value}` of the checkpoints so far. */
  checkpoints?: Record<string, unknown>;
  /** The awaited signal: `{key, payload}` or `{key, timed_out: true}`. */
  signal?: { key: string; payload?: unknown; timed_out?: boolean };
  traceparent?: string;
  [more: string]: unknown;
}

/** The answer of a fenced write (receipt, checkpoint, await, release). */
export type Answer = 'applied' | 'duplicate' | 'conflict' | 'stale';

/** @internal what a Task needs from its worker */
export interface TaskHost {
  pool: Queryable;
  /** the lease asked for (ms), null: the queue's */
  lease: number | null;
  surface(task: Task, answer: string, where: string): void;
}

/** One claimed task. bigint columns (`id`, `token`) are decimal strings: exact. */
export class Task<P = any> {
  readonly id: string;
  readonly queue: string;
  readonly key: string;
  /** The payload, decoded JSON. */
  readonly payload: P;
  readonly attempt: number;
  readonly token: string;
  /** `null`, `'unknown'` (an earlier attempt may have taken effect: reconcile) or `'committed'` (its receipt committed). */
  readonly priorOutcome: string | null;
  context: TaskContext;
  /** The attempt's W3C traceparent (`context.traceparent`), to continue the trace. */
  traceparent: string | null;
  /** The lease's end as the server last granted it. */
  leaseUntil: Date;
  /** Aborted when the task is lost (stale heartbeat) or the worker stops at once / past its grace. */
  readonly signal: AbortSignal;

  /** @internal */ readonly _abort: AbortController;
  /** @internal */ _invoked = false;
  /** @internal the token ended its attempt itself (release, await): no report */
  _ended: 'released' | 'awaiting' | null = null;
  /** @internal */ _lost = false;
  /**
   * @internal the worker is ending the attempt itself (its report, a
   * release): a heartbeat that then answers NULL was overtaken by it, not lost
   */
  _ending = false;
  /** @internal */ readonly _host: TaskHost;

  /** @internal */
  constructor(host: TaskHost, queue: string, row: any) {
    this._host = host;
    this.id = String(row.task_id);
    this.queue = queue;
    this.key = row.task_key;
    this.payload = row.payload;
    this.attempt = row.attempt;
    this.token = String(row.token);
    this.priorOutcome = row.prior_outcome ?? null;
    this.context = row.context ?? {};
    this.traceparent = typeof this.context.traceparent === 'string' ? this.context.traceparent : null;
    this.leaseUntil = row.lease_until;
    this._abort = new AbortController();
    this.signal = this._abort.signal;
  }

  /** True once `invoked()` was marked (by the worker in `invoked: 'auto'` mode, or by the handler). */
  get isInvoked(): boolean { return this._invoked; }

  /**
   * Marks the attempt as about to call out (`ntask_invoked`): from now a
   * crash leaves its outcome unknown. Call it just before the external
   * effect; `stale` throws `Lost` (do not call out).
   */
  /**
   * @internal A claim hands out a bounded amount of context (ntask 1.1,
   * `ntask.max_claim_context_bytes`): past it a task's context is only
   * `{"deferred": true}` (and its traceparent); this reads it whole with
   * `ntask_context`. A NULL answer (the token lost the task) throws `Lost`.
   */
  async _loadDeferred(): Promise<void> {
    if (!this.context || (this.context as any).deferred !== true) return;
    const r = await this._host.pool.query(CONTEXT, [this.id, this.token]);
    const ctx = r.rows[0].context;
    if (ctx === null) {
      this._lost = true;
      this._host.surface(this, 'stale', 'context');
      throw new Lost(`task ${this.id} token ${this.token}: ntask_context answered NULL`, 'stale');
    }
    this.context = ctx;
    this.traceparent = typeof ctx.traceparent === 'string' ? ctx.traceparent : null;
  }

  async invoked(): Promise<void> {
    const r = await this._host.pool.query(INVOKED, [this.id, this.token]);
    const a = r.rows[0].answer;
    if (a === 'stale') {
      this._lost = true;
      this._host.surface(this, 'stale', 'invoked');
      throw new Lost(`task ${this.id} token ${this.token}: ntask_invoked answered stale`, 'stale');
    }
    this._invoked = true;
  }

  /**
   * Extends the lease (`ntask_heartbeat`; the worker's timer does this), with
   * an optional progress value. A NULL answer throws `Lost`.
   */
  async heartbeat(progress?: unknown): Promise<Date> {
    const r = await this._host.pool.query(HEARTBEAT,
      [this.id, this.token, interval(this._host.lease), json(progress)]);
    const until = r.rows[0].lease_until;
    if (until === null) {
      if (!this._lost && !this._ending) {
        this._lost = true;
        this._host.surface(this, 'heartbeat', 'heartbeat');
        this._abort.abort(new Lost(`task ${this.id} token ${this.token}: lease lost`, 'heartbeat'));
      }
      throw new Lost(`task ${this.id} token ${this.token}: ntask_heartbeat answered NULL`, 'heartbeat');
    }
    this.leaseUntil = until;
    return until;
  }

  /** Stores the attempt's progress (any JSON) and extends the lease. */
  async progress(value: unknown): Promise<void> {
    await this.heartbeat(value === undefined ? null : value);
  }

  /**
   * Records that `step` is done with `value` (`ntask_checkpoint`), in the
   * transaction `tx` of the step's business write (default: the worker's
   * pool, its own transaction). A later attempt finds it in
   * `context.checkpoints`.
   */
  async checkpoint(step: string, value: unknown, tx?: Queryable): Promise<Answer> {
    const r = await (tx ?? this._host.pool).query(CHECKPOINT, [this.id, this.token, step, JSON.stringify(value ?? null)]);
    return this.answer(r.rows[0].answer, 'checkpoint');
  }

  /**
   * The commit receipt (`ntask_receipt`), called in the caller's business
   * transaction `tx` (a pg Client / PoolClient after BEGIN): `applied` the
   * first time; `duplicate` when this content was committed already;
   * `conflict` / `stale` are surfaced (roll back your transaction).
   */
  async receipt(tx: Queryable, payload: unknown): Promise<Answer> {
    const r = await tx.query(RECEIPT, [this.id, this.token, JSON.stringify(payload ?? null)]);
    return this.answer(r.rows[0].answer, 'receipt');
  }

  /**
   * Parks the task until the queue's signal `signalKey` is sent, or
   * `timeoutMs` runs out (`ntask_await`); the handler then returns
   * `Awaiting` (the worker reports nothing).
   */
  async awaitSignal(signalKey: string, timeoutMs?: number | null, onTimeout: 'ready' | 'repair' = 'ready'): Promise<Answer> {
    const r = await this._host.pool.query(AWAIT, [this.id, this.token, signalKey, interval(timeoutMs), onTimeout]);
    const a = this.answer(r.rows[0].answer, 'await');
    if (a === 'applied' || a === 'duplicate') this._ended = 'awaiting';
    return a;
  }

  /**
   * Hands the task back (`ntask_release`), due again now or after
   * `delayMs`; the handler then returns (the worker reports nothing). A
   * never-invoked attempt spends no budget.
   */
  async release(delayMs?: number | null): Promise<Answer> {
    this._ending = true;
    const r = await this._host.pool.query(RELEASE, [this.id, this.token, interval(delayMs)]);
    const a = this.answer(r.rows[0].answer, 'release');
    if (a === 'applied' || a === 'duplicate') this._ended = 'released';
    return a;
  }

  private answer(a: Answer, where: string): Answer {
    if (a === 'stale' || a === 'conflict') {
      if (a === 'stale') this._lost = true;
      this._host.surface(this, a, where);
    }
    return a;
  }
}
