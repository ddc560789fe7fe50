// Outcomes a handler returns or throws, and the errors the library raises.

/**
 * The handler's success. Returning it (or returning nothing) reports
 * `ntask_transition(id, token, 'succeeded', outcome => ..., result => ...)`.
 *
 * @example return new Success({ outcome: 'sent', result: { messageId } });
 */
export class Success {
  /** The outcome label (NULL: the server's default, `completed`). */
  readonly outcome: string | null;
  /** The result stored on the task for `result()` and duplicate enqueues (any JSON value). */
  readonly result: unknown;
  constructor(opts: { outcome?: string | null; result?: unknown } = {}) {
    this.outcome = opts.outcome ?? null;
    this.result = opts.result === undefined ? null : opts.result;
  }
}

/** The error classes ntask's ledger knows (`ntask_transition`'s `error_class`). */
export type ErrorClass = 'transient' | 'permanent' | 'unknown';

/** Base class of the three typed failures; `errorClass` says which. */
export abstract class TaskFailure extends Error {
  abstract readonly errorClass: ErrorClass;
  /** Extra JSON for the attempt's `detail` (the message is added as `detail.message`). */
  readonly detail: Record<string, unknown> | null;
  constructor(message: string, opts: { detail?: Record<string, unknown> | null } = {}) {
    super(message);
    this.name = new.target.name;
    this.detail = opts.detail ?? null;
  }
}

/**
 * It did not take effect and may work later: `retry_wait`, class
 * `transient`, next run at `retryAt` (NULL: the queue's backoff).
 */
export class Transient extends TaskFailure {
  readonly errorClass = 'transient' as const;
  readonly retryAt: Date | null;
  constructor(message: string, opts: { retryAt?: Date | null; detail?: Record<string, unknown> | null } = {}) {
    super(message, opts);
    this.retryAt = opts.retryAt ?? null;
  }
}

/** It will never work: `repair_required`, class `permanent`. */
export class Permanent extends TaskFailure {
  readonly errorClass = 'permanent' as const;
}

/**
 * It may have taken effect (a timeout after sending): `retry_wait`, class
 * `unknown`; the next attempt sees `priorOutcome = 'unknown'` and
 * reconciles.
 */
export class Unknown extends TaskFailure {
  readonly errorClass = 'unknown' as const;
  readonly retryAt: Date | null;
  constructor(message: string, opts: { retryAt?: Date | null; detail?: Record<string, unknown> | null } = {}) {
    super(message, opts);
    this.retryAt = opts.retryAt ?? null;
  }
}

/**
 * The token no longer holds the task (`stale` from `ntask_invoked`, a NULL
 * heartbeat, ...): stop the work, report nothing. The worker surfaces it
 * (counter, `onLost`), it never retries it.
 */
export class Lost extends Error {
  /** `stale`, `conflict` or `heartbeat` (a NULL heartbeat). */
  readonly answer: string;
  constructor(message: string, answer = 'stale') {
    super(message);
    this.name = 'Lost';
    this.answer = answer;
  }
}

/**
 * Returned by a handler that parked its task with `task.awaitSignal()`:
 * the worker reports nothing (the await ended the attempt).
 */
export const Awaiting: unique symbol = Symbol('ntask.Awaiting');
export type AwaitingT = typeof Awaiting;
