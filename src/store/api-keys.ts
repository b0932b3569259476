import { randomUUID } from 'node:crypto';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { definedOnly, nowIso, parseJsonArray, toBuffer, type RowSource } from './sql.ts';
import { runInTransaction } from './sqlite/transaction.ts';

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

export class ApiKeysRepository {
  readonly #db: DatabaseSync;
  readonly #insert: StatementSync;
  readonly #update: StatementSync;
  readonly #revoke: StatementSync;
  readonly #replaceHash: StatementSync;
  readonly #byId: StatementSync;
  readonly #byHash: StatementSync;
  readonly #byName: StatementSync;
  readonly #list: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#insert = db.prepare(`
      INSERT INTO api_keys (id, name, prefix, key_hash, user_id, permissions, configurations, source, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`);
    this.#update = db.prepare(`
      UPDATE api_keys SET name = ?, user_id = ?, permissions = ?, configurations = ?, updated_at = ?
       WHERE id = ? RETURNING *`);
    // Revoking twice keeps the first revoked_at: that is when the key stopped working.
    this.#revoke = db.prepare(`
      UPDATE api_keys SET status = 'revoked', revoked_at = ?, updated_at = ?
       WHERE id = ? AND status = 'active'`);
    this.#replaceHash = db.prepare('UPDATE api_keys SET prefix = ?, key_hash = ?, updated_at = ? WHERE id = ? RETURNING *');
    this.#byId = db.prepare('SELECT * FROM api_keys WHERE id = ?');
    this.#byHash = db.prepare('SELECT * FROM api_keys WHERE key_hash = ?');
    this.#byName = db.prepare('SELECT * FROM api_keys WHERE name = ?');
    // rowid breaks ties in insertion order: keys made in the same millisecond list as created.
    this.#list = db.prepare('SELECT * FROM api_keys ORDER BY created_at, rowid');
  }

  create(input: NewApiKey): ApiKey {
    const now = nowIso();
    const record = this.#insert.get(
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
    ) as unknown as ApiKeyRecord;
    return toApiKey(record);
  }

  /** Returns the updated key, or undefined when there is none with `id`. */
  update(id: string, patch: ApiKeyPatch): ApiKey | undefined {
    return runInTransaction(this.#db, () => {
      const current = this.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      const record = this.#update.get(
        next.name,
        next.userId,
        JSON.stringify(next.permissions),
        JSON.stringify(next.configurations),
        nowIso(),
        id,
      ) as unknown as ApiKeyRecord;
      return toApiKey(record);
    });
  }

  /** Includes revoked keys: the caller decides (revoked → 401). */
  findByHash(hash: Buffer): ApiKey | undefined {
    const record = this.#byHash.get(hash) as ApiKeyRecord | undefined;
    return record && toApiKey(record);
  }

  findById(id: string): ApiKey | undefined {
    const record = this.#byId.get(id) as ApiKeyRecord | undefined;
    return record && toApiKey(record);
  }

  findByName(name: string): ApiKey | undefined {
    const record = this.#byName.get(name) as ApiKeyRecord | undefined;
    return record && toApiKey(record);
  }

  list(): ApiKey[] {
    return (this.#list.all() as unknown as ApiKeyRecord[]).map(toApiKey);
  }

  /** Returns the key as it now is (already-revoked keys unchanged), or undefined when there is none. */
  revoke(id: string): ApiKey | undefined {
    const now = nowIso();
    this.#revoke.run(now, now, id);
    return this.findById(id);
  }

  /** Rotation: the old key stops working the moment this commits. */
  replaceHash(id: string, prefix: string, keyHash: Buffer): ApiKey | undefined {
    const record = this.#replaceHash.get(prefix, keyHash, nowIso(), id) as ApiKeyRecord | undefined;
    return record && toApiKey(record);
  }
}
