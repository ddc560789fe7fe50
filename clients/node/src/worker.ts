// The fenced worker loop.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Pool, PoolConfig } from 'pg';
import { Awaiting, Lost, Permanent, Success, TaskFailure, Transient, Unknown } from './errors';
import { CLAIM, interval, json, Queryable, RELEASE, TRANSITION } from './sql';
import { Task, TaskHost } from './task';

/** Where the worker writes what it notices (default: warnings and errors to stderr). */
export interface Logger {
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

/** What a handler may return (or throw: the failures and any error). */
export type HandlerResult = Success | Transient | Permanent | Unknown | typeof Awaiting | void | undefined | null;

/** The work of one task. */
export type Handler<P = any> = (task: Task<P>) => Promise<HandlerResult | unknown> | HandlerResult;

/**
 * Asked first when a task's `priorOutcome` is `'unknown'` (an earlier
 * attempt may have taken effect): return a `Success` when the effect is
 * found (it is reported, the handler does not run), null / undefined when it
 * is not (the handler runs), or throw (the attempt fails as the error says;
 * an unclassified error is transient: nothing was invoked).
 */
export type Reconcile<P = any> = (task: Task<P>) => Promise<Success | null | undefined> | Success | null | undefined;

/**
 * A `stale` or `conflict` answer (`where`: invoked, heartbeat, transition,
 * receipt, checkpoint, await, release), or `heartbeat` for a NULL
 * heartbeat: the token lost the task.
 */
export type OnLost = (task: Task, answer: string, where: string) => void;

/** Worker options; durations are milliseconds (the same defaults in the Go and Python libraries). */
export interface WorkerOptions {
  /** The worker's name in the ledger (default: host-pid-random). */
  name?: string;
  /** Handlers running at once (default 4). */
  concurrency?: number;
  /** The lease asked for (default null: the queue's lease). */
  lease?: number | null;
  /** The waiting claim's timeout (default 10000; the server cuts it to ntask.max_wait, 30 s). */
  wait?: number;
  /** Heartbeat period (default null: a third of the lease each claim granted). */
  heartbeatEvery?: number | null;
  /** How long running handlers may finish after stop() (default 30000). */
  shutdownGrace?: number;
  /** `'auto'` (default): ntask_invoked before the handler; `'manual'`: the handler calls `task.invoked()`. */
  invoked?: 'auto' | 'manual';
  reconcile?: Reconcile;
  onLost?: OnLost;
  logger?: Logger;
  /** Pool size when the worker makes its own pool (default concurrency + 2). */
  poolSize?: number;
}

/** The worker's counters (read `worker.counters`). */
export interface Counters {
  claimed: number;
  succeeded: number;
  failedTransient: number;
  failedPermanent: number;
  failedUnknown: number;
  stale: number;
  conflict: number;
  released: number;
  heartbeatsLost: number;
}

interface Report {
  toState: 'succeeded' | 'retry_wait' | 'repair_required';
  errorClass: 'transient' | 'permanent' | 'unknown' | null;
  detail: Record<string, unknown> | null;
  retryAt: Date | null;
  outcome: string | null;
  result: unknown;
}

interface Running {
  task: Task;
  timer: NodeJS.Timeout | null;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The default name: host-pid-random. */
export function defaultName(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/**
 * True for an error of the connection (no SQLSTATE from the server, or
 * class 08, 57P01..03, too many connections, serialization failure,
 * deadlock): the statement is retried. Any other server error is an answer.
 */
export function isTransportError(e: unknown): boolean {
  const err = e as { severity?: unknown; code?: unknown } | null;
  if (!err || typeof err.severity !== 'string' || typeof err.code !== 'string') return true;
  return /^(08|57P0[123]|53300|40001|40P01)/.test(err.code);
}

/**
 * What a handler's answer (returned or thrown) reports. A value that is not
 * one of the library's classes counts as success when returned; thrown, it
 * is `unknown` once the attempt was marked invoked, else `transient`.
 */
export function classify(out: unknown, thrown: boolean, invoked: boolean): Report {
  if (out instanceof Success) {
    return { toState: 'succeeded', errorClass: null, detail: null, retryAt: null, outcome: out.outcome, result: out.result };
  }
  if (out instanceof TaskFailure) {
    const detail = { message: out.message, ...(out.detail ?? {}) };
    if (out instanceof Permanent) {
      return { toState: 'repair_required', errorClass: 'permanent', detail, retryAt: null, outcome: null, result: null };
    }
    const retryAt = (out as Transient | Unknown).retryAt ?? null;
    return { toState: 'retry_wait', errorClass: out.errorClass, detail, retryAt, outcome: null, result: null };
  }
  if (!thrown) {
    return { toState: 'succeeded', errorClass: null, detail: null, retryAt: null, outcome: null, result: null };
  }
  const e = out as { name?: unknown; message?: unknown } | null;
  const detail: Record<string, unknown> = {
    message: e && typeof e.message === 'string' ? e.message : String(out),
    error: e && typeof e.name === 'string' ? e.name : typeof out,
  };
  return { toState: 'retry_wait', errorClass: invoked ? 'unknown' : 'transient', detail, retryAt: null, outcome: null, result: null };
}

const consoleLogger = (name: string): Logger => ({
  info: () => undefined,
  warn: (m) => console.error(`ntask worker ${name}: ${m}`),
  error: (m) => console.error(`ntask worker ${name}: ${m}`),
});

/**
 * The fenced worker: one waiting claim at a time, handlers run
 * concurrently up to `concurrency`, a heartbeat timer per held task, the
 * report with the task's token. `run()` resolves when stopped.
 *
 * @example
 * const w = new Worker(process.env.DATABASE_URL!, 'push', async (task) => {
 *   await provider.send(task.payload, { idempotencyKey: task.key });
 *   return new Success({ outcome: 'sent' });
 * });
 * await runUntilSignal(w);
 */
export class Worker<P = any> {
  readonly name: string;
  readonly queue: string;
  readonly counters: Counters = {
    claimed: 0, succeeded: 0, failedTransient: 0, failedPermanent: 0, failedUnknown: 0,
    stale: 0, conflict: 0, released: 0, heartbeatsLost: 0,
  };
  /** The pool the worker uses (yours, or the one it made from the DSN); handlers may use it too. */
  readonly pool: Pool;

  private readonly handler: Handler<P>;
  private readonly opts: Required<Pick<WorkerOptions, 'concurrency' | 'wait' | 'shutdownGrace' | 'invoked'>>
    & Pick<WorkerOptions, 'lease' | 'heartbeatEvery' | 'reconcile' | 'onLost'>;
  private readonly logger: Logger;
  private readonly ownPool: boolean;
  private readonly host: TaskHost;
  private readonly running = new Map<string, Running>();
  private stopping = false;
  private hard = false;
  private abandoned = false;
  private started = false;
  private wakers: Array<() => void> = [];
  private hardStopped!: Promise<void>;
  private resolveHard!: () => void;

  constructor(dsnOrPool: string | Pool | PoolConfig, queue: string, handler: Handler<P>, options: WorkerOptions = {}) {
    this.queue = queue;
    this.handler = handler;
    this.name = options.name ?? defaultName();
    const concurrency = options.concurrency ?? 4;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1000) {
      throw new RangeError(`concurrency must be 1..1000, not ${concurrency}`);
    }
    this.opts = {
      concurrency,
      wait: options.wait ?? 10000,
      shutdownGrace: options.shutdownGrace ?? 30000,
      invoked: options.invoked ?? 'auto',
      lease: options.lease ?? null,
      heartbeatEvery: options.heartbeatEvery ?? null,
      reconcile: options.reconcile,
      onLost: options.onLost,
    };
    if (this.opts.invoked !== 'auto' && this.opts.invoked !== 'manual') {
      throw new RangeError(`invoked must be 'auto' or 'manual', not ${String(this.opts.invoked)}`);
    }
    interval(this.opts.wait);
    interval(this.opts.lease);
    this.logger = options.logger ?? consoleLogger(this.name);
    if (typeof dsnOrPool === 'string') {
      this.pool = new Pool({ connectionString: dsnOrPool, max: options.poolSize ?? concurrency + 2 });
      this.ownPool = true;
    } else if (typeof (dsnOrPool as Pool).connect === 'function' && typeof (dsnOrPool as Pool).query === 'function') {
      this.pool = dsnOrPool as Pool;
      this.ownPool = false;
    } else {
      this.pool = new Pool({ max: options.poolSize ?? concurrency + 2, ...(dsnOrPool as PoolConfig) });
      this.ownPool = true;
    }
    this.host = {
      pool: this.pool as unknown as Queryable,
      lease: this.opts.lease ?? null,
      surface: (t, a, w) => this.surface(t, a, w),
    };
    this.hardStopped = new Promise((r) => { this.resolveHard = r; });
  }

  /** Tasks being worked now. */
  get inFlight(): number { return this.running.size; }

  /**
   * Begins the graceful shutdown: no new claim after the current wait
   * returns (a waiting claim is never cancelled: it could have committed),
   * tasks it brings are released, running handlers get `shutdownGrace`.
   * A second call stops at once (the leases held then expire).
   */
  stop(): void {
    if (this.stopping) {
      if (!this.hard) {
        this.hard = true;
        this.abandoned = true;
        this.logger.warn('second stop: stopping at once');
        for (const r of this.running.values()) {
          if (r.timer) clearTimeout(r.timer);
          r.task._abort.abort(new Error('worker stopped at once'));
        }
        this.resolveHard();
      }
    } else {
      this.stopping = true;
      this.logger.info('stopping: no new claims');
    }
    this.wake();
  }

  /** Runs until stopped; resolves after the shutdown. */
  async run(): Promise<void> {
    if (this.started) throw new Error('Worker.run() was called already');
    this.started = true;
    const onPoolError = (e: Error) => this.logger.warn(`idle connection failed: ${e.message}`);
    this.pool.on('error', onPoolError);
    const loop = this.loop().finally(() => this.pool.off('error', onPoolError));
    await Promise.race([loop, this.hardStopped]);
  }

  private wake(): void {
    const w = this.wakers;
    this.wakers = [];
    for (const f of w) f();
  }

  /** Resolves on the next wake() (a slot freed, a stop) or after ms. */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wakers = this.wakers.filter((f) => f !== done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.wakers.push(done);
    });
  }

