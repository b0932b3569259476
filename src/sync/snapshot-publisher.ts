/**
 * The control plane's side of snapshots (docs/replication.md): what it serves on
 * `GET /api/v3/sync/snapshot`, built from its store, versioned, signed (snapshot-mac.ts)
 * and cached, whole or narrowed to a key's configurations (snapshot-scope.ts).
 *
 * Versions only move forward: a new one is max(last + 1, the Unix time in seconds), so a
 * control plane restored from a backup, whose counter went back, still issues versions
 * above the ones its replicas hold. They also stay close to the clock, because replicas
 * refuse a version more than MAX_VERSION_LEAD_SECONDS ahead of theirs: a burst of changes
 * may run the counter at most VERSION_LEAD_SECONDS ahead, after which a new version is
 * minted at most once a second (the change waits for it, a second at most), so the lead
 * stops growing.
 */
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import type { Store } from '../store/db.ts';
import type { SectionName, StateRows } from '../store/replication.ts';
import { trackStateChanges } from '../store/sqlite/state-changes.ts';
import type { SnapshotMac } from './snapshot-mac.ts';
import { scopeKey, scopeState } from './snapshot-scope.ts';
import { contentDigest, sectionDigests, sectionTexts, snapshotBody, snapshotDigest, type SectionDigests } from './snapshot.ts';

const gzipAsync = promisify(gzip);

export interface PublishedSnapshot {
  readonly version: number;
  readonly digest: string;
  /** The JSON body. */
  readonly body: Buffer;
  readonly gzipped: Buffer;
}

/**
 * Cross-process changes to the store (the `keys` and `init` commands run against the
 * control plane's file) are only visible as "some other connection committed", which the
 * log writer's thread also does every second under traffic. Such a change is picked up by
 * a full re-read at most this often, rather than at every poll.
 */
export const FOREIGN_RECHECK_MS = 2_000;

/**
 * How far ahead of the clock a burst of changes may run the version before new versions
 * are held to one a second. Well under the replicas' bound (MAX_VERSION_LEAD_SECONDS,
 * 3600), so a control plane whose clock is up to 50 minutes ahead of a replica's still
 * issues versions that replica takes.
 */
export const VERSION_LEAD_SECONDS = 600;

/** Distinct scopes cached at once; a fleet has a handful (one per replica key at most). */
const MAX_CACHED_SCOPES = 64;

export interface PublisherOptions {
  readonly foreignRecheckMs?: number;
  readonly versionLeadSeconds?: number;
  /** Wall time (versions) and a monotonic clock (rechecks, minting pace), in milliseconds. */
  readonly clock?: { readonly wallMs: () => number; readonly monotonicMs: () => number };
}

/** Tells whether the state may have changed since `restart`. */
interface ChangeDetector {
  readonly changed: boolean;
  restart(): void;
}

/**
 * On SQLite, the session extension's record of this connection's writes to the state
 * tables (other connections' commits are noticed through othersCommitStamp). On
 * PostgreSQL, the store's change stamp, which follows the state version of every instance.
 */
function detectChanges(store: Store): ChangeDetector {
  if (store.kind === 'sqlite') return trackStateChanges(store);
  let seen = store.changeStamp();
  return {
    get changed() {
      return store.changeStamp() !== seen;
    },
    restart() {
      seen = store.changeStamp();
    },
  };
}

/** The state moved between reading it and minting its version: read it again. */
const STALE = Symbol('stale');

/** The state the published version was minted for. */
interface Base {
  readonly version: number;
  readonly content: string;
  readonly rows: StateRows;
  /** The canonical texts of the whole state's sections, made for its digests. */
  readonly texts: Record<SectionName, string>;
  readonly sections: SectionDigests;
  whole: Promise<PublishedSnapshot> | null;
  readonly scoped: Map<string, Promise<PublishedSnapshot>>;
}

/**
 * Builds the snapshots a control plane serves. The state is read again only when it may
 * have changed: at once after a change to the state tables through this process's
 * connection (every management write), and at most every FOREIGN_RECHECK_MS after a
 * commit by another connection. A state equal to the last one keeps its version and its
 * already compressed bodies.
 */
export class SnapshotPublisher {
  readonly #store: Store;
  readonly #mac: SnapshotMac;
  readonly #tracker: ChangeDetector;
  readonly #foreignRecheck: number;
  readonly #lead: number;
  readonly #clock: NonNullable<PublisherOptions['clock']>;
  #base: Base | null = null;
  #refreshing: Promise<Base> | null = null;
  #seenOthersCommit = -1;
  #builtAt = 0;
  /** Monotonic time of the last version minted by this process. */
  #mintedAt = -Infinity;
  /** A change is waiting for the minting pace: build again from this monotonic time on. */
  #heldUntil: number | null = null;

