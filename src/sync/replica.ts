/**
 * A replica (`state.source: control-plane`) pulls the control plane's snapshot every
 * `poll_interval`, checks it and applies it in one transaction (snapshot.ts). The applied
 * snapshot is kept in the store, so a replica restarted while the control plane is down
 * serves the last good state at once; it is ready only once it holds one.
 *
 * Each poll sends the applied digest as If-None-Match: an unchanged state costs the
 * control plane a 304 and the replica nothing.
 *
 * With several control-plane URLs, a failed poll moves to the next at once, and the
 * backoff applies only after a round in which every one failed (control-plane-urls.ts):
 * instances of one control plane serve one state and one digest, so the next instance
 * answers the same If-None-Match with a 304.
 */
import { ControlPlaneUrls, shownUrl, requestTimeouts } from './control-plane-urls.ts';
import { Repeater } from './repeater.ts';
import { hostname } from 'node:os';
import { promisify } from 'node:util';
import { gunzip, gunzipSync, gzip } from 'node:zlib';
import type { Logger } from 'pino';
import { Agent, target } from '../http/undici.ts';
import type { Config } from '../config/load.ts';
import type { Store } from '../store/db.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import { Backoff } from './backoff.ts';
import { LogShipper } from './log-shipper.ts';
import { applySnapshot, SnapshotRejectedError, verifySnapshot, versionBound, type VerifiedSnapshot } from './snapshot.ts';
import { SnapshotMac } from './snapshot-mac.ts';
import type { MasterKey } from '../crypto/master-key.ts';

const gunzipAsync = promisify(gunzip);
const gzipAsync = promisify(gzip);

export const SNAPSHOT_PATH = '/api/v3/sync/snapshot';

/** Far above any real state (10,000 classifications are a few MB); a bound, not a budget. */
const MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024;

export interface ReplicaOptions {
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** Checks the MAC of every snapshot, fetched or persisted. */
  readonly mac: SnapshotMac;
  /** The control plane's base URLs (no `/api`), one or more instances, in the order to try them. */
  readonly urls: readonly string[];
  readonly apiKey: string;
  /** Milliseconds. */
  readonly pollInterval: number;
  /** Milliseconds for the answer's headers and for each pause in its body; bounded by pollInterval (requestTimeouts). */
  readonly timeout?: number;
}

export type PollOutcome = 'applied' | 'unchanged' | 'failed';

/** A network or HTTP failure: the control plane could not be asked. */
class PollFailedError extends Error {
  override readonly name = 'PollFailedError';
}

export class Replica {
  readonly #options: ReplicaOptions;
  readonly #backoff: Backoff;
  readonly #agent: Agent;
  readonly #urls: ControlPlaneUrls;
  #applied: { version: number; digest: string } | null = null;
  readonly #repeater: Repeater<PollOutcome>;
  #abort: AbortController | null = null;
  /** Polls begun and finished since start: a change committed before poll n began is applied when poll n has finished. */
  pollsStarted = 0;
  pollsFinished = 0;

