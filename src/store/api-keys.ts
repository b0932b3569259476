import { randomUUID } from 'node:crypto';
import { all, atomically, get, run, type Dialect, type Step } from './query.ts';
import { definedOnly, nowIso, parseJsonArray, toBuffer, type RowSource } from './sql.ts';

export type ApiKeyStatus = 'active' | 'revoked';

export interface ApiKey {
  id: string;
  name: string;
  /** The first 12 characters of the key, safe to show. */
  prefix: string;
  /** SHA-256 of the full key; the key itself is never stored. */
  keyHash: Buffer;
  userId: number;
  /** Permission scope; empty narrows nothing. */
  permissions: string[];
  /** Configuration ids the key may use; empty narrows nothing. */
  configurations: string[];
  status: ApiKeyStatus;
  source: RowSource;
  createdAt: string;
  updatedAt: string;
  revokedAt: string | null;
}

export interface NewApiKey {
  name: string;
  prefix: string;
  keyHash: Buffer;
  userId: number;
  permissions?: readonly string[];
  configurations?: readonly string[];
  /** Default `api`. */
  source?: RowSource;
}

export interface ApiKeyPatch {
  name?: string;
  userId?: number;
  permissions?: readonly string[];
  configurations?: readonly string[];
}

interface ApiKeyRecord {
  id: string;
  name: string;
  prefix: string;
  key_hash: Uint8Array;
  user_id: number;
  permissions: string;
  configurations: string;
  status: ApiKeyStatus;
  source: RowSource;
  created_at: string;
  updated_at: string;
  revoked_at: string | null;
}

function toApiKey(record: ApiKeyRecord): ApiKey {
  return {
    id: record.id,
    name: record.name,
    prefix: record.prefix,
    keyHash: toBuffer(record.key_hash),
    userId: record.user_id,
    permissions: parseJsonArray<string>(record.permissions),
    configurations: parseJsonArray<string>(record.configurations),
    status: record.status,
    source: record.source,
    createdAt: record.created_at,
    updatedAt: record.updated_at,
    revokedAt: record.revoked_at,
  };
}

const INSERT = `
  INSERT INTO api_keys (id, name, prefix, key_hash, user_id, permissions, configurations, source, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`;
const UPDATE = `
  UPDATE api_keys SET name = ?, user_id = ?, permissions = ?, configurations = ?, updated_at = ?
   WHERE id = ? RETURNING *`;
// Revoking twice keeps the first revoked_at: that is when the key stopped working.
const REVOKE = `
  UPDATE api_keys SET status = 'revoked', revoked_at = ?, updated_at = ?
   WHERE id = ? AND status = 'active'`;
const REPLACE_HASH = 'UPDATE api_keys SET prefix = ?, key_hash = ?, updated_at = ? WHERE id = ? RETURNING *';
const BY_ID = 'SELECT * FROM api_keys WHERE id = ?';
const BY_HASH = 'SELECT * FROM api_keys WHERE key_hash = ?';
const BY_NAME = 'SELECT * FROM api_keys WHERE name = ?';
// Insertion order breaks ties: keys made in the same millisecond list as created.
const LIST = (d: Dialect): string => `SELECT * FROM api_keys ORDER BY created_at, ${d.insertionOrder}`;

export class ApiKeysRepository {
  *create(input: NewApiKey): Step<ApiKey> {
    const now = nowIso();
    const record = (yield* get<ApiKeyRecord>(
      INSERT,
      randomUUID(),
      input.name,
      input.prefix,
      input.keyHash,
      input.userId,
      JSON.stringify(input.permissions ?? []),
      JSON.stringify(input.configurations ?? []),
      input.source ?? 'api',
      now,
      now,
    ))!;
    return toApiKey(record);
  }

  /** Returns the updated key, or undefined when there is none with `id`. */
  *update(id: string, patch: ApiKeyPatch): Step<ApiKey | undefined> {
    const self = this;
    return yield* atomically(function* () {
      const current = yield* self.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      const record = (yield* get<ApiKeyRecord>(
        UPDATE,
        next.name,
        next.userId,
        JSON.stringify(next.permissions),
        JSON.stringify(next.configurations),
        nowIso(),
        id,
      ))!;
      return toApiKey(record);
    });
  }

  /** Includes revoked keys: the caller decides (revoked → 401). */
  *findByHash(hash: Buffer): Step<ApiKey | undefined> {
    const record = yield* get<ApiKeyRecord>(BY_HASH, hash);
    return record && toApiKey(record);
  }

  *findById(id: string): Step<ApiKey | undefined> {
    const record = yield* get<ApiKeyRecord>(BY_ID, id);
    return record && toApiKey(record);
  }

  *findByName(name: string): Step<ApiKey | undefined> {
    const record = yield* get<ApiKeyRecord>(BY_NAME, name);
    return record && toApiKey(record);
  }

  *list(): Step<ApiKey[]> {
    return (yield* all<ApiKeyRecord>(LIST)).map(toApiKey);
  }

  /** Returns the key as it now is (already-revoked keys unchanged), or undefined when there is none. */
  *revoke(id: string): Step<ApiKey | undefined> {
    yield* this.revokeActive(id);
    return yield* this.findById(id);
  }

  /** Revokes the key if it is active; true when this call revoked it. */
  *revokeActive(id: string): Step<boolean> {
    const now = nowIso();
    return (yield* run(REVOKE, now, now, id)).changes > 0;
  }

  /** Rotation: the old key stops working the moment this commits. */
  *replaceHash(id: string, prefix: string, keyHash: Buffer): Step<ApiKey | undefined> {
    const record = yield* get<ApiKeyRecord>(REPLACE_HASH, prefix, keyHash, nowIso(), id);
    return record && toApiKey(record);
  }
}