  private async loop(): Promise<void> {
    let backoff = 0;
    while (!this.stopping) {
      const free = this.opts.concurrency - this.running.size;
      if (free <= 0) {
        await this.pause(60000);
        continue;
      }
      let rows: any[];
      try {
        const r = await this.pool.query(CLAIM,
          [this.queue, this.name, free, interval(this.opts.lease), interval(this.opts.wait)]);
        rows = r.rows;
        if (backoff) this.logger.warn('claiming again');
        backoff = 0;
      } catch (e) {
        backoff = Math.min(Math.max(100, backoff * 2), 5000);
        this.logger.warn(`claim failed (${describe(e)}), again in ${backoff} ms`);
        await this.pause(backoff);
        continue;
      }
      for (const row of rows) {
        this.counters.claimed += 1;
        if (this.stopping) await this.releaseUnstarted(row);
        else this.start(row);
      }
    }
    // graceful: the running handlers get their grace
    if (!this.hard && this.running.size > 0) {
      const until = Date.now() + this.opts.shutdownGrace;
      while (!this.hard && this.running.size > 0 && Date.now() < until) {
        await this.pause(until - Date.now());
      }
      if (!this.hard && this.running.size > 0) {
        // past the grace: hand back what was never invoked, abandon the rest
        // (their leases expire and the next claim reconciles)
        this.abandoned = true;
        const left = [...this.running.values()];
        this.logger.warn(`shutdown grace over with ${left.length} task(s) running`);
        await Promise.all(left.map(async (r) => {
          if (r.timer) clearTimeout(r.timer);
          r.task._abort.abort(new Error('worker shutdown grace over'));
          if (!r.task._invoked && !r.task._ended && !r.task._lost) {
            r.task._ended = 'released';
            await this.releaseUnstarted({ task_id: r.task.id, token: r.task.token });
          }
        }));
      }
    }
    if (this.ownPool) {
      if (this.hard || this.abandoned) this.pool.end().catch(() => undefined);
      else await this.pool.end();
    }
  }

