/**
 * Whether anything may have been committed to a SQLite store since an earlier look,
 * answered without a read transaction.
 *
 * A read transaction in WAL mode takes and drops a lock on the `-shm` file (two `fcntl`
 * calls), which makes even a one-row point read cost several microseconds under load. What
 * a reader learns at that moment comes from the WAL-index header at the start of `-shm`
 * (https://www.sqlite.org/walformat.html): every commit by any connection, in any process,
 * increments its change counter and rewrites both copies of it, second copy first, before
 * any reader can see the commit. Equal header bytes at two looks therefore mean that no
 * commit was published between them; reading the 96 bytes is one `pread`.
 *
 * Every connection to the file uses that header while this one is open: this connection
 * keeps a shared lock on the database, so no other can leave WAL mode or take the
 * exclusive lock that would put its WAL-index in private memory. The file is found by the
 * path SQLite itself resolved (`location()`, symbolic links followed) plus `-shm`, as
 * SQLite names it.
 *
 * The look also carries this connection's own change count (rows written outside the logs,
 * and rollbacks), which moves at once, before a commit: a transaction this process holds
 * open counts as a change. An in-memory database has no other connection, so that count is
 * the whole answer there. Whenever the watch cannot tell (not in WAL mode, the file cannot
 * be read, a header it does not recognise), `look()` answers null and the caller reads.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { endianness } from 'node:os';
import type { DatabaseSync } from 'node:sqlite';

/** Both copies of the WAL-index header, 48 bytes each. */
const HEADER_BYTES = 96;
/** The own change count, as a double, ahead of the header. */
const OWN_BYTES = 8;
/** `iVersion`, the header's first field, for every WAL-index SQLite 3.7.0 and later writes. */
const WAL_INDEX_VERSION = 3007000;
/** `isInit`: 1 once the header describes the WAL. */
const IS_INIT_OFFSET = 12;

export class CommitWatch {
  #fd: number | null;
  readonly #inMemory: boolean;
  readonly #ownChanges: () => number;
  readonly #now = Buffer.alloc(OWN_BYTES + HEADER_BYTES);
  /** The own change count alone: the whole look of an in-memory store. */
  readonly #own = this.#now.subarray(0, OWN_BYTES);

  private constructor(fd: number | null, inMemory: boolean, ownChanges: () => number) {
    this.#fd = fd;
    this.#inMemory = inMemory;
    this.#ownChanges = ownChanges;
  }

  /** For `db`, opened on a file in WAL mode or in memory; `ownChanges` counts this connection's changes. */
  static open(db: DatabaseSync, inMemory: boolean, ownChanges: () => number): CommitWatch {
    if (inMemory) return new CommitWatch(null, true, ownChanges);
    const mode = (db.prepare('PRAGMA journal_mode').get() as { journal_mode: string } | undefined)?.journal_mode;
    const location = db.location();
    if (mode !== 'wal' || location === null) return new CommitWatch(null, false, ownChanges);
    let fd: number | null;
    try {
      fd = openSync(`${location}-shm`, 'r');
    } catch {
      fd = null;
    }
    return new CommitWatch(fd, false, ownChanges);
  }

  /**
   * The store's state now, as bytes: two looks with equal bytes mean nothing was committed
   * and nothing changed through this connection between them. The buffer is reused by the
   * next look (copy it to keep it); null when the watch cannot tell.
   */
  look(): Buffer | null {
    const now = this.#now;
    now.writeDoubleLE(this.#ownChanges(), 0);
    if (this.#inMemory) return this.#own;
    if (this.#fd === null) return null;
    let read: number;
    try {
      read = readSync(this.#fd, now, OWN_BYTES, HEADER_BYTES, 0);
    } catch {
      return null;
    }
    if (read !== HEADER_BYTES || !recognised(now)) return null;
    return now;
  }

  /** Stops watching: later looks answer null (an in-memory store's own count aside). */
  close(): void {
    if (this.#fd === null) return;
    const fd = this.#fd;
    // Forgotten first: the number may name another file once it is closed.
    this.#fd = null;
    closeSync(fd);
  }
}

const LITTLE_ENDIAN = endianness() === 'LE';

/** The header's integers are in the machine's byte order. */
function recognised(look: Buffer): boolean {
  const version = LITTLE_ENDIAN ? look.readUInt32LE(OWN_BYTES) : look.readUInt32BE(OWN_BYTES);
  return version === WAL_INDEX_VERSION && look[OWN_BYTES + IS_INIT_OFFSET] === 1;
}
