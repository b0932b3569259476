/**
 * A replica's api and usage logs go to its control plane (`POST /api/v3/sync/logs`), so
 * the control plane's logs show the whole fleet. At least once: the shipping position per
 * kind (a row id) moves only after the control plane answered 2xx, so a batch whose answer
 * was lost is sent again, and the control plane stores each (instance id, row id) once.
 * The instance id is this store's own random id (shipped-logs.ts), so only this replica
 * can ship, or pre-empt, rows under it.
 *
 * The rows stay in the replica's store either way (retention removes them as usual): a
 * replica that cannot ship keeps its logs locally and catches up, oldest first, when the
 * control plane is back.
 *
 * Two answers are worked around rather than retried as they are: 413 (the control plane's
 * `sync.max_batch` is smaller than this batch) halves the batch, and a 422 that only
 * names ids the control plane does not know (a key or configuration deleted while the
 * rows waited) sends the rows again without those ids, or, for a usage row whose
 * configuration is gone, without the row; this replica's own log keeps it as it was.
 *
 * With several control-plane URLs, a failed round moves to the next at once and the
 * backoff applies only after every one failed in a row (control-plane-urls.ts). Instances
 * of one control plane share its store, so a batch sent again to another instance after
 * an answer was lost is still stored once.
 */
import { ControlPlaneUrls, shownUrl, requestTimeouts } from './control-plane-urls.ts';
import { Repeater } from './repeater.ts';
import type { Logger } from 'pino';
import { Agent, target } from '../http/undici.ts';
import type { Store } from '../store/db.ts';
import { SHIPPED_KINDS, type LogCursor, type ShippedKind, type ShippedLogs } from '../store/shipped-logs.ts';
import { Backoff } from './backoff.ts';

export const LOGS_PATH = '/api/v3/sync/logs';
/** Rows of each kind per request at most: about 0.5 MB of JSON, well under the endpoint's limit. */
export const SHIP_BATCH = 1000;
/**
 * How far the shipped ids move on when a log table was emptied and numbered from 1 again:
 * past every id shipped, including a batch sent but never acknowledged (a batch is at most
 * SHIP_BATCH rows of a kind), so the control plane never takes a new row for an old one.
 */
const RENUMBER_GAP = 1_000_000_000;
/** The fields of a row that name something on the control plane. */
const REFERENCE_FIELDS = new Set(['api_key_id', 'user_id', 'configuration_id']);

export interface LogShipperOptions {
  readonly store: Store;
  readonly logger: Logger;
  /** The control plane's base URLs, one or more instances, in the order to try them. */
  readonly urls: readonly string[];
  readonly apiKey: string;
  /** This replica's name in the control plane's logs. */
  readonly replica: string;
  /** This replica's instance id (ShippedLogsRepository.instanceId). */
  readonly instance: string;
  /** Milliseconds between rounds. */
  readonly interval: number;
  readonly batchSize?: number;
  readonly timeout?: number;
}

export class LogShipper {
  readonly #options: LogShipperOptions;
  readonly #backoff: Backoff;
  readonly #agent: Agent;
  readonly #urls: ControlPlaneUrls;
  #batchSize: number;
  readonly #repeater: Repeater<number>;
  #abort: AbortController | null = null;
  /** Rows the control plane confirmed, since start. */
  shipped = 0;

