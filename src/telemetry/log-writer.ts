/**
 * Activity, api and usage logs (DESIGN §10) are queued in memory and written to the store
 * in batches, off the request path: recording an entry is an array push.
 *
 * When writes happen:
 * - as soon as one kind has a full batch queued;
 * - otherwise `flushInterval` after the oldest unwritten entry arrived;
 * - everything still queued on `close()`.
 *
 * Each write takes at most `batchSize` entries of each kind and commits them in one
 * transaction. Where they are written:
 * - A database server (PostgreSQL): with awaited statements, nothing blocks.
 * - A file store with `thread: true` (`logs.writer: thread`): on a worker thread with its
 *   own connection (store/sqlite/sql-thread.ts), so no write or WAL checkpoint holds up the
 *   event loop. One batch is in flight at a time, which keeps the rows in order.
 * - Otherwise (`logs.writer: inline`, the default; an in-memory store; a thread that cannot
 *   run): on the main thread, one batch per turn of the event loop, so a backlog is drained
 *   in slices rather than one stall. Each batch holds up the requests in flight while it is
 *   written, which is why the interval is short (docs/configuration.md). Such a write does
 *   not wait for another connection's lock (that wait would block the event loop too); the
 *   batch fails at once and is retried.
 *
 * A batch the store refuses (disk full, locked, a database server down) is rolled back
 * whole and put back at the head of its queues, to be retried; because the batch is one
 * transaction, a retry never writes an entry twice. Retries back off from `flushInterval`
 * to RETRY_CAP_MS (or `flushInterval`, if longer), so a store that keeps refusing is not
 * asked twenty times a second. The queue is bounded: past `queueLimit` entries new ones
 * are dropped and counted rather than growing without end.
 */
import type { Logger } from 'pino';
import type { Store } from '../store/db.ts';
import { syncRepositories } from '../store/sqlite/connection.ts';
import { batchRuns, LOG_INSERTS, type LogBatch, type NewActivityLog, type NewApiLog, type NewUsageLog } from '../store/logs.ts';
import { SqlThread, type WriteRequest } from '../store/sqlite/sql-thread.ts';
import { Backoff } from '../sync/backoff.ts';

/** The longest wait between retries of a refused batch, unless `flushInterval` is longer. */
export const RETRY_CAP_MS = 1_000;

export interface LogWriterOptions {
  /** Milliseconds an entry may wait for a batch to fill before it is written anyway. */
  readonly flushInterval: number;
  /** Entries of each kind per transaction. */
  readonly batchSize: number;
  /** Entries queued (all kinds together) past which new ones are dropped. */
  readonly queueLimit: number;
  /** false disables api and usage logs (activity is always kept). */
  readonly enabled?: boolean;
  /** Write from a worker thread when the store is a file (default true). */
  readonly thread?: boolean;
}

export class LogWriter {
  private readonly store: Store;
  private readonly logger: Logger;
  private readonly options: LogWriterOptions;
  private readonly enabled: boolean;
  private activityQueue: NewActivityLog[] = [];
  private apiQueue: NewApiLog[] = [];
  private usageQueue: NewUsageLog[] = [];
  /** The interval write, or the retry after a failed batch. */
  private timer: NodeJS.Timeout | null = null;
  /** A full batch is waiting for the next turn of the event loop. */
  private immediate: NodeJS.Immediate | null = null;
  /** The last batch failed: wait for the timer instead of retrying on every full batch. */
  private failing = false;
  /** Delays between retries while batches keep failing. */
  private readonly retry: Backoff;
  /** The wait before the next retry, while failing. */
  private retryDelay = 0;
  private closed = false;
  private closing: Promise<void> | null = null;
  private thread: SqlThread | null = null;
  /** True on a database server (PostgreSQL): every batch is written with awaited statements. */
  private readonly remote: boolean;
  /** The batch the thread is writing. */
  private inFlight: LogBatch | null = null;
  /** Who waits for the batch in flight to be answered (closing, a flush). */
  private whenSettled: Array<() => void> = [];
  /** Entries not written: the queue was full, the writer was closed, or the store still refused them at close. */
  dropped = 0;
  /** Entries written, since start. */
  written = 0;
  /** Batches the store refused (each was retried). */
  failedBatches = 0;
  /** Batch writes made on the event loop (`logs.writer: inline`, or at close), refused ones included, since start. */
  inlineBatches = 0;
  /** Seconds the event loop spent writing them, since start: requests in flight waited that long. */
  inlineWriteSeconds = 0;