  private async releaseUnstarted(row: { task_id: unknown; token: unknown }): Promise<void> {
    for (let i = 0, delay = 100; ; i++, delay = Math.min(delay * 2, 2000)) {
      try {
        const r = await this.pool.query(RELEASE, [String(row.task_id), String(row.token), null]);
        const a = r.rows[0].answer;
        if (a === 'applied' || a === 'duplicate') this.counters.released += 1;
        else this.logger.warn(`release of task ${row.task_id} answered ${a}`);
        return;
      } catch (e) {
        if (!isTransportError(e) || i >= 5) {
          this.logger.error(`release of task ${row.task_id} failed: ${describe(e)} (its lease will expire)`);
          return;
        }
        await sleep(delay);
      }
    }
  }

  private start(row: any): void {
    const task = new Task<P>(this.host, this.queue, row);
    const entry: Running = { task, timer: null };
    this.running.set(task.id, entry);
    let every = this.opts.heartbeatEvery;
    if (every === null) {
      const granted = new Date(row.lease_until).getTime() - new Date(row.server_now).getTime();
      every = Math.max(50, Math.floor(granted / 3));
    }
    const beat = () => {
      entry.timer = null;
      if (task._lost || task._ended || task._ending || this.hard) return;
      task.heartbeat().then(() => undefined, (e) => {
        if (!(e instanceof Lost)) this.logger.warn(`heartbeat of task ${task.id} failed: ${describe(e)}`);
      }).finally(() => {
        if (this.running.get(task.id) === entry && !task._lost && !this.hard) entry.timer = setTimeout(beat, every!);
      });
    };
    entry.timer = setTimeout(beat, every);
    this.execute(task).catch((e) => this.logger.error(`task ${task.id}: ${describe(e)}`)).finally(() => {
      if (entry.timer) clearTimeout(entry.timer);
      entry.timer = null;
      if (this.running.get(task.id) === entry) this.running.delete(task.id);
      this.wake();
    });
  }