  constructor(options: LogShipperOptions) {
    this.#options = options;
    this.#backoff = new Backoff(options.interval);
    this.#agent = new Agent(requestTimeouts(options.interval, options.timeout));
    this.#urls = new ControlPlaneUrls(options.urls, LOGS_PATH);
    this.#batchSize = Math.max(1, Math.min(options.batchSize ?? SHIP_BATCH, SHIP_BATCH));
    this.#repeater = new Repeater(
      () => this.#round(),
      (outcome) => {
        if (outcome.ok) return this.#backoff.succeeded();
        if (this.#urls.retryAtOnce) {
          this.#options.logger.warn({ err: outcome.error, next: this.#urls.shown }, 'shipping logs to the control plane failed; trying the next control-plane URL');
          return 0;
        }
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

  /** The position in `state.control_plane.url` of the instance that took the last batch; null before one. */
  get servingIndex(): number | null {
    return this.#urls.lastGood;
  }

  /** One round; a failure moves to the next instance (a refusal too: the next may be a newer build). */
  async #round(): Promise<number> {
    try {
      return await this.#shipAll();
    } catch (err) {
      if (!this.#repeater.stopped) this.#urls.failed();
      throw err;
    }
  }

  async #shipAll(): Promise<number> {
    let total = 0;
    for (;;) {
      if (this.#repeater.stopped) return total;
      const { logs, cursors, full } = await this.#nextBatch();
      const rows = logs.api.length + logs.usage.length;
      if (rows === 0) return total;
      try {
        await this.#send(logs);
      } catch (err) {
        if (!(err instanceof ShipRefusedError)) throw err;
        if (err.status === 413 && this.#batchSize > 1) {
          this.#batchSize = Math.max(1, this.#batchSize >> 1);
          this.#options.logger.warn({ batchSize: this.#batchSize }, 'the control plane takes smaller log batches; sending fewer rows at a time');
          continue;
        }
        const repaired = err.status === 422 ? withoutUnknownReferences(logs, err.errors) : null;
        if (repaired === null) throw err;
        this.#options.logger.warn(
          { refused: Object.keys(err.errors ?? {}), dropped: rows - repaired.api.length - repaired.usage.length },
          'the control plane does not know some ids these log rows name (deleted since?); sending them without those ids',
        );
        await this.#send(repaired);
      }
      // Only now: a batch that failed, or whose answer was lost, is read again next round.
      await this.#options.store.transaction(async ({ shippedLogs }) => {
        for (const [kind, cursor] of cursors) await shippedLogs.putCursor(kind, cursor);
      });
      total += rows;
      this.shipped += rows;
      if (!full) return total;
    }
  }

  async #nextBatch(): Promise<{ logs: ShippedLogs; cursors: Map<ShippedKind, LogCursor>; full: boolean }> {
    const shippedLogs = this.#options.store.shippedLogs;
    const logs: ShippedLogs = { api: [], usage: [] };
    const cursors = new Map<ShippedKind, LogCursor>();
    let full = false;
    for (const kind of SHIPPED_KINDS) {
      let cursor = await shippedLogs.getCursor(kind);
      if (!(await shippedLogs.cursorValid(kind, cursor))) {
        this.#options.logger.warn({ kind, lastId: cursor.lastId }, 'the log table was emptied and renumbered since the last shipment; shipping from its start');
        cursor = { lastId: 0, lastRequestId: '', idBase: cursor.idBase + cursor.lastId + RENUMBER_GAP };
      }
      const rows = await shippedLogs.rowsAfter(kind, cursor.lastId, this.#batchSize);
      const last = rows.at(-1);
      if (last !== undefined) cursors.set(kind, { lastId: last.id, lastRequestId: last.request_id, idBase: cursor.idBase });
      // Shipped ids are the base plus the local id (see LogCursor).
      if (cursor.idBase !== 0) for (const row of rows) row.id += cursor.idBase;
      if (kind === 'api') logs.api = rows as ShippedLogs['api'];
      else logs.usage = rows as ShippedLogs['usage'];
      if (rows.length === this.#batchSize) full = true;
    }
    return { logs, cursors, full };
  }

  async #send(logs: ShippedLogs): Promise<void> {
    this.#abort = new AbortController();
    const url = this.#urls.url;
    const response = await this.#agent.request({
      ...target(url),
      method: 'POST',
      headers: { 'x-svc-authorization': this.#options.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ replica: this.#options.replica, instance: this.#options.instance, api: logs.api, usage: logs.usage }),
      signal: this.#abort.signal,
    });
    const text = await response.body.text();
    if (response.statusCode >= 200 && response.statusCode < 300) {
      if (this.#urls.succeeded()) this.#options.logger.info({ controlPlane: this.#urls.shown, index: this.#urls.index, of: this.#urls.count }, 'now shipping logs to this control-plane URL');
      return;
    }
    const message = `POST ${shownUrl(url)} answered ${response.statusCode}: ${text.slice(0, 200)}`;
    if (response.statusCode === 400 || response.statusCode === 413 || response.statusCode === 422) {
      throw new ShipRefusedError(message, response.statusCode, validationErrorsOf(text));
    }
    throw new Error(message);
  }
}

/** The control plane answered that the batch itself is wrong (400, 413, 422). */
class ShipRefusedError extends Error {
  override readonly name = 'ShipRefusedError';
  readonly status: number;
  /** The 422 answer's `errors`, keyed `api.3.user_id`. */
  readonly errors: Record<string, unknown> | null;

  constructor(message: string, status: number, errors: Record<string, unknown> | null) {
    super(message);
    this.status = status;
    this.errors = errors;
  }
}

function validationErrorsOf(text: string): Record<string, unknown> | null {
  try {
    const errors = (JSON.parse(text) as { errors?: unknown }).errors;
    return errors !== null && typeof errors === 'object' ? (errors as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * The batch without the ids a 422 named, when it named nothing else: api rows lose the id
 * (the columns allow null), usage rows whose configuration is unknown are left out (their
 * configuration is required). Null when the answer names anything else: that refusal is
 * not about ids that went away, and the batch is retried as it is.
 */
function withoutUnknownReferences(logs: ShippedLogs, errors: Record<string, unknown> | null): ShippedLogs | null {
  if (errors === null) return null;
  const named = new Map<string, Set<string>>();
  for (const key of Object.keys(errors)) {
    const match = /^(api|usage)\.(\d+)\.([a-z_]+)$/.exec(key);
    if (match === null || !REFERENCE_FIELDS.has(match[3]!)) return null;
    const row = `${match[1]}.${match[2]}`;
    let fields = named.get(row);
    if (fields === undefined) named.set(row, (fields = new Set()));
    fields.add(match[3]!);
  }
  if (named.size === 0) return null;
  const api = logs.api.map((row, index) => {
    const fields = named.get(`api.${index}`);
    if (fields === undefined) return row;
    return { ...row, ...Object.fromEntries([...fields].map((field) => [field, null])) };
  });
  const usage = logs.usage.flatMap((row, index) => {
    const fields = named.get(`usage.${index}`);
    if (fields === undefined) return [row];
    if (fields.has('configuration_id')) return [];
    return [{ ...row, ...Object.fromEntries([...fields].map((field) => [field, null])) }];
  });
  return { api, usage };
}