  constructor(store: Store, logger: Logger, options: LogWriterOptions) {
    this.store = store;
    this.logger = logger;
    this.options = options;
    this.enabled = options.enabled !== false;
    this.retry = new Backoff(options.flushInterval, { capFactor: Math.max(1, RETRY_CAP_MS / options.flushInterval) });
    // A database server is written to with awaited statements: no thread, nothing blocks.
    this.remote = store.kind === 'postgres';
    if (!this.remote && options.thread !== false && store.path !== ':memory:') this.thread = this.startThread(store.path);
  }

  get depth(): number {
    return this.activityQueue.length + this.apiQueue.length + this.usageQueue.length;
  }

  /** Whether batches are written on a worker thread. */
  get threaded(): boolean {
    return this.thread !== null;
  }

  activity(entry: NewActivityLog): void {
    if (this.admit()) this.queued(this.activityQueue.push(entry));
  }

  api(entry: NewApiLog): void {
    if (this.enabled && this.admit()) this.queued(this.apiQueue.push(entry));
  }

  usage(entry: NewUsageLog): void {
    if (this.enabled && this.admit()) this.queued(this.usageQueue.push(entry));
  }

  /**
   * Writes everything queued now, on this thread, batch after batch. Safe to call at any
   * time; a batch already handed to the writer thread is written by that thread. On a
   * database server the promise settles once everything queued has been written.
   */
  flush(): void | Promise<void> {
    if (this.remote) return this.drainRemote();
    this.drain(false);
  }