  constructor(store: Store, mac: SnapshotMac, options: PublisherOptions = {}) {
    this.#store = store;
    this.#mac = mac;
    this.#foreignRecheck = options.foreignRecheckMs ?? FOREIGN_RECHECK_MS;
    this.#lead = options.versionLeadSeconds ?? VERSION_LEAD_SECONDS;
    this.#clock = options.clock ?? { wallMs: Date.now, monotonicMs: () => performance.now() };
    this.#tracker = detectChanges(store);
  }

  /** The current snapshot, whole (`scope` null) or as a key limited to `scope` may see it. */
  async current(scope: ReadonlySet<string> | null = null): Promise<PublishedSnapshot> {
    const base = await this.#fresh();
    if (scope === null) return (base.whole ??= this.#publish(base, base.texts, () => (base.whole = null), base.sections));
    const key = scopeKey(scope);
    let published = base.scoped.get(key);
    if (published === undefined) {
      if (base.scoped.size >= MAX_CACHED_SCOPES) base.scoped.clear();
      published = this.#publish(base, sectionTexts(scopeState(base.rows, scope)), () => base.scoped.delete(key));
      base.scoped.set(key, published);
    }
    return published;
  }

  /**
   * The base, rebuilt first if the state has changed. One rebuild at a time: a caller that
   * finds one running waits for it and then checks again, so it never gets a base read
   * before a change it made.
   */
  async #fresh(): Promise<Base> {
    while (this.#refreshing !== null) await this.#refreshing.catch(() => {});
    const refreshing = this.#refresh();
    this.#refreshing = refreshing;
    try {
      return await refreshing;
    } finally {
      this.#refreshing = null;
    }
  }

  async #refresh(): Promise<Base> {
    const othersCommit = this.#store.othersCommitStamp();
    const now = this.#clock.monotonicMs();
    // On PostgreSQL every instance's change moves the tracker's stamp already.
    const foreign = this.#store.kind === 'sqlite' && othersCommit !== this.#seenOthersCommit && now - this.#builtAt >= this.#foreignRecheck;
    const due = this.#heldUntil !== null && now >= this.#heldUntil;
    if (this.#base !== null && !foreign && !due && !this.#tracker.changed) return this.#base;
    for (;;) {
      // Before reading: a change made from here on is one the next call must see.
      this.#tracker.restart();
      this.#seenOthersCommit = othersCommit;
      this.#builtAt = now;
      this.#heldUntil = null;
      const { rows, stateVersion } = await this.#store.replication.readStateAt();
      const texts = sectionTexts(rows);
      const sections = sectionDigests(texts);
      const content = contentDigest(sections);
      if (this.#base !== null && content === this.#base.content) return this.#base;
      const version = await this.#versionFor(content, sections, this.#base === null, stateVersion);
      if (version === STALE) continue;
      if (version === null) {
        // Too far ahead of the clock to mint again this second: serve the last snapshot a
        // little longer, and build again once the pace allows.
        this.#heldUntil = this.#mintedAt + 1000;
        return this.#base!;
      }
      this.#base = { version, content, rows, texts, sections, whole: null, scoped: new Map() };
      return this.#base;
    }
  }

  /** The body of `texts` at the base's version, signed and gzipped; `forget` drops it from the cache if that fails. */
  #publish(base: Base, texts: Record<SectionName, string>, forget: () => void, sections?: SectionDigests): Promise<PublishedSnapshot> {
    const { digest, body } = snapshotBody(base.version, texts, this.#mac, sections);
    const published = gzipAsync(body).then((gzipped) => ({ version: base.version, digest, body, gzipped }));
    // Never keep a failure: the next call builds again.
    published.catch(forget);
    return published;
  }

  /**
   * The published version for `content`: the stored one when it was minted for this
   * content, else a new one; null when the pace holds a new one back (never on the
   * first build, which has nothing else to serve); STALE when the state has moved past
   * `stateVersion` since it was read.
   */
  #versionFor(content: string, sections: SectionDigests, first: boolean, stateVersion: number | null): Promise<number | null | typeof STALE> {
    return this.#store.transaction(async ({ replication, lock }) => {
      // Instances on one database mint one at a time, each for the state as it is now: one
      // that read the state before another's change committed reads it again rather than
      // minting a newer version for older rows.
      await lock('svc-snapshot-version');
      if (stateVersion !== null && (await replication.stateVersion()) !== stateVersion) return STALE;
      const last = await replication.getSync('published');
      if (last !== undefined && contentDigest(JSON.parse(last.sections) as SectionDigests) === content) return last.version;
      const monotonic = this.#clock.monotonicMs();
      const clock = Math.floor(this.#clock.wallMs() / 1000);
      const version = Math.max((last?.version ?? 0) + 1, clock);
      if (!first && version > clock + this.#lead && monotonic - this.#mintedAt < 1000) return null;
      this.#mintedAt = monotonic;
      await replication.putSync('published', {
        version,
        digest: snapshotDigest(version, sections),
        sections: JSON.stringify(sections),
        body: null,
        updatedAt: new Date(this.#clock.wallMs()).toISOString(),
      });
      return version;
    });
  }
}
