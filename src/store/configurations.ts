import { randomUUID } from 'node:crypto';
import type { ApiKey } from './api-keys.ts';
import type { Transaction } from './db.ts';
import { all, atomically, get, run, shredding, type Dialect, type Step } from './query.ts';
import { definedOnly, nowIso, parseJsonArray, parseJsonObject, toBuffer, toBufferOrNull, type RowSource } from './sql.ts';

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

const INSERT = `
  INSERT INTO configurations (id, name, type, provider, proxy_slug, keyring_id, deterministic,
    min_decryption_version, destinations, fields, extra, source, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;
const UPDATE = `
  UPDATE configurations SET name = ?, provider = ?, proxy_slug = ?, min_decryption_version = ?,
    destinations = ?, fields = ?, extra = ?, updated_at = ?
   WHERE id = ?`;
const TOUCH = 'UPDATE configurations SET updated_at = ? WHERE id = ?';
const DELETE = 'DELETE FROM configurations WHERE id = ?';
const BY_ID = `${SELECT} WHERE c.id = ?`;
const BY_NAME = `${SELECT} WHERE c.name = ?`;
const BY_SLUG = `${SELECT} WHERE c.proxy_slug = ?`;
const LIST = `${SELECT} ORDER BY c.created_at, c.name`;
// A NULL scope (passed twice) means every configuration; otherwise a JSON array of ids,
// so one prepared statement serves scoped and unscoped API keys alike.
const PAGE = (d: Dialect): string => `${SELECT}
  WHERE CAST(? AS TEXT) IS NULL OR c.id IN (${d.jsonStrings('?')})
  ORDER BY c.created_at, c.${d.insertionOrder} LIMIT ? OFFSET ?`;
const COUNT = (d: Dialect): string => `SELECT count(*) AS n FROM configurations WHERE CAST(? AS TEXT) IS NULL OR id IN (${d.jsonStrings('?')})`;
const KEYS = 'SELECT version, wrapped, created_at, superseded_at, destroyed_at FROM data_keys WHERE configuration_id = ? ORDER BY version';
const INSERT_KEY = 'INSERT INTO data_keys (configuration_id, version, wrapped, created_at) VALUES (?, ?, ?, ?)';
const SUPERSEDE = 'UPDATE data_keys SET superseded_at = ? WHERE configuration_id = ? AND version < ? AND superseded_at IS NULL';
const KEY_ALIVE = 'SELECT 1 AS alive FROM data_keys WHERE configuration_id = ? AND version = ? AND destroyed_at IS NULL';
// The row is locked as it is read, so a destroy or rotation on another instance waits for
// this transaction (SQLite's writers are one at a time anyway).
const KEY_STATE = (d: Dialect): string => `
  SELECT k.destroyed_at, k.superseded_at,
    (SELECT max(n.version) FROM data_keys n WHERE n.configuration_id = k.configuration_id AND n.destroyed_at IS NULL) AS newest
    FROM data_keys k WHERE k.configuration_id = ? AND k.version = ?${d.lockRows('k')}`;
const SAMPLE_KEY = 'SELECT configuration_id, version, wrapped FROM data_keys WHERE length(wrapped) > 0 ORDER BY configuration_id, version LIMIT 1';
const SHRED_KEY = 'UPDATE data_keys SET wrapped = ?, destroyed_at = ? WHERE configuration_id = ? AND version = ?';
// Strictly later than before, even within the same millisecond: the codec caches of
// every process on this store rebuild only when the row's stamp changes.
const TOUCH_LATER = (d: Dialect): string => `UPDATE configurations SET updated_at = ${d.laterThan('updated_at', '?')} WHERE id = ?`;
const NO_BYTES = Buffer.alloc(0);

export class ConfigurationsRepository {
  /** Inserts the configuration and, for `encryption`, its key version 1 in one transaction. */
  *create(input: NewConfiguration): Step<Configuration> {
    const encryption = input.type === 'encryption';
    const keyringId = input.keyringId ?? null;
    const firstKey = input.firstWrappedKey ?? null;
    if (encryption !== (keyringId !== null) || encryption !== (firstKey !== null)) {
      throw new TypeError('An encryption configuration needs a keyringId and a firstWrappedKey; a provider configuration takes neither.');
    }
    const id = input.id ?? randomUUID();
    const self = this;
    return yield* atomically(function* () {
      const now = nowIso();
      yield* run(
        INSERT,
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
      if (firstKey !== null) yield* run(INSERT_KEY, id, 1, firstKey, now);
      return yield* self.#mustFind(id);
    });
  }

  /** Returns the updated configuration, or undefined when there is none with `id`. */
  *update(id: string, patch: ConfigurationPatch): Step<Configuration | undefined> {
    const self = this;
    return yield* atomically(function* () {
      const current = yield* self.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      yield* run(
        UPDATE,
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
      return yield* self.#mustFind(id);
    });
  }

  /** Deletes the configuration with its keys and classification links. */
  *delete(id: string): Step<boolean> {
    return (yield* run(DELETE, id)).changes > 0;
  }

  *findById(id: string): Step<Configuration | undefined> {
    const record = yield* get<ConfigurationRecord>(BY_ID, id);
    return record && toConfiguration(record);
  }

  *findByName(name: string): Step<Configuration | undefined> {
    const record = yield* get<ConfigurationRecord>(BY_NAME, name);
    return record && toConfiguration(record);
  }

  *findBySlug(slug: string): Step<Configuration | undefined> {
    const record = yield* get<ConfigurationRecord>(BY_SLUG, slug);
    return record && toConfiguration(record);
  }

  *list(): Step<Configuration[]> {
    return (yield* all<ConfigurationRecord>(LIST)).map(toConfiguration);
  }

  /** One page in creation order (ties by insertion), limited to `scope` (configuration ids) unless it is null. */
  *page(limit: number, offset: number, scope: readonly string[] | null = null): Step<Configuration[]> {
    const ids = scope === null ? null : JSON.stringify(scope);
    return (yield* all<ConfigurationRecord>(PAGE, ids, ids, limit, offset)).map(toConfiguration);
  }

  *count(scope: readonly string[] | null = null): Step<number> {
    const ids = scope === null ? null : JSON.stringify(scope);
    return (yield* get<{ n: number }>(COUNT, ids, ids))!.n;
  }

  /** One wrapped key of the store, to check a master key against; undefined when it holds none. */
  *sampleWrappedKey(): Step<{ configurationId: string; version: number; wrapped: Buffer } | undefined> {
    const row = yield* get<{ configuration_id: string; version: number; wrapped: Uint8Array }>(SAMPLE_KEY);
    return row === undefined ? undefined : { configurationId: row.configuration_id, version: row.version, wrapped: Buffer.from(row.wrapped) };
  }

  /** Every key version of the configuration, oldest first. */
  *keys(configurationId: string): Step<DataKey[]> {
    return (yield* all<DataKeyRecord>(KEYS, configurationId)).map((record) => ({
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
  *keyAlive(configurationId: string, version: number): Step<boolean> {
    return (yield* get(KEY_ALIVE, configurationId, version)) !== undefined;
  }

  /** Adds a key version (rotation), which supersedes the older ones. Throws if the version already exists. */
  *addKey(configurationId: string, version: number, wrapped: Buffer): Step<void> {
    yield* atomically(function* () {
      const now = nowIso();
      yield* run(INSERT_KEY, configurationId, version, wrapped, now);
      yield* run(SUPERSEDE, now, configurationId, version);
      yield* run(TOUCH, now, configurationId);
    });
  }

  /**
   * Crypto-shredding: marks the version destroyed and overwrites its wrapped key with an
   * empty blob in one transaction, so no row is ever "destroyed" yet still holding its key.
   * The newest live version is refused (new tokens need it), and so is one superseded at or
   * after `supersededBefore` (an ISO time; null: no such bound), or at an unknown time. The
   * checks run inside the write transaction, so a concurrent rotation or destroy from
   * another process cannot slip between them. The overwrite is `shredding`: no copy of the
   * old row is left readable where the database allows that.
   */
  *destroyKey(configurationId: string, version: number, supersededBefore: string | null = null): Step<DestroyKeyOutcome> {
    return yield* shredding(
      () =>
        atomically(function* (): Step<DestroyKeyOutcome> {
          const state = yield* get<{ destroyed_at: string | null; superseded_at: string | null; newest: number | null }>(KEY_STATE, configurationId, version);
          if (state === undefined) return 'not-found';
          if (state.destroyed_at !== null) return 'already-destroyed';
          if (state.newest === null || version >= state.newest) return 'current';
          if (supersededBefore !== null && (state.superseded_at === null || state.superseded_at >= supersededBefore)) return 'too-recent';
          const now = nowIso();
          yield* run(SHRED_KEY, NO_BYTES, now, configurationId, version);
          yield* run(TOUCH_LATER, now, configurationId);
          return 'destroyed';
        }),
      (outcome) => outcome === 'destroyed',
    );
  }

  *#mustFind(id: string): Step<Configuration> {
    const found = yield* this.findById(id);
    if (found === undefined) throw new Error(`Configuration ${id} vanished inside its own transaction.`);
    return found;
  }
}

/**
 * Holds, until the transaction ends, what deletions and the sweep below do one at a time on
 * a database that several instances share: two deletions that together leave a key
 * reaching nothing would otherwise each see the other's configuration still there.
 */
const KEY_SCOPE_LOCK = 'svc-key-scope';

/** Takes that lock: for a key's creation, which checks its configurations again under it. */
export function lockKeyScope(tx: Transaction): Promise<void> {
  return tx.lock(KEY_SCOPE_LOCK);
}

/**
 * Deletes a configuration, then revokes the keys that reach nothing (revokeKeysReachingNothing).
 * Run it inside a transaction. Null when there was no such configuration; else the keys revoked.
 */
export async function deleteConfiguration(tx: Transaction, id: string): Promise<ApiKey[] | null> {
  await lockKeyScope(tx);
  if (!(await tx.configurations.delete(id))) return null;
  return revokeKeysReachingNothing(tx);
}

/**
 * Revokes every active API key limited to configurations that are all deleted, and returns
 * the keys this call revoked. Such a key reaches nothing (ids are never reused), and its
 * listing could only show an empty `configurations`, which reads as "every configuration".
 * Run it inside a transaction: after a deletion, and by every seed (for keys left so by
 * older versions).
 *
 * The keys are read before the configurations: every configuration a key read here names
 * was committed before that key was, so the later read sees it, and a key made together
 * with its configuration by another instance meanwhile is never taken for an orphan.
 */
export async function revokeKeysReachingNothing(tx: Transaction): Promise<ApiKey[]> {
  await lockKeyScope(tx);
  const keys = (await tx.apiKeys.list()).filter((key) => key.status === 'active' && key.configurations.length > 0);
  if (keys.length === 0) return [];
  const live = new Set((await tx.configurations.list()).map((c) => c.id));
  const revoked: ApiKey[] = [];
  for (const key of keys) {
    if (key.configurations.some((c) => live.has(c))) continue;
    // Someone may have revoked it meanwhile: only what this call changed is reported.
    if (await tx.apiKeys.revokeActive(key.id)) revoked.push(key);
  }
  return revoked;
}
