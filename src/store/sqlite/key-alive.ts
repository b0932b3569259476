/**
 * Whether a key version still exists, exactly as the store says at the moment of asking
 * (DESIGN §13: a version destroyed while a request encrypted with it fails that request),
 * at the cost of one `pread` rather than one read transaction per question.
 *
 * The answer "alive" is remembered with the CommitWatch's look taken just before the row
 * was read. A later question whose look is byte for byte the same is answered "alive"
 * without reading: nothing was committed, by any connection, and nothing changed through
 * this one, since a moment when the row was there. Any commit (a log batch, another
 * process's rotation) makes the next question read the row again. "Gone" is never
 * remembered: a destroyed version stays destroyed, and it is read every time.
 */
import type { Repositories } from '../db.ts';
import type { CommitWatch } from './commit-watch.ts';

/** Versions remembered at once; past it the memory starts again (configurations come and go). */
const MAX_REMEMBERED = 1024;

/** One key version's questions: a request takes it once and asks it after every chunk. */
export class KeyAliveEntry {
  readonly #cache: KeyAliveCache;
  readonly configurationId: string;
  readonly version: number;
  /** The look at which the version was last read alive, or null. */
  seen: Buffer | null = null;

  constructor(cache: KeyAliveCache, configurationId: string, version: number) {
    this.#cache = cache;
    this.configurationId = configurationId;
    this.version = version;
  }

  alive(): boolean {
    return this.#cache.ask(this);
  }
}

export class KeyAliveCache {
  readonly #watch: CommitWatch;
  readonly #configurations: Repositories['configurations'];
  readonly #entries = new Map<string, KeyAliveEntry>();
  /** Rows read, since start: what the watch could not answer. */
  reads = 0;

  constructor(watch: CommitWatch, configurations: Repositories['configurations']) {
    this.#watch = watch;
    this.#configurations = configurations;
  }

  entry(configurationId: string, version: number): KeyAliveEntry {
    const name = `${configurationId}/${version}`;
    let entry = this.#entries.get(name);
    if (entry === undefined) {
      if (this.#entries.size >= MAX_REMEMBERED) this.#entries.clear();
      entry = new KeyAliveEntry(this, configurationId, version);
      this.#entries.set(name, entry);
    }
    return entry;
  }

  ask(entry: KeyAliveEntry): boolean {
    const look = this.#watch.look();
    const seen = entry.seen;
    if (look !== null && seen !== null && look.equals(seen)) return true;
    this.reads++;
    const alive = this.#configurations.keyAlive(entry.configurationId, entry.version);
    if (!alive || look === null) entry.seen = null;
    else if (seen !== null && seen.length === look.length) look.copy(seen);
    else entry.seen = Buffer.from(look);
    return alive;
  }
}