  /**
   * Waits for the thread's batch, writes everything still queued and stops. Entries
   * recorded afterwards are dropped (and counted): the store is about to close.
   */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    this.closed = true;
    this.clearTimers();
    await this.stopThread();
    // Shutting down, nothing left to hold up: waiting out another connection's lock beats losing the entries.
    if (this.remote) await this.drainRemote();
    else this.drain(true);
    const lost = this.depth;
    if (lost > 0) {
      this.logger.error({ lost }, 'log entries could not be written before closing');
      this.dropped += lost;
      this.activityQueue = [];
      this.apiQueue = [];
      this.usageQueue = [];
    }
  }

  /** After the batch in flight, every batch queued, one after the other; stops at a refused one. */
  private async drainRemote(): Promise<void> {
    await this.inFlightSettled();
    while (this.depth > 0) {
      const batch = this.take();
      try {
        await this.store.logs.insertBatch(batch, { wait: true });
      } catch (err) {
        this.refused(batch, err);
        return;
      }
      this.succeeded(batch);
    }
    if (this.depth === 0) this.clearTimers();
  }

  private async inFlightSettled(): Promise<void> {
    if (this.inFlight === null) return;
    await new Promise<void>((resolve) => {
      this.whenSettled.push(resolve);
    });
  }

  private drain(wait: boolean): void {
    while (this.depth > 0) {
      if (!this.writeHere(this.take(), wait)) break;
    }
    if (this.depth === 0) this.clearTimers();
  }

  private admit(): boolean {
    if (this.closed || this.depth >= this.options.queueLimit) {
      this.dropped++;
      return false;
    }
    return true;
  }

  /** After a push: `length` is the new length of the queue that grew. */
  private queued(length: number): void {
    if (length >= this.options.batchSize && !this.failing) this.writeSoon();
    else this.writeLater();
  }

  private writeSoon(): void {
    if (this.immediate !== null || this.closed) return;
    this.immediate = setImmediate(this.onImmediate);
    this.immediate.unref();
  }

  private writeLater(): void {
    if (this.timer !== null || this.closed) return;
    this.timer = setTimeout(this.onTimer, this.failing ? this.retryDelay : this.options.flushInterval);
    this.timer.unref();
  }

  // Arrows, so they can be handed to the timers as they are.
  private readonly onImmediate = (): void => {
    this.immediate = null;
    this.writeNext();
  };

  private readonly onTimer = (): void => {
    this.timer = null;
    this.writeNext();
  };

  /** Starts one batch; what comes next is decided when it is done. */
  private writeNext(): void {
    if (this.depth === 0 || this.inFlight !== null) return;
    const batch = this.take();
    if (this.remote) {
      this.inFlight = batch;
      this.store.logs.insertBatch(batch, { wait: true }).then(
        () => this.replied(batch, null),
        (err: Error) => this.replied(batch, err),
      );
      return;
    }
    if (this.thread !== null) {
      this.inFlight = batch;
      this.thread.write(writeRequest(batch)).then(
        () => this.replied(batch, null),
        (err: Error) => this.replied(batch, err),
      );
      return;
    }
    this.afterBatch(this.writeHere(batch, false));
  }

  /** After a batch: the next full one on the next turn, else the timer for the rest. */
  private afterBatch(ok: boolean): void {
    if (this.depth === 0) {
      this.clearTimers();
      return;
    }
    const full = Math.max(this.activityQueue.length, this.apiQueue.length, this.usageQueue.length) >= this.options.batchSize;
    if (ok && full) this.writeSoon();
    // A pending timer is kept: it bounds how long the oldest queued entry waits.
    else this.writeLater();
  }

  /** Writes a batch on this thread; false (and the batch back in the queue) if the store refused it. */
  private writeHere(batch: LogBatch, wait: boolean): boolean {
    const started = performance.now();
    try {
      // Synchronous on SQLite, where a refused batch must go back in the queue before the
      // next one is taken.
      syncRepositories(this.store).logs.insertBatch(batch, { wait });
    } catch (err) {
      this.refused(batch, err);
      return false;
    } finally {
      this.inlineBatches++;
      this.inlineWriteSeconds += (performance.now() - started) / 1000;
    }
    this.succeeded(batch);
    return true;
  }

  private take(): LogBatch {
    const size = this.options.batchSize;
    return { activity: this.activityQueue.splice(0, size), api: this.apiQueue.splice(0, size), usage: this.usageQueue.splice(0, size) };
  }

  private succeeded(batch: LogBatch): void {
    this.written += batch.activity.length + batch.api.length + batch.usage.length;
    if (this.failing) {
      this.failing = false;
      this.retry.succeeded();
      this.logger.info({ failedBatches: this.failedBatches, queued: this.depth }, 'writing logs works again');
    }
  }

  /**
   * The batch was rolled back whole: it goes back in front, so order and the retry stay
   * exact. A full queue is not checked: what was taken out goes back, nothing more.
   */
  private refused(batch: LogBatch, err: unknown): void {
    this.activityQueue = (batch.activity as NewActivityLog[]).concat(this.activityQueue);
    this.apiQueue = (batch.api as NewApiLog[]).concat(this.apiQueue);
    this.usageQueue = (batch.usage as NewUsageLog[]).concat(this.usageQueue);
    this.failedBatches++;
    if (!this.failing) this.logger.error({ err, queued: this.depth }, 'writing logs failed; will retry');
    this.failing = true;
    this.retryDelay = this.retry.failed();
    // A timer set for new entries would retry sooner than the backoff allows.
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.writeLater();
  }

  // -------------------------------------------------------------------------------------
  // The writer thread

  private startThread(path: string): SqlThread | null {
    try {
      const thread = new SqlThread(path, LOG_INSERTS);
      thread.onLost = (err) => this.lostThread(thread, err);
      return thread;
    } catch (err) {
      this.logger.warn({ err }, 'the log writer thread did not start; writing logs on the main thread');
      return null;
    }
  }

  private replied(batch: LogBatch, err: Error | null): void {
    if (this.inFlight !== batch) return;
    this.inFlight = null;
    if (err === null) this.succeeded(batch);
    else this.refused(batch, err);
    this.afterBatch(err === null);
    this.settle();
  }

  /** The thread died: writing goes on here (its batch comes back through `replied`). */
  private lostThread(thread: SqlThread, err: Error): void {
    if (this.thread !== thread) return;
    this.thread = null;
    this.logger.error({ err }, 'the log writer thread failed; writing logs on the main thread');
  }

  private settle(): void {
    const waiting = this.whenSettled;
    this.whenSettled = [];
    for (const resolve of waiting) resolve();
  }

  private async stopThread(): Promise<void> {
    const thread = this.thread;
    if (thread === null) return;
    await this.inFlightSettled();
    this.thread = null;
    await thread.close();
  }

  private clearTimers(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.immediate !== null) clearImmediate(this.immediate);
    this.timer = null;
    this.immediate = null;
  }
}

/** Kinds with no entries are left out. */
function writeRequest(batch: LogBatch): WriteRequest {
  return { op: 'write', runs: batchRuns(batch) };
}