  constructor(options: ReplicaOptions) {
    this.#options = options;
    this.#backoff = new Backoff(options.pollInterval);
    this.#agent = new Agent(requestTimeouts(options.pollInterval, options.timeout));
    this.#urls = new ControlPlaneUrls(options.urls, SNAPSHOT_PATH);
    this.#repeater = new Repeater(
      () => this.#poll(),
      (outcome) => {
        if (outcome.ok && outcome.value !== 'failed') return this.#backoff.succeeded();
        return this.#urls.retryAtOnce ? 0 : this.#backoff.failed();
      },
    );
  }

  /** A snapshot is applied: the replica has a state to serve. */
  get hasState(): boolean {
    return this.#applied !== null;
  }

  get appliedVersion(): number | null {
    return this.#applied?.version ?? null;
  }

  /** The position in `state.control_plane.url` of the instance that answered the last good poll; null before one. */
  get servingIndex(): number | null {
    return this.#urls.lastGood;
  }

  /**
   * Brings back the snapshot kept in the store, checked again and re-applied in full (so a
   * store changed by other means returns to it). Called at start, before the first poll:
   * a replica whose control plane is down serves from here.
   */
  async loadPersisted(): Promise<boolean> {
    const { store, logger, metrics } = this.#options;
    const row = await store.replication.getSync('applied');
    if (row === undefined || row.body === null) return false;
    try {
      // No version bound here: this copy passed it when it was applied, and a clock set
      // back since must not cost the replica the state it holds.
      const snapshot = verifySnapshot(gunzipSync(row.body), this.#options.mac);
      await applySnapshot(store, snapshot, row.body, { force: true });
      this.#accepted(snapshot);
      logger.info({ version: snapshot.version }, 'serving the persisted control-plane snapshot');
      return true;
    } catch (err) {
      metrics.reloadFailures.inc();
      if (err instanceof SnapshotRejectedError) metrics.countSnapshotRefused(err.reason);
      logger.error({ reason: refusalDetails(err) }, 'the persisted control-plane snapshot could not be used; waiting for the control plane');
      return false;
    }
  }

  /** Polls now, then every interval (or on the backoff after failures) until `stop`. */
  start(): void {
    this.#repeater.start(0);
  }

  async stop(): Promise<void> {
    const stopped = this.#repeater.stop();
    this.#abort?.abort();
    await stopped;
    await this.#agent.close();
  }

  /** One poll: fetch, check, apply. Never throws; failures are logged and counted. */
  pollOnce(): Promise<PollOutcome> {
    return this.#repeater.runOnce();
  }

  async #poll(): Promise<PollOutcome> {
    this.pollsStarted++;
    try {
      return await this.#pollSteps();
    } finally {
      this.pollsFinished++;
    }
  }

  async #pollSteps(): Promise<PollOutcome> {
    const { store, logger, metrics } = this.#options;
    try {
      const fetched = await this.#fetch();
      if (fetched === null) {
        this.#answered();
        return 'unchanged';
      }
      const snapshot = verifySnapshot(fetched.body, this.#options.mac, { maxVersion: versionBound() });
      const gzipped = fetched.gzipped ?? (await gzipAsync(fetched.body));
      if (this.#repeater.stopped) return 'unchanged';
      const outcome = await applySnapshot(store, snapshot, gzipped);
      this.#accepted(snapshot);
      this.#answered();
      if (outcome.kind === 'unchanged') return 'unchanged';
      logger.info({ version: snapshot.version, rows: outcome.changed }, 'applied a control-plane snapshot');
      return 'applied';
    } catch (err) {
      if (this.#repeater.stopped) return 'failed';
      // Any failure moves on, a refused snapshot too: another instance may serve a good one.
      const failedAt = this.#urls.shown;
      this.#urls.failed();
      const next = this.#urls.retryAtOnce ? this.#urls.shown : null;
      metrics.reloadFailures.inc();
      if (err instanceof SnapshotRejectedError) {
        // Nothing of a refused snapshot is kept (not its version either), so the next good
        // one applies as if this one had never come.
        metrics.countSnapshotRefused(err.reason);
        logger.error({ reason: refusalDetails(err), keeping: this.#applied?.version ?? null, controlPlane: failedAt, next }, 'rejected a control-plane snapshot; keeping the last good state');
      } else {
        logger.warn({ err, failures: this.#backoff.failures + 1, keeping: this.#applied?.version ?? null, controlPlane: failedAt, next }, 'could not reach the control plane; keeping the last good state');
      }
      return 'failed';
    }
  }

  /** The instance in use answered with a good snapshot, or a 304: keep it, and say so when it is not the one that answered before. */
  #answered(): void {
    if (!this.#urls.succeeded()) return;
    this.#options.metrics.controlPlaneUrl.set(this.#urls.index);
    this.#options.logger.info({ controlPlane: this.#urls.shown, index: this.#urls.index, of: this.#urls.count }, 'now polling this control-plane URL');
  }

  #accepted(snapshot: VerifiedSnapshot): void {
    this.#applied = { version: snapshot.version, digest: snapshot.digest };
    this.#options.metrics.stateVersion.set(snapshot.version);
  }

  /** The body (decompressed) and, when it came gzipped, the bytes as sent; null for 304. */
  async #fetch(): Promise<{ body: Buffer; gzipped: Buffer | null } | null> {
    const headers: Record<string, string> = { 'x-svc-authorization': this.#options.apiKey, 'accept-encoding': 'gzip' };
    if (this.#applied !== null) headers['if-none-match'] = `"${this.#applied.digest}"`;
    this.#abort = new AbortController();
    const url = this.#urls.url;
    let response;
    try {
      response = await this.#agent.request({ ...target(url), method: 'GET', headers, signal: this.#abort.signal });
    } catch (err) {
      throw new PollFailedError(`GET ${shownUrl(url)} failed: ${(err as Error).message}`, { cause: err });
    }
    if (response.statusCode === 304) {
      await response.body.dump();
      return null;
    }
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw new PollFailedError(`GET ${shownUrl(url)} answered ${response.statusCode}`);
    }
    const raw = await readLimited(response.body, MAX_SNAPSHOT_BYTES).catch((err: unknown) => {
      throw new PollFailedError(`reading the snapshot failed: ${(err as Error).message}`, { cause: err });
    });
    const encoding = String(response.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    if (encoding === 'identity') return { body: raw, gzipped: null };
    if (encoding !== 'gzip' && encoding !== 'x-gzip') throw new SnapshotRejectedError(`unsupported content-encoding ${encoding}`);
    try {
      return { body: await gunzipAsync(raw, { maxOutputLength: MAX_SNAPSHOT_BYTES }), gzipped: raw };
    } catch (err) {
      throw new SnapshotRejectedError('the gzip stream is corrupt or truncated', { cause: err });
    }
  }
}

/**
 * What the log says about a refusal: the reason and its message, never the cause, whose
 * text (a JSON parser's, say) can quote the body.
 */
function refusalDetails(err: unknown): { kind: string; message: string } {
  if (err instanceof SnapshotRejectedError) return { kind: err.reason, message: err.message };
  return { kind: 'unreadable', message: err instanceof Error ? err.message : String(err) };
}

async function readLimited(body: AsyncIterable<Buffer>, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > limit) throw new Error(`the snapshot is larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

/** Everything a replica runs beside its listeners: the snapshot poller and the log shipper. */
export interface Replication {
  readonly replica: Replica;
  readonly shipper: LogShipper;
  /**
   * `services.health`: ready while listening and holding a snapshot. The `ready` flag
   * app.ts sets on listen and close is the listening half.
   */
  readonly health: { ready: boolean };
  /** At start, before listening: serve the persisted snapshot, if there is one. */
  resume(): Promise<void>;
  start(): void;
  stop(): Promise<void>;
}

/** The replication of a `state.source: control-plane` service; null for the other sources. */
export async function createReplication(config: Config, store: Store, master: MasterKey, logger: Logger, metrics: Metrics): Promise<Replication | null> {
  const controlPlane = config.state.control_plane;
  if (config.state.source !== 'control-plane' || controlPlane?.url === undefined || controlPlane.api_key === undefined) return null;
  const seeded = Object.values(config.seed).some((list) => list.length > 0);
  if (seeded) logger.warn('state.source is control-plane: the seed section only serves until the first snapshot from the control plane, which replaces it');
  const replica = new Replica({
    store,
    logger,
    metrics,
    mac: new SnapshotMac(master),
    urls: controlPlane.url,
    apiKey: controlPlane.api_key,
    pollInterval: controlPlane.poll_interval,
  });
  const shipper = new LogShipper({
    store,
    logger,
    urls: controlPlane.url,
    apiKey: controlPlane.api_key,
    replica: controlPlane.replica_name ?? hostname(),
    // Made here, at the replica's first start, and kept in its store from then on.
    instance: await store.shippedLogs.instanceId(),
    interval: controlPlane.ship_interval,
    // Half of the batch limit for each kind, so a fleet with one configuration never exceeds it.
    batchSize: Math.floor(config.sync.max_batch / 2),
  });
  let listening = false;
  return {
    replica,
    shipper,
    health: {
      get ready() {
        return listening && replica.hasState;
      },
      set ready(value: boolean) {
        listening = value;
      },
    },
    async resume() {
      // Until a snapshot is applied there is no state version to report.
      metrics.stateVersion.set(0);
      await replica.loadPersisted();
    },
    start() {
      replica.start();
      shipper.start();
    },
    async stop() {
      await Promise.all([replica.stop(), shipper.stop()]);
    },
  };
}
