/**
 * ntask for Node.js: the producer (enqueue in your transaction) and the
 * fenced worker loop, on node-postgres. Every call is one of ntask's
 * documented SQL functions (docs/reference.md), sent as an unnamed
 * statement (safe behind pgbouncer in transaction pooling mode).
 *
 * @packageDocumentation
 */
export { Success, Transient, Permanent, Unknown, TaskFailure, Lost, Awaiting } from './errors';
export type { ErrorClass } from './errors';
export { enqueue, enqueueMany, result } from './producer';
export type { Enqueued, EnqueueItem, EnqueueOptions, EnqueueManyOptions, TaskResult } from './producer';
export { Task } from './task';
export type { Answer, TaskContext } from './task';
export { Worker, runUntilSignal, classify, isTransportError, defaultName } from './worker';
export type { Counters, Handler, HandlerResult, Logger, OnLost, Reconcile, WorkerOptions } from './worker';
export { sqlFunctions } from './sql';
export type { Queryable } from './sql';
