/**
 * A worker thread with its own connection to a store file (the body is sql-thread.mjs),
 * for bulk writes that must not stall the event loop: node:sqlite is synchronous, and a
 * batch of log rows or a retention delete costs SQLite milliseconds to seconds.
 *
 * Requests are answered in order. The thread is unreferenced, so it never keeps a process
 * alive; `close()` references it again until it has finished, so a process with nothing
 * else pending cannot end half way through.
 */
import type { SQLInputValue } from 'node:sqlite';
import { Worker } from 'node:worker_threads';

const BODY = new URL('./sql-thread.mjs', import.meta.url);

export type SqlRow = readonly SQLInputValue[];

/** Every row of every run in one transaction; resolves with the rows written. */
export interface WriteRequest {
  readonly op: 'write';
  readonly runs: ReadonlyArray<readonly [statement: string, rows: readonly SqlRow[]]>;
}

/**
 * Each named statement, one transaction per run, until it changes fewer than `chunk`
 * rows or `stop[0]` becomes non-zero; resolves with the rows changed per statement.
 */
export interface SweepRequest {
  readonly op: 'sweep';
  readonly names: readonly string[];
  readonly params: SqlRow;
  readonly chunk: number;
  /** An Int32Array over a SharedArrayBuffer, read between runs. */
  readonly stop: Int32Array;
}

type Reply = { ok: true; changes: number | number[] } | { ok: false; message: string };

export class SqlThread {
  private readonly worker: Worker;
  private readonly pending: Array<{ resolve: (changes: number | number[]) => void; reject: (err: Error) => void }> = [];
  private lost: Error | null = null;
  private closing: Promise<void> | null = null;
  /** Called once if the thread fails or ends by itself; pending requests are rejected first. */
  onLost: ((err: Error) => void) | null = null;

  constructor(path: string, statements: Readonly<Record<string, string>>) {
    this.worker = new Worker(BODY, { workerData: { path, statements } });
    this.worker.on('message', (reply: Reply) => {
      const waiter = this.pending.shift();
      if (waiter === undefined) return;
      if (reply.ok) waiter.resolve(reply.changes);
      else waiter.reject(new Error(reply.message));
    });
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', (code) => this.fail(new Error(`the SQL thread exited (code ${code})`)));
    // After the listeners: adding a 'message' listener references the worker again.
    this.worker.unref();
  }

  write(request: WriteRequest): Promise<number> {
    return this.send(request) as Promise<number>;
  }

  sweep(request: SweepRequest): Promise<number[]> {
    return this.send(request) as Promise<number[]>;
  }

  /** Lets pending requests finish, closes the connection and waits for the thread to end. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      if (this.lost !== null) {
        resolve();
        return;
      }
      this.worker.ref();
      this.worker.once('exit', () => resolve());
      this.worker.postMessage('close');
    });
    return this.closing;
  }

  private send(request: WriteRequest | SweepRequest): Promise<number | number[]> {
    if (this.lost !== null) return Promise.reject(this.lost);
    if (this.closing !== null) return Promise.reject(new Error('the SQL thread is closing'));
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      // While a request is out, its answer must be awaited even by a process with nothing
      // else to do; unreferenced again once everything is answered.
      this.worker.ref();
      this.worker.postMessage(request);
    }).finally(() => {
      if (this.pending.length === 0 && this.closing === null && this.lost === null) this.worker.unref();
    }) as Promise<number | number[]>;
  }

  private fail(err: Error): void {
    if (this.lost !== null) return;
    this.lost = err;
    for (const waiter of this.pending.splice(0)) waiter.reject(err);
    // An exit we asked for is not a loss worth reporting.
    if (this.closing === null) this.onLost?.(err);
  }
}
