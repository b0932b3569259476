/**
 * Log retention (`logs.retention`, DESIGN §10): once at start and then every `interval`,
 * rows older than the retention period are deleted.
 *
 * An hour of a busy instance's logs is millions of rows, and SQLite deletes about one
 * row per 8 µs (index entries included): minutes of work an hour, which must not run as
 * one stall of the event loop. So the delete goes in chunks, each its own transaction,
 * and:
 * - for a file store, on a worker thread with its own connection (sql-thread.ts);
 * - for an in-memory store (tests), on this thread with a turn of the event loop between
 *   chunks.
 *
 * On PostgreSQL, whose log tables are partitioned by day, each run first makes the coming
 * days' partitions and drops the days wholly past retention; the chunks then delete what
 * is left before the cutoff (its own day, and the DEFAULT partition), from this thread:
 * the database does the work, the event loop only awaits it.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { Store } from '../store/db.ts';
import { DELETE_CHUNK, LOG_KINDS, LOG_SQL, type LogKind } from '../store/logs.ts';
import { SqlThread } from '../store/sqlite/sql-thread.ts';

export interface RetentionOptions {
  /** Milliseconds a log row is kept. */
  readonly retention: number;
  /** Milliseconds between runs. */
  readonly interval?: number;
  /** The clock, for tests. */
  readonly now?: () => number;
  /** Delete from a worker thread when the store is a file (default true). */
  readonly thread?: boolean;
}

export type Deleted = Record<LogKind, number>;

const HOUR = 60 * 60 * 1000;

export class RetentionJob {
  private readonly store: Store;
  private readonly logger: Logger;
  private readonly retention: number;
  private readonly interval: number;
  private readonly now: () => number;
  private readonly threaded: boolean;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<Deleted> | null = null;
  private stopped = false;
  /** Tells a thread run to stop between chunks. */
  private readonly stopFlag = new Int32Array(new SharedArrayBuffer(4));

  constructor(store: Store, logger: Logger, options: RetentionOptions) {
    this.store = store;
    this.logger = logger;
    this.retention = options.retention;
    this.interval = options.interval ?? HOUR;
    this.now = options.now ?? Date.now;
    // A thread of its own only for a SQLite file: a database server's deletes are awaited anyway.
    this.threaded = options.thread !== false && store.kind === 'sqlite' && store.path !== ':memory:';
  }

  /** Runs once now and then every interval, without keeping the process alive. */
  start(): void {
    if (this.timer !== null || this.stopped) return;
    this.timer = setInterval(() => void this.run(), this.interval);
    this.timer.unref();
    void this.run();
  }

  /**
   * Deletes what is past retention; resolves with the rows deleted per kind. A run that
   * is already going is joined rather than started twice.
   */
  run(): Promise<Deleted> {
    this.running ??= this.sweep().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** Stops the timer and waits for a run in progress to stop after its current chunk. */
  async stop(): Promise<void> {
    this.stopped = true;
    Atomics.store(this.stopFlag, 0, 1);
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  private async sweep(): Promise<Deleted> {
    // After stop() the store may be closed.
    if (this.stopped) return { activity: 0, api: 0, usage: 0 };
    const cutoff = new Date(this.now() - this.retention).toISOString();
    let deleted: Deleted;
    try {
      // A failure here leaves the coming days to the DEFAULT partition; it does not stop the deletion.
      await this.store.logs.preparePartitions(new Date(this.now()).toISOString()).catch((err: unknown) => {
        this.logger.error({ err }, 'making the log partitions of the coming days failed');
      });
      // Before the probe: a past day's partition goes even when it holds no row.
      deleted = await this.store.logs.dropPartitionsOlderThan(cutoff);
      // The probe spares a thread start when there is nothing to delete (a fresh or quiet store).
      if (await this.store.logs.anyOlderThan(cutoff)) {
        const rows = this.threaded ? await this.sweepOnThread(cutoff).catch((err: unknown) => this.fallBack(err, cutoff)) : await this.sweepHere(cutoff);
        for (const kind of LOG_KINDS) deleted[kind] += rows[kind];
      }
    } catch (err) {
      // The next run tries again; the service keeps serving meanwhile.
      this.logger.error({ err, cutoff }, 'deleting old logs failed');
      return { activity: 0, api: 0, usage: 0 };
    }
    if (deleted.activity + deleted.api + deleted.usage > 0) this.logger.info({ cutoff, deleted }, 'deleted logs past retention');
    return deleted;
  }

  private async sweepHere(cutoff: string): Promise<Deleted> {
    const deleted: Deleted = { activity: 0, api: 0, usage: 0 };
    for (const kind of LOG_KINDS) {
      for (;;) {
        // Checked before every chunk: stop() is followed by closing the store.
        if (this.stopped) return deleted;
        const n = await this.store.logs.deleteChunkOlderThan(kind, cutoff);
        deleted[kind] += n;
        if (n < DELETE_CHUNK) break;
        await nextTurn();
      }
    }
    return deleted;
  }

  /** The thread failed (or could not start): this run goes on here, slice by slice. */
  private fallBack(err: unknown, cutoff: string): Promise<Deleted> {
    this.logger.warn({ err }, 'the retention thread failed; deleting old logs on the main thread');
    return this.sweepHere(cutoff);
  }

  private async sweepOnThread(cutoff: string): Promise<Deleted> {
    const thread = new SqlThread(this.store.path, LOG_SQL.deleteChunk);
    try {
      const changes = await thread.sweep({ op: 'sweep', names: LOG_KINDS, params: [cutoff, cutoff], chunk: DELETE_CHUNK, stop: this.stopFlag });
      return { activity: changes[0] ?? 0, api: changes[1] ?? 0, usage: changes[2] ?? 0 };
    } finally {
      await thread.close();
    }
  }
}
