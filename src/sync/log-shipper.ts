/**
 * A replica's api and usage logs go to its control plane (`POST /api/v3/sync/logs`), so
 * the control plane's logs show the whole fleet. At least once: the shipping position per
 * kind (a row id) moves only after the control plane answered 2xx, so a batch whose answer
 * was lost is sent again, and the control plane stores each (replica, row) once.
 *
 * The rows stay in the replica's store either way (retention removes them as usual): a
 * replica that cannot ship keeps its logs locally and catches up, oldest first, when the
 * control plane is back.
 */
import { controlPlaneUrl } from './control-plane-url.ts';
import { Repeater } from './repeater.ts';
import type { Logger } from 'pino';
import { Agent, request } from 'undici';
import type { Store } from '../store/db.ts';
import { SHIPPED_KINDS, type LogCursor, type ShippedKind, type ShippedLogs } from '../store/shipped-logs.ts';
import { Backoff } from './backoff.ts';

export const LOGS_PATH = '/api/v3/sync/logs';
/** Rows of each kind per request: about 0.5 MB of JSON, well under the endpoint's limit. */
export const SHIP_BATCH = 1000;

export interface LogShipperOptions {
  readonly store: Store;
  readonly logger: Logger;
  readonly url: string;
  readonly apiKey: string;
  /** This replica's name in the control plane's logs. */
  readonly replica: string;
  /** Milliseconds between rounds. */
  readonly interval: number;
  readonly batchSize?: number;
  readonly timeout?: number;
}

export class LogShipper {
  readonly #options: LogShipperOptions;
  readonly #backoff: Backoff;
  readonly #agent: Agent;
  readonly #logsUrl: string;
  readonly #batchSize: number;
  readonly #repeater: Repeater<number>;
  #abort: AbortController | null = null;
  /** Rows the control plane confirmed, since start. */
  shipped = 0;

  constructor(options: LogShipperOptions) {
    this.#options = options;
    this.#backoff = new Backoff(options.interval);
    const timeout = options.timeout ?? 30_000;
    this.#agent = new Agent({ headersTimeout: timeout, bodyTimeout: timeout, connectTimeout: Math.min(timeout, 10_000) });
    this.#logsUrl = controlPlaneUrl(options.url, LOGS_PATH);
    this.#batchSize = options.batchSize ?? SHIP_BATCH;
    this.#repeater = new Repeater(
      () => this.#shipAll(),
      (outcome) => {
        if (outcome.ok) return this.#backoff.succeeded();
        const wait = this.#backoff.failed();
        const details = { err: outcome.error, failures: this.#backoff.failures, retryInMs: wait };
        // A refusal of the batch itself will not go away by waiting: say so louder.
        if (outcome.error instanceof ShipRefusedError) this.#options.logger.error(details, 'the control plane refused a log batch; keeping it and retrying');
        else this.#options.logger.warn(details, 'shipping logs to the control plane failed; keeping them and retrying');
        return wait;
      },
    );
  }

  start(): void {
    this.#repeater.start(this.#options.interval);
  }

  /** Stops after the batch in flight; what is not shipped stays for the next start. */
  async stop(): Promise<void> {
    const stopped = this.#repeater.stop();
    this.#abort?.abort();
    await stopped;
    await this.#agent.close();
  }

  /** Ships everything written so far, batch after batch. Resolves to the rows shipped; rejects when a batch failed. */
  shipOnce(): Promise<number> {
    return this.#repeater.runOnce();
  }

  async #shipAll(): Promise<number> {
    let total = 0;
    for (;;) {
      if (this.#repeater.stopped) return total;
      const { logs, cursors, full } = this.#nextBatch();
      const rows = logs.api.length + logs.usage.length;
      if (rows === 0) return total;
      await this.#send(logs);
      // Only now: a batch that failed, or whose answer was lost, is read again next round.
      const shippedLogs = this.#options.store.shippedLogs;
      this.#options.store.transaction(() => {
        for (const [kind, cursor] of cursors) shippedLogs.putCursor(kind, cursor);
      });
      total += rows;
      this.shipped += rows;
      if (!full) return total;
    }
  }

  #nextBatch(): { logs: ShippedLogs; cursors: Map<ShippedKind, LogCursor>; full: boolean } {
    const shippedLogs = this.#options.store.shippedLogs;
    const logs: ShippedLogs = { api: [], usage: [] };
    const cursors = new Map<ShippedKind, LogCursor>();
    let full = false;
    for (const kind of SHIPPED_KINDS) {
      let cursor = shippedLogs.getCursor(kind);
      if (!shippedLogs.cursorValid(kind, cursor)) {
        this.#options.logger.warn({ kind, lastId: cursor.lastId }, 'the log table was emptied and renumbered since the last shipment; shipping from its start');
        cursor = { lastId: 0, lastRequestId: '' };
      }
      const rows = kind === 'api' ? shippedLogs.rowsAfter('api', cursor.lastId, this.#batchSize) : shippedLogs.rowsAfter('usage', cursor.lastId, this.#batchSize);
      if (kind === 'api') logs.api = rows as ShippedLogs['api'];
      else logs.usage = rows as ShippedLogs['usage'];
      const last = rows.at(-1);
      if (last !== undefined) cursors.set(kind, { lastId: last.id, lastRequestId: last.request_id });
      if (rows.length === this.#batchSize) full = true;
    }
    return { logs, cursors, full };
  }

  async #send(logs: ShippedLogs): Promise<void> {
    this.#abort = new AbortController();
    const response = await request(this.#logsUrl, {
      method: 'POST',
      headers: { 'x-svc-authorization': this.#options.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ replica: this.#options.replica, api: logs.api, usage: logs.usage }),
      dispatcher: this.#agent,
      signal: this.#abort.signal,
    });
    const text = await response.body.text();
    if (response.statusCode >= 200 && response.statusCode < 300) return;
    const message = `POST ${this.#logsUrl} answered ${response.statusCode}: ${text.slice(0, 200)}`;
    throw response.statusCode === 400 || response.statusCode === 413 || response.statusCode === 422 ? new ShipRefusedError(message) : new Error(message);
  }
}

/** The control plane answered that the batch itself is wrong (400, 413, 422). */
class ShipRefusedError extends Error {
  override readonly name = 'ShipRefusedError';
}