  private async execute(task: Task<P>): Promise<void> {
    try {
      await task._loadDeferred();
    } catch (e) {
      if (e instanceof Lost) return;
      return this.report(task, classify(e, false, false));
    }
    if (task.priorOutcome === 'unknown' && this.opts.reconcile) {
      let found: Success | null | undefined;
      try {
        found = await this.opts.reconcile(task);
      } catch (e) {
        if (e instanceof Lost) return;
        return this.report(task, classify(e, true, false));
      }
      if (found instanceof Success) return this.report(task, classify(found, false, false));
    }
    if (this.opts.invoked === 'auto') {
      try {
        await task.invoked();
      } catch (e) {
        if (e instanceof Lost) return;
        return this.report(task, classify(e, true, false));
      }
    }
    let out: unknown;
    let thrown = false;
    try {
      out = await this.handler(task);
    } catch (e) {
      out = e;
      thrown = true;
    }
    if (this.abandoned || task._lost || out instanceof Lost) return;
    if (task._ended) {
      if (task._ended === 'released') this.counters.released += 1;
      return;
    }
    if (out === Awaiting) {
      this.logger.warn(`task ${task.id}: the handler returned Awaiting without awaitSignal(); not reported`);
      return;
    }
    if (thrown && !(out instanceof TaskFailure)) {
      this.logger.warn(`task ${task.id}: handler threw ${describe(out)}`);
    }
    return this.report(task, classify(out, thrown, task._invoked));
  }

  /** ntask_transition with the token, retried on connection errors (idempotent per token). */
  private async report(task: Task<P>, o: Report): Promise<void> {
    task._ending = true; // a heartbeat answered after this transition is not a loss
    for (let delay = 100; ; delay = Math.min(delay * 2, 5000)) {
      if (this.abandoned) return;
      let row: any;
      try {
        const r = await this.pool.query(TRANSITION, [task.id, task.token, o.toState, o.errorClass,
          json(o.detail), o.retryAt, o.outcome, json(o.result)]);
        row = r.rows[0];
      } catch (e) {
        if (!isTransportError(e)) {
          this.logger.error(`transition of task ${task.id} failed: ${describe(e)}`);
          return;
        }
        this.logger.warn(`transition of task ${task.id}: ${describe(e)}, again in ${delay} ms`);
        await sleep(delay);
        continue;
      }
      if (row.result === 'applied' || row.result === 'duplicate') {
        if (o.toState === 'succeeded') this.counters.succeeded += 1;
        else if (o.errorClass === 'permanent') this.counters.failedPermanent += 1;
        else if (o.errorClass === 'unknown') this.counters.failedUnknown += 1;
        else this.counters.failedTransient += 1;
      } else {
        this.surface(task, row.result, 'transition');
      }
      return;
    }
  }

  private surface(task: Task, answer: string, where: string): void {
    if (answer === 'stale') this.counters.stale += 1;
    else if (answer === 'conflict') this.counters.conflict += 1;
    else if (answer === 'heartbeat') this.counters.heartbeatsLost += 1;
    this.logger.warn(`task ${task.id} token ${task.token}: ${where} answered ${answer === 'heartbeat' ? 'NULL (lease lost)' : answer}`);
    if (this.opts.onLost) {
      try {
        this.opts.onLost(task, answer, where);
      } catch (e) {
        this.logger.error(`onLost threw: ${describe(e)}`);
      }
    }
  }
}

function describe(e: unknown): string {
  const err = e as { code?: unknown; message?: unknown } | null;
  if (err && typeof err.message === 'string') return typeof err.code === 'string' ? `${err.code}: ${err.message}` : err.message;
  return String(e);
}

/**
 * Runs the worker until SIGTERM or SIGINT: the first begins the graceful
 * shutdown, a second stops at once. Resolves when `run()` does.
 */
export async function runUntilSignal(worker: { run(): Promise<void>; stop(): void },
  signals: NodeJS.Signals[] = ['SIGTERM', 'SIGINT']): Promise<void> {
  const onSignal = () => worker.stop();
  for (const s of signals) process.on(s, onSignal);
  try {
    await worker.run();
  } finally {
    for (const s of signals) process.off(s, onSignal);
  }
}
