/**
 * Activity, api and usage logs (DESIGN §10) are queued in memory and written to the store
 * in batches, one transaction per kind, off the request path. The queue is bounded: past
 * `queueLimit` entries new ones are dropped and counted rather than growing without end.
 * `close()` writes everything still queued.
 */
import type { Logger } from 'pino';
import type { Store } from '../store/db.ts';
import type { NewActivityLog, NewApiLog, NewUsageLog } from '../store/logs.ts';

export interface LogWriterOptions {
  readonly flushInterval: number;
  readonly batchSize: number;
  readonly queueLimit: number;
  /** false disables api and usage logs (activity is always kept). */
  readonly enabled?: boolean;
}

export class LogWriter {
  private readonly store: Store;
  private readonly logger: Logger;
  private readonly options: LogWriterOptions;
  private activityQueue: NewActivityLog[] = [];
  private apiQueue: NewApiLog[] = [];
  private usageQueue: NewUsageLog[] = [];
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Entries dropped because the queue was full, since start. */
  dropped = 0;
  /** Entries written, since start. */
  written = 0;

  constructor(store: Store, logger: Logger, options: LogWriterOptions) {
    this.store = store;
    this.logger = logger;
    this.options = options;
  }

  get depth(): number {
    return this.activityQueue.length + this.apiQueue.length + this.usageQueue.length;
  }

  activity(entry: NewActivityLog): void {
    if (this.admit()) this.activityQueue.push(entry);
  }

  api(entry: NewApiLog): void {
    if (this.options.enabled !== false && this.admit()) this.apiQueue.push(entry);
  }

  usage(entry: NewUsageLog): void {
    if (this.options.enabled !== false && this.admit()) this.usageQueue.push(entry);
  }

  /** Writes what is queued now, in batches. Safe to call at any time. */
  flush(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.depth > 0) {
      const size = this.options.batchSize;
      const activity = this.activityQueue.splice(0, size);
      const api = this.apiQueue.splice(0, size);
      const usage = this.usageQueue.splice(0, size);
      try {
        if (activity.length > 0) this.store.logs.insertActivity(activity);
        if (api.length > 0) this.store.logs.insertApi(api);
        if (usage.length > 0) this.store.logs.insertUsage(usage);
        this.written += activity.length + api.length + usage.length;
      } catch (err) {
        // The store refused the batch (disk full, locked past the busy timeout): keep the
        // entries for the next attempt unless that would overflow the queue.
        this.activityQueue.unshift(...activity);
        this.apiQueue.unshift(...api);
        this.usageQueue.unshift(...usage);
        this.logger.error({ err, queued: this.depth }, 'writing logs failed; will retry');
        this.trim();
        this.schedule();
        return;
      }
    }
  }

  /** Writes everything still queued and stops the timer. */
  close(): void {
    this.closed = true;
    this.flush();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private admit(): boolean {
    if (this.depth >= this.options.queueLimit) {
      this.dropped++;
      return false;
    }
    this.schedule();
    return true;
  }

  private schedule(): void {
    if (this.timer !== null || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flush();
    }, this.options.flushInterval);
    this.timer.unref();
  }

  private trim(): void {
    while (this.depth > this.options.queueLimit) {
      const longest = [this.apiQueue, this.usageQueue, this.activityQueue].reduce((a, b) => (b.length > a.length ? b : a));
      longest.shift();
      this.dropped++;
    }
  }
}
