/**
 * A process-log line for events that may come by the thousand (unauthenticated requests):
 * at most one line per kind per interval, saying how many were seen since the last.
 * Unbounded input never becomes unbounded output.
 */
import type { Logger } from 'pino';

const INTERVAL_MS = 10_000;

export class LogSampler {
  private readonly logger: Logger;
  private readonly message: string;
  private readonly intervalMs: number;
  private readonly kinds = new Map<string, { last: number; seen: number }>();

  constructor(logger: Logger, message: string, intervalMs = INTERVAL_MS) {
    this.logger = logger;
    this.message = message;
    this.intervalMs = intervalMs;
  }

  /** Counts one event of `kind`; logs it (with the count since the last line) when the interval has passed. */
  note(kind: string, fields: Record<string, unknown>): void {
    const now = performance.now();
    let entry = this.kinds.get(kind);
    if (entry === undefined) {
      entry = { last: Number.NEGATIVE_INFINITY, seen: 0 };
      this.kinds.set(kind, entry);
    }
    entry.seen++;
    if (now - entry.last < this.intervalMs) return;
    this.logger.info({ kind, ...fields, count: entry.seen }, this.message);
    entry.last = now;
    entry.seen = 0;
  }
}
