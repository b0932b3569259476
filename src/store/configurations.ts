import { randomUUID } from 'node:crypto';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { definedOnly, nowIso, parseJsonArray, parseJsonObject, toBuffer, toBufferOrNull, type RowSource } from './sql.ts';
import { runInTransaction } from './sqlite/transaction.ts';

export type ConfigurationType = 'encryption' | 'provider';

export interface Configuration {
  id: string;
  name: string;
  type: ConfigurationType;
  provider: string | null;
  proxySlug: string | null;
  /** 16 random bytes bound into every token's AAD; null for provider configurations. */
  keyringId: Buffer | null;
  deterministic: boolean;
  minDecryptionVersion: number;
  /** Newest key version that is not destroyed; null when there is none (provider configurations). */
  keyVersion: number | null;
  destinations: string[];
  fields: string[];
  /** Other provider values, e.g. `groups` with their members. */
  extra: Record<string, unknown>;
  source: RowSource;
  createdAt: string;
  updatedAt: string;
}

export interface DataKey {
  version: number;
  /** The data key wrapped under the master key; never the raw key. */
  wrapped: Buffer;
  createdAt: string;
  /** When a newer version became current; null while this one is current. */
  supersededAt: string | null;
  destroyedAt: string | null;
}

export interface NewConfiguration {
  /**
   * Default: a random UUID. Pass one when the first key was wrapped with the id as
   * associated data and so had to exist before the row.
   */
  id?: string;
  name: string;
  type: ConfigurationType;
  provider?: string | null;
  proxySlug?: string | null;
  deterministic?: boolean;
  minDecryptionVersion?: number;
  destinations?: readonly string[];
  fields?: readonly string[];
  extra?: Record<string, unknown>;
  /** Default `api`. */
  source?: RowSource;
  /** Required for `encryption`, absent for `provider`. */
  keyringId?: Buffer | null;
  /** Key version 1, wrapped. Required for `encryption`, absent for `provider`. */
  firstWrappedKey?: Buffer | null;
}

/** `type`, `deterministic` and the keyring are fixed at creation. */
export interface ConfigurationPatch {
  name?: string;
  provider?: string | null;
  proxySlug?: string | null;
  minDecryptionVersion?: number;
  destinations?: readonly string[];
  fields?: readonly string[];
  extra?: Record<string, unknown>;
}

interface ConfigurationRecord {
  id: string;
  name: string;
  type: ConfigurationType;
  provider: string | null;
  proxy_slug: string | null;
  keyring_id: Uint8Array | null;
  deterministic: number;
  min_decryption_version: number;
  key_version: number | null;
  destinations: string;
  fields: string;
  extra: string;
  source: RowSource;
  created_at: string;
  updated_at: string;
}

/**
 * What `destroyKey` did; anything but `destroyed` changed nothing. `too-recent`: the
 * version stopped being current after the `supersededBefore` bound (or when is not known).
 */
export type DestroyKeyOutcome = 'destroyed' | 'not-found' | 'already-destroyed' | 'current' | 'too-recent';

interface DataKeyRecord {
  version: number;
  wrapped: Uint8Array;
  created_at: string;
  superseded_at: string | null;
  destroyed_at: string | null;
}

function toConfiguration(record: ConfigurationRecord): Configuration {
  return {
    id: record.id,
    name: record.name,
    type: record.type,
    provider: record.provider,
    proxySlug: record.proxy_slug,
    keyringId: toBufferOrNull(record.keyring_id),
    deterministic: record.deterministic === 1,
    minDecryptionVersion: record.min_decryption_version,
    keyVersion: record.key_version,
    destinations: parseJsonArray<string>(record.destinations),
    fields: parseJsonArray<string>(record.fields),
    extra: parseJsonObject(record.extra),
    source: record.source,
    createdAt: record.created_at,
    updatedAt: record.updated_at,
  };
}

const SELECT = `SELECT c.*,
  (SELECT max(k.version) FROM data_keys k WHERE k.configuration_id = c.id AND k.destroyed_at IS NULL) AS key_version
  FROM configurations c`;

export class ConfigurationsRepository {
  readonly #db: DatabaseSync;
  readonly #insert: StatementSync;
  readonly #update: StatementSync;
  readonly #touch: StatementSync;
  readonly #delete: StatementSync;
  readonly #byId: StatementSync;
  readonly #byName: StatementSync;
  readonly #bySlug: StatementSync;
  readonly #list: StatementSync;
  readonly #page: StatementSync;
  readonly #count: StatementSync;
  readonly #keys: StatementSync;
  readonly #insertKey: StatementSync;
  readonly #supersede: StatementSync;
  readonly #keyAlive: StatementSync;
  readonly #keyState: StatementSync;
  readonly #shredKey: StatementSync;
  readonly #sampleKey: StatementSync;
  readonly #touchLater: StatementSync;
  readonly #secureDelete: StatementSync;
  readonly #checkpoint: StatementSync;
  readonly #inMemory: boolean;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#insert = db.prepare(`
      INSERT INTO configurations (id, name, type, provider, proxy_slug, keyring_id, deterministic,
        min_decryption_version, destinations, fields, extra, source, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    this.#update = db.prepare(`
      UPDATE configurations SET name = ?, provider = ?, proxy_slug = ?, min_decryption_version = ?,
        destinations = ?, fields = ?, extra = ?, updated_at = ?
       WHERE id = ?`);
    this.#touch = db.prepare('UPDATE configurations SET updated_at = ? WHERE id = ?');
    this.#delete = db.prepare('DELETE FROM configurations WHERE id = ?');
    this.#byId = db.prepare(`${SELECT} WHERE c.id = ?`);
    this.#byName = db.prepare(`${SELECT} WHERE c.name = ?`);
    this.#bySlug = db.prepare(`${SELECT} WHERE c.proxy_slug = ?`);
    this.#list = db.prepare(`${SELECT} ORDER BY c.created_at, c.name`);
    // A NULL scope means every configuration; otherwise a JSON array of ids, so one
    // prepared statement serves scoped and unscoped API keys alike.
    this.#page = db.prepare(`${SELECT}
      WHERE ?1 IS NULL OR c.id IN (SELECT value FROM json_each(?1))
      ORDER BY c.created_at, c.rowid LIMIT ?2 OFFSET ?3`);
    this.#count = db.prepare('SELECT count(*) AS n FROM configurations WHERE ?1 IS NULL OR id IN (SELECT value FROM json_each(?1))');
    this.#keys = db.prepare('SELECT version, wrapped, created_at, superseded_at, destroyed_at FROM data_keys WHERE configuration_id = ? ORDER BY version');
    this.#insertKey = db.prepare('INSERT INTO data_keys (configuration_id, version, wrapped, created_at) VALUES (?, ?, ?, ?)');
    this.#supersede = db.prepare('UPDATE data_keys SET superseded_at = ?1 WHERE configuration_id = ?2 AND version < ?3 AND superseded_at IS NULL');
    this.#keyAlive = db.prepare('SELECT 1 AS alive FROM data_keys WHERE configuration_id = ? AND version = ? AND destroyed_at IS NULL');
    this.#keyState = db.prepare(`
      SELECT k.destroyed_at, k.superseded_at,
        (SELECT max(n.version) FROM data_keys n WHERE n.configuration_id = k.configuration_id AND n.destroyed_at IS NULL) AS newest
        FROM data_keys k WHERE k.configuration_id = ? AND k.version = ?`);
    this.#sampleKey = db.prepare("SELECT configuration_id, version, wrapped FROM data_keys WHERE length(wrapped) > 0 ORDER BY configuration_id, version LIMIT 1");
    this.#shredKey = db.prepare("UPDATE data_keys SET wrapped = x'', destroyed_at = ? WHERE configuration_id = ? AND version = ?");
    // Strictly later than before, even within the same millisecond: the codec caches of
    // every process on this store rebuild only when the row's stamp changes.
    this.#touchLater = db.prepare(`
      UPDATE configurations SET updated_at = max(?1, strftime('%Y-%m-%dT%H:%M:%fZ', updated_at, '+0.001 seconds'))
       WHERE id = ?2`);
    this.#secureDelete = db.prepare('PRAGMA secure_delete');
    this.#checkpoint = db.prepare('PRAGMA wal_checkpoint(TRUNCATE)');
    this.#inMemory = (db.prepare('PRAGMA database_list').get() as { file: string }).file === '';
  }

  /** Inserts the configuration and, for `encryption`, its key version 1 in one transaction. */
  create(input: NewConfiguration): Configuration {
    const encryption = input.type === 'encryption';
    const keyringId = input.keyringId ?? null;
    const firstKey = input.firstWrappedKey ?? null;
    if (encryption !== (keyringId !== null) || encryption !== (firstKey !== null)) {
      throw new TypeError('An encryption configuration needs a keyringId and a firstWrappedKey; a provider configuration takes neither.');
    }
    const id = input.id ?? randomUUID();
    return runInTransaction(this.#db, () => {
      const now = nowIso();
      this.#insert.run(
        id,
        input.name,
        input.type,
        input.provider ?? null,
        input.proxySlug ?? null,
        keyringId,
        input.deterministic === true ? 1 : 0,
        input.minDecryptionVersion ?? 1,
        JSON.stringify(input.destinations ?? []),
        JSON.stringify(input.fields ?? []),
        JSON.stringify(input.extra ?? {}),
        input.source ?? 'api',
        now,
        now,
      );
      if (firstKey !== null) this.#insertKey.run(id, 1, firstKey, now);
      return this.#mustFind(id);
    });
  }

  /** Returns the updated configuration, or undefined when there is none with `id`. */
  update(id: string, patch: ConfigurationPatch): Configuration | undefined {
    return runInTransaction(this.#db, () => {
      const current = this.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      this.#update.run(
        next.name,
        next.provider,
        next.proxySlug,
        next.minDecryptionVersion,
        JSON.stringify(next.destinations),
        JSON.stringify(next.fields),
        JSON.stringify(next.extra),
        nowIso(),
        id,
      );
      return this.#mustFind(id);
    });
  }

  /** Deletes the configuration with its keys and classification links. */
  delete(id: string): boolean {
    return this.#delete.run(id).changes > 0;
  }

  findById(id: string): Configuration | undefined {
    const record = this.#byId.get(id) as ConfigurationRecord | undefined;
    return record && toConfiguration(record);
  }

  findByName(name: string): Configuration | undefined {
    const record = this.#byName.get(name) as ConfigurationRecord | undefined;
    return record && toConfiguration(record);
  }

  findBySlug(slug: string): Configuration | undefined {
    const record = this.#bySlug.get(slug) as ConfigurationRecord | undefined;
    return record && toConfiguration(record);
  }

  list(): Configuration[] {
    return (this.#list.all() as unknown as ConfigurationRecord[]).map(toConfiguration);
  }

  /** One page in creation order (ties by insertion), limited to `scope` (configuration ids) unless it is null. */
  page(limit: number, offset: number, scope: readonly string[] | null = null): Configuration[] {
    const rows = this.#page.all(scope === null ? null : JSON.stringify(scope), limit, offset) as unknown as ConfigurationRecord[];
    return rows.map(toConfiguration);
  }

  count(scope: readonly string[] | null = null): number {
    return (this.#count.get(scope === null ? null : JSON.stringify(scope)) as { n: number }).n;
  }

  /** Every key version of the configuration, oldest first. */
  /** One wrapped key of the store, to check a master key against; undefined when it holds none. */
  sampleWrappedKey(): { configurationId: string; version: number; wrapped: Buffer } | undefined {
    const row = this.#sampleKey.get() as { configuration_id: string; version: number; wrapped: Uint8Array } | undefined;
    return row === undefined ? undefined : { configurationId: row.configuration_id, version: row.version, wrapped: Buffer.from(row.wrapped) };
  }

  keys(configurationId: string): DataKey[] {
    return (this.#keys.all(configurationId) as unknown as DataKeyRecord[]).map((record) => ({
      version: record.version,
      wrapped: toBuffer(record.wrapped),
      createdAt: record.created_at,
      supersededAt: record.superseded_at,
      destroyedAt: record.destroyed_at,
    }));
  }

  /**
   * Whether the version exists and is not destroyed, read now rather than from any cache:
   * the data plane asks it when an encryption ends, so that no token of a version destroyed
   * meanwhile is handed out (one primary-key lookup).
   */
  keyAlive(configurationId: string, version: number): boolean {
    return this.#keyAlive.get(configurationId, version) !== undefined;
  }

  /** Adds a key version (rotation), which supersedes the older ones. Throws if the version already exists. */
  addKey(configurationId: string, version: number, wrapped: Buffer): void {
    runInTransaction(this.#db, () => {
      const now = nowIso();
      this.#insertKey.run(configurationId, version, wrapped, now);
      this.#supersede.run(now, configurationId, version);
      this.#touch.run(now, configurationId);
    });
  }

  /**
   * Crypto-shredding: marks the version destroyed and overwrites its wrapped key with an
   * empty blob in one transaction, so no row is ever "destroyed" yet still holding its key.
   * The newest live version is refused (new tokens need it), and so is one superseded at or
   * after `supersededBefore` (an ISO time; null: no such bound), or at an unknown time. The
   * checks run inside the write transaction, so a concurrent rotation or destroy from
   * another process cannot slip between them.
   *
   * secure_delete makes SQLite zero the freed bytes of the old row instead of leaving
   * them in the page; the TRUNCATE checkpoint then moves the page into the database file
   * and empties the WAL, where older images of the page may still sit. The checkpoint is
   * best effort: a reader holding an old snapshot defers it to a later checkpoint.
   */
  destroyKey(configurationId: string, version: number, supersededBefore: string | null = null): DestroyKeyOutcome {
    const previous = (this.#secureDelete.get() as { secure_delete: number }).secure_delete;
    this.#db.exec('PRAGMA secure_delete = ON');
    let outcome: DestroyKeyOutcome;
    try {
      outcome = runInTransaction(this.#db, () => {
        const state = this.#keyState.get(configurationId, version) as
          | { destroyed_at: string | null; superseded_at: string | null; newest: number | null }
          | undefined;
        if (state === undefined) return 'not-found';
        if (state.destroyed_at !== null) return 'already-destroyed';
        if (state.newest === null || version >= state.newest) return 'current';
        if (supersededBefore !== null && (state.superseded_at === null || state.superseded_at >= supersededBefore)) return 'too-recent';
        const now = nowIso();
        this.#shredKey.run(now, configurationId, version);
        this.#touchLater.run(now, configurationId);
        return 'destroyed';
      });
    } finally {
      this.#db.exec(`PRAGMA secure_delete = ${Number(previous)}`);
    }
    if (outcome === 'destroyed' && !this.#inMemory && !this.#db.isTransaction) this.#checkpoint.get();
    return outcome;
  }

  #mustFind(id: string): Configuration {
    const found = this.findById(id);
    if (found === undefined) throw new Error(`Configuration ${id} vanished inside its own transaction.`);
    return found;
  }
}
