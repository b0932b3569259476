/**
 * The store side of replication (docs/replication.md): reading the whole management state
 * for a snapshot, applying one, and the `sync_state` rows. Shipped logs are in
 * shipped-logs.ts.
 *
 * Ids are kept as they are on the control plane: tokens bind classification ids and
 * keyring ids, access tokens carry user ids, and api keys name configurations by id, so a
 * replica that renumbered anything would break them.
 */
import type { Classification, ClassificationMembers } from './classifications.ts';
import { all, atomically, deferForeignKeys, get, run, shredding, snapshot, stateVersion, type Dialect, type Step } from './query.ts';
import { toBuffer } from './sql.ts';

// ---------------------------------------------------------------------------------------
// The state, as rows. Binary columns are Buffers here; snapshot.ts decides their encoding.

export interface RoleRow {
  id: number;
  name: string;
  description: string | null;
  permissions: string[];
}

/** No password hash: replicas hold no login (DESIGN §13), so snapshots never carry one. */
export interface UserRow {
  id: number;
  name: string;
  email: string;
  disabled: boolean;
  twoFactorEnabled: boolean;
  roleIds: number[];
  createdAt: string;
  updatedAt: string;
}

export interface DataKeyRow {
  version: number;
  wrapped: Buffer;
  createdAt: string;
  destroyedAt: string | null;
}

export interface ConfigurationRow {
  id: string;
  name: string;
  type: 'encryption' | 'provider';
  provider: string | null;
  proxySlug: string | null;
  keyringId: Buffer | null;
  deterministic: boolean;
  minDecryptionVersion: number;
  /** The JSON text of the stored columns, kept as text so a round trip cannot reformat it. */
  destinations: string;
  fields: string;
  extra: string;
  createdAt: string;
  updatedAt: string;
  keys: DataKeyRow[];
}

export interface ClassificationProviderRow {
  configurationId: string;
  gwsGroups: string;
}

/**
 * A classification with its members and reveal rules, as a snapshot carries it (providers'
 * groups, the reveal grants and the default's mask as the JSON text of their columns).
 */
export type ClassificationRow = Omit<Classification, 'source' | 'reveal' | 'revealDefault'> &
  Omit<ClassificationMembers, 'providers'> & {
    providers: ClassificationProviderRow[];
    reveal: string;
    revealDefault: string;
    revealDefaultMask: string | null;
  };

export interface ApiKeyRow {
  id: string;
  name: string;
  prefix: string;
  keyHash: Buffer;
  userId: number;
  permissions: string;
  configurations: string;
  status: 'active' | 'revoked';
  createdAt: string;
  updatedAt: string;
  revokedAt: string | null;
}

export interface StateRows {
  roles: RoleRow[];
  users: UserRow[];
  configurations: ConfigurationRow[];
  classifications: ClassificationRow[];
  apiKeys: ApiKeyRow[];
}

export type SectionName = keyof StateRows;
export const SECTIONS: readonly SectionName[] = Object.freeze(['roles', 'users', 'configurations', 'classifications', 'apiKeys']);

/** What applying a snapshot changes in one section: rows to insert or update, ids to delete. */
export interface SectionChange<Row, Id> {
  readonly upsert: readonly Row[];
  readonly remove: readonly Id[];
}

export interface StateChanges {
  roles?: SectionChange<RoleRow, number>;
  users?: SectionChange<UserRow, number>;
  configurations?: SectionChange<ConfigurationRow, string>;
  classifications?: SectionChange<ClassificationRow, number>;
  apiKeys?: SectionChange<ApiKeyRow, string>;
}

// ---------------------------------------------------------------------------------------
// sync_state

export type SyncRole = 'published' | 'applied';

export interface SyncStateRow {
  version: number;
  digest: string;
  /** Section name → digest, JSON. */
  sections: string;
  /** The applied snapshot, gzipped; null for `published`. */
  body: Buffer | null;
  updatedAt: string;
}

const ROLES = (d: Dialect): string => `
  SELECT r.id, r.name, r.description,
    (SELECT ${d.jsonArrayOf('p.name', 'p.name')} FROM role_permissions rp JOIN permissions p ON p.id = rp.permission_id
      WHERE rp.role_id = r.id) AS permissions
    FROM roles r ORDER BY r.id`;
const USERS = (d: Dialect): string => `
  SELECT u.id, u.name, u.email, u.disabled, u.two_factor_enabled, u.created_at, u.updated_at,
    (SELECT ${d.jsonArrayOf('ur.role_id', 'ur.role_id')} FROM user_roles ur WHERE ur.user_id = u.id) AS role_ids
    FROM users u ORDER BY u.id`;
const CONFIGURATIONS = (d: Dialect): string => `
  SELECT id, name, type, provider, proxy_slug, keyring_id, deterministic, min_decryption_version, destinations, fields, extra,
         created_at, updated_at
    FROM configurations ORDER BY ${d.insertionOrder}`;
const DATA_KEYS = 'SELECT configuration_id, version, wrapped, created_at, destroyed_at FROM data_keys ORDER BY configuration_id, version';
const CLASSIFICATIONS = `
  SELECT id, name, slug, description, bg_color, fg_color, emoji, provider_container_id, reveal, reveal_default, reveal_default_mask,
         created_at, updated_at
    FROM classifications ORDER BY id`;
const CLASSIFICATION_USERS = 'SELECT classification_id AS owner, user_id AS id FROM classification_users ORDER BY classification_id, user_id';
const CLASSIFICATION_ROLES = 'SELECT classification_id AS owner, role_id AS id FROM classification_roles ORDER BY classification_id, role_id';
const CLASSIFICATION_PROVIDERS = `
  SELECT classification_id, configuration_id, gws_groups FROM classification_providers ORDER BY classification_id, configuration_id`;
const API_KEYS = (d: Dialect): string => `
  SELECT id, name, prefix, key_hash, user_id, permissions, configurations, status, created_at, updated_at, revoked_at
    FROM api_keys ORDER BY ${d.insertionOrder}`;

// Applying a change set. Every id list is a JSON array, so one statement takes any number
// of ids. A row that is updated first has its unique columns "parked" on a value no real
// row holds (a control character no API accepts, then the row id; or a random hash), so
// values that moved between rows (two slugs swapped) never collide halfway through. Not
// NUL: NOCASE comparison stops at a NUL, so every parked email would compare equal.
const park = (d: Dialect): string => `${d.controlOne} || 'svc-sync-parked:' || CAST(id AS TEXT)`;
const ADD_PERMISSIONS = (d: Dialect): string =>
  // INSERT ... SELECT needs a WHERE before ON CONFLICT, or SQLite reads ON as a join.
  `INSERT INTO permissions (name) SELECT value FROM (${d.jsonStrings('?')}) names WHERE true ON CONFLICT (name) DO NOTHING`;
const UPSERT_ROLE = `
  INSERT INTO roles (id, name, description) VALUES (?, ?, ?)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name, description = excluded.description`;
const REMOVE_ROLES = (d: Dialect): string => `DELETE FROM roles WHERE id IN (${d.jsonIntegers('?')})`;
const PARK_ROLES = (d: Dialect): string => `UPDATE roles SET name = ${park(d)} WHERE id IN (${d.jsonIntegers('?')})`;
const CLEAR_ROLE_PERMISSIONS = 'DELETE FROM role_permissions WHERE role_id = ?';
const ADD_ROLE_PERMISSIONS = (d: Dialect): string => `
  INSERT INTO role_permissions (role_id, permission_id)
    SELECT CAST(? AS BIGINT), id FROM permissions WHERE name IN (${d.jsonStrings('?')})`;
const UPSERT_USER = `
  INSERT INTO users (id, name, email, password_hash, disabled, two_factor_enabled, source, created_at, updated_at)
  VALUES (?, ?, ?, NULL, ?, ?, 'control-plane', ?, ?)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name, email = excluded.email, password_hash = NULL,
    disabled = excluded.disabled, two_factor_enabled = excluded.two_factor_enabled, source = excluded.source,
    created_at = excluded.created_at, updated_at = excluded.updated_at`;
const REMOVE_USERS = (d: Dialect): string => `DELETE FROM users WHERE id IN (${d.jsonIntegers('?')})`;
// A replica keeps no password hash: not one from a bootstrap seed, nor one an older
// snapshot format carried. Run while shredding, so the bytes go too.
const CLEAR_PASSWORDS = 'UPDATE users SET password_hash = NULL WHERE password_hash IS NOT NULL';
const PARK_USERS = (d: Dialect): string => `UPDATE users SET email = ${park(d)} WHERE id IN (${d.jsonIntegers('?')})`;
const CLEAR_USER_ROLES = 'DELETE FROM user_roles WHERE user_id = ?';
const ADD_USER_ROLES = (d: Dialect): string =>
  `INSERT INTO user_roles (user_id, role_id) SELECT DISTINCT CAST(? AS BIGINT), value FROM (${d.jsonIntegers('?')}) ids`;
const UPSERT_CONFIGURATION = `
  INSERT INTO configurations (id, name, type, provider, proxy_slug, keyring_id, deterministic, min_decryption_version,
    destinations, fields, extra, source, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'control-plane', ?, ?)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name, type = excluded.type, provider = excluded.provider,
    proxy_slug = excluded.proxy_slug, keyring_id = excluded.keyring_id, deterministic = excluded.deterministic,
    min_decryption_version = excluded.min_decryption_version, destinations = excluded.destinations, fields = excluded.fields,
    extra = excluded.extra, source = excluded.source, created_at = excluded.created_at, updated_at = excluded.updated_at`;
const REMOVE_CONFIGURATIONS = (d: Dialect): string => `DELETE FROM configurations WHERE id IN (${d.jsonStrings('?')})`;
const PARK_CONFIGURATIONS = (d: Dialect): string =>
  `UPDATE configurations SET name = ${park(d)}, proxy_slug = NULL WHERE id IN (${d.jsonStrings('?')})`;
const CLEAR_DATA_KEYS = 'DELETE FROM data_keys WHERE configuration_id = ?';
const INSERT_DATA_KEY = 'INSERT INTO data_keys (configuration_id, version, wrapped, created_at, destroyed_at) VALUES (?, ?, ?, ?, ?)';
const UPSERT_CLASSIFICATION = `
  INSERT INTO classifications (id, name, slug, description, bg_color, fg_color, emoji, provider_container_id, reveal, reveal_default,
    reveal_default_mask, source, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'control-plane', ?, ?)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name, slug = excluded.slug, description = excluded.description,
    bg_color = excluded.bg_color, fg_color = excluded.fg_color, emoji = excluded.emoji,
    provider_container_id = excluded.provider_container_id, reveal = excluded.reveal, reveal_default = excluded.reveal_default,
    reveal_default_mask = excluded.reveal_default_mask, source = excluded.source, created_at = excluded.created_at,
    updated_at = excluded.updated_at`;
const REMOVE_CLASSIFICATIONS = (d: Dialect): string => `DELETE FROM classifications WHERE id IN (${d.jsonIntegers('?')})`;
const PARK_CLASSIFICATIONS = (d: Dialect): string => `UPDATE classifications SET slug = ${park(d)} WHERE id IN (${d.jsonIntegers('?')})`;
const CLEAR_CLASSIFICATION_MEMBERS = ['classification_users', 'classification_roles', 'classification_providers'].map(
  (table) => `DELETE FROM ${table} WHERE classification_id = ?`,
);
const ADD_CLASSIFICATION_USERS = (d: Dialect): string =>
  `INSERT INTO classification_users (classification_id, user_id) SELECT DISTINCT CAST(? AS BIGINT), value FROM (${d.jsonIntegers('?')}) ids`;
const ADD_CLASSIFICATION_ROLES = (d: Dialect): string =>
  `INSERT INTO classification_roles (classification_id, role_id) SELECT DISTINCT CAST(? AS BIGINT), value FROM (${d.jsonIntegers('?')}) ids`;
const ADD_CLASSIFICATION_PROVIDER = 'INSERT INTO classification_providers (classification_id, configuration_id, gws_groups) VALUES (?, ?, ?)';
const UPSERT_API_KEY = `
  INSERT INTO api_keys (id, name, prefix, key_hash, user_id, permissions, configurations, status, source, created_at, updated_at, revoked_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'control-plane', ?, ?, ?)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name, prefix = excluded.prefix, key_hash = excluded.key_hash,
    user_id = excluded.user_id, permissions = excluded.permissions, configurations = excluded.configurations,
    status = excluded.status, source = excluded.source, created_at = excluded.created_at, updated_at = excluded.updated_at,
    revoked_at = excluded.revoked_at`;
const REMOVE_API_KEYS = (d: Dialect): string => `DELETE FROM api_keys WHERE id IN (${d.jsonStrings('?')})`;
const PARK_API_KEYS = (d: Dialect): string =>
  `UPDATE api_keys SET name = ${park(d)}, key_hash = ${d.randomBytes32} WHERE id IN (${d.jsonStrings('?')})`;

const GET_SYNC = 'SELECT version, digest, sections, body, updated_at FROM sync_state WHERE name = ?';
const PUT_SYNC = `
  INSERT INTO sync_state (name, version, digest, sections, body, updated_at) VALUES (?, ?, ?, ?, ?, ?)
  ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest, sections = excluded.sections,
    body = excluded.body, updated_at = excluded.updated_at`;

export class ReplicationRepository {
  // -------------------------------------------------------------------------------------
  // Export

  /**
   * The whole management state, every list in id order (rowid order for the tables with
   * text ids: the lists that break ties by rowid then come out alike on a replica), read in one transaction so the
   * lists agree with each other. A read-only `snapshot`: it sees one state of the database
   * without taking the write lock the log writer needs.
   */
  *readState(): Step<StateRows> {
    return (yield* this.readSections(new Set(SECTIONS))) as StateRows;
  }

  /**
   * The whole state as `readState` reads it, with the state version it is (null on a
   * database that keeps none): several instances minting snapshot versions check it, so
   * that none mints one for a state another has already moved past.
   */
  *readStateAt(): Step<{ rows: StateRows; stateVersion: number | null }> {
    const self = this;
    return yield* snapshot(function* () {
      const version = yield* stateVersion();
      return { rows: yield* self.readState(), stateVersion: version };
    });
  }

  /** The state version now (see `readStateAt`). */
  *stateVersion(): Step<number | null> {
    return yield* stateVersion();
  }

  /** The `sections` of the state, read as `readState` does. */
  *readSections(sections: ReadonlySet<SectionName>): Step<Partial<StateRows>> {
    return yield* snapshot(function* (): Step<Partial<StateRows>> {
      return {
        roles: sections.has('roles') ? yield* readRoles() : undefined,
        users: sections.has('users') ? yield* readUsers() : undefined,
        configurations: sections.has('configurations') ? yield* readConfigurations() : undefined,
        classifications: sections.has('classifications') ? yield* readClassifications() : undefined,
        apiKeys: sections.has('apiKeys') ? yield* readApiKeys() : undefined,
      };
    });
  }

  // -------------------------------------------------------------------------------------
  // Apply

  /**
   * Applies a change set and records `applied`, in one transaction: every request sees the
   * old state or the new one, never a mix, and a failure (a constraint the snapshot breaks)
   * leaves both the state and the `applied` row as they were.
   *
   * Foreign keys are checked at commit rather than per statement where the database can,
   * and the sections go children first for removals and parents first for upserts where it
   * cannot. It runs `shredding`, so a key destroyed on the control plane does not linger
   * in a replica's free pages.
   */
  *applyChanges(changes: StateChanges, applied: SyncStateRow): Step<void> {
    const self = this;
    // The pages move out of the WAL when keys changed, as for a destroyed key (configurations.ts).
    const keysChanged = changes.configurations !== undefined && changes.configurations.upsert.length + changes.configurations.remove.length > 0;
    yield* shredding(
      () =>
        atomically(function* () {
          yield* deferForeignKeys();
          const json = (values: readonly unknown[]) => JSON.stringify(values);
          // Remove and park first, so an upsert can take a unique value another row gave up.
          if (changes.apiKeys) {
            yield* run(REMOVE_API_KEYS, json(changes.apiKeys.remove));
            yield* run(PARK_API_KEYS, json(changes.apiKeys.upsert.map((k) => k.id)));
          }
          if (changes.classifications) {
            yield* run(REMOVE_CLASSIFICATIONS, json(changes.classifications.remove));
            yield* run(PARK_CLASSIFICATIONS, json(changes.classifications.upsert.map((c) => c.id)));
          }
          if (changes.configurations) {
            yield* run(REMOVE_CONFIGURATIONS, json(changes.configurations.remove));
            yield* run(PARK_CONFIGURATIONS, json(changes.configurations.upsert.map((c) => c.id)));
          }
          if (changes.users) {
            yield* run(REMOVE_USERS, json(changes.users.remove));
            yield* run(PARK_USERS, json(changes.users.upsert.map((u) => u.id)));
          }
          if (changes.roles) {
            yield* run(REMOVE_ROLES, json(changes.roles.remove));
            yield* run(PARK_ROLES, json(changes.roles.upsert.map((r) => r.id)));
          }
          if (changes.roles) yield* upsertRoles(changes.roles.upsert);
          if (changes.users) {
            yield* upsertUsers(changes.users.upsert);
            yield* run(CLEAR_PASSWORDS);
          }
          if (changes.configurations) yield* upsertConfigurations(changes.configurations.upsert);
          if (changes.classifications) yield* upsertClassifications(changes.classifications.upsert);
          if (changes.apiKeys) yield* upsertApiKeys(changes.apiKeys.upsert);
          yield* self.putSync('applied', applied);
        }),
      () => keysChanged,
    );
  }

  // -------------------------------------------------------------------------------------
  // sync_state

  *getSync(role: SyncRole): Step<SyncStateRow | undefined> {
    const r = yield* get<{ version: number; digest: string; sections: string; body: Uint8Array | null; updated_at: string }>(GET_SYNC, role);
    if (r === undefined) return undefined;
    return { version: r.version, digest: r.digest, sections: r.sections, body: r.body === null ? null : toBuffer(r.body), updatedAt: r.updated_at };
  }

  *putSync(role: SyncRole, row: SyncStateRow): Step<void> {
    yield* run(PUT_SYNC, role, row.version, row.digest, row.sections, row.body, row.updatedAt);
  }
}

function* readRoles(): Step<RoleRow[]> {
  const rows = yield* all<{ id: number; name: string; description: string | null; permissions: string }>(ROLES);
  return rows.map((r) => ({ id: r.id, name: r.name, description: r.description, permissions: JSON.parse(r.permissions) as string[] }));
}

function* readUsers(): Step<UserRow[]> {
  type Row = {
    id: number;
    name: string;
    email: string;
    disabled: number;
    two_factor_enabled: number;
    created_at: string;
    updated_at: string;
    role_ids: string;
  };
  return (yield* all<Row>(USERS)).map((r) => ({
    id: r.id,
    name: r.name,
    email: r.email,
    disabled: r.disabled === 1,
    twoFactorEnabled: r.two_factor_enabled === 1,
    roleIds: JSON.parse(r.role_ids) as number[],
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  }));
}

function* readConfigurations(): Step<ConfigurationRow[]> {
  type Row = {
    id: string;
    name: string;
    type: 'encryption' | 'provider';
    provider: string | null;
    proxy_slug: string | null;
    keyring_id: Uint8Array | null;
    deterministic: number;
    min_decryption_version: number;
    destinations: string;
    fields: string;
    extra: string;
    created_at: string;
    updated_at: string;
  };
  const byId = new Map<string, ConfigurationRow>();
  const out = (yield* all<Row>(CONFIGURATIONS)).map((r) => {
    const row: ConfigurationRow = {
      id: r.id,
      name: r.name,
      type: r.type,
      provider: r.provider,
      proxySlug: r.proxy_slug,
      keyringId: r.keyring_id === null ? null : toBuffer(r.keyring_id),
      deterministic: r.deterministic === 1,
      minDecryptionVersion: r.min_decryption_version,
      destinations: r.destinations,
      fields: r.fields,
      extra: r.extra,
      createdAt: r.created_at,
      updatedAt: r.updated_at,
      keys: [],
    };
    byId.set(row.id, row);
    return row;
  });
  type KeyRecord = { configuration_id: string; version: number; wrapped: Uint8Array; created_at: string; destroyed_at: string | null };
  for (const k of yield* all<KeyRecord>(DATA_KEYS)) {
    byId.get(k.configuration_id)?.keys.push({ version: k.version, wrapped: toBuffer(k.wrapped), createdAt: k.created_at, destroyedAt: k.destroyed_at });
  }
  return out;
}

function* readClassifications(): Step<ClassificationRow[]> {
  type Row = {
    id: number;
    name: string;
    slug: string;
    description: string | null;
    bg_color: string;
    fg_color: string;
    emoji: string | null;
    provider_container_id: string | null;
    reveal: string;
    reveal_default: string;
    reveal_default_mask: string | null;
    created_at: string;
    updated_at: string;
  };
  const byId = new Map<number, ClassificationRow>();
  const out = (yield* all<Row>(CLASSIFICATIONS)).map((r) => {
    const row: ClassificationRow = {
      id: r.id,
      name: r.name,
      slug: r.slug,
      description: r.description,
      bgColor: r.bg_color,
      fgColor: r.fg_color,
      emoji: r.emoji,
      providerContainerId: r.provider_container_id,
      reveal: r.reveal,
      revealDefault: r.reveal_default,
      revealDefaultMask: r.reveal_default_mask,
      createdAt: r.created_at,
      updatedAt: r.updated_at,
      userIds: [],
      roleIds: [],
      providers: [],
    };
    byId.set(row.id, row);
    return row;
  });
  for (const m of yield* all<{ owner: number; id: number }>(CLASSIFICATION_USERS)) byId.get(m.owner)?.userIds.push(m.id);
  for (const m of yield* all<{ owner: number; id: number }>(CLASSIFICATION_ROLES)) byId.get(m.owner)?.roleIds.push(m.id);
  type ProviderRecord = { classification_id: number; configuration_id: string; gws_groups: string };
  for (const p of yield* all<ProviderRecord>(CLASSIFICATION_PROVIDERS)) {
    byId.get(p.classification_id)?.providers.push({ configurationId: p.configuration_id, gwsGroups: p.gws_groups });
  }
  return out;
}

function* readApiKeys(): Step<ApiKeyRow[]> {
  type Row = {
    id: string;
    name: string;
    prefix: string;
    key_hash: Uint8Array;
    user_id: number;
    permissions: string;
    configurations: string;
    status: 'active' | 'revoked';
    created_at: string;
    updated_at: string;
    revoked_at: string | null;
  };
  return (yield* all<Row>(API_KEYS)).map((r) => ({
    id: r.id,
    name: r.name,
    prefix: r.prefix,
    keyHash: toBuffer(r.key_hash),
    userId: r.user_id,
    permissions: r.permissions,
    configurations: r.configurations,
    status: r.status,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    revokedAt: r.revoked_at,
  }));
}

function* upsertRoles(roles: readonly RoleRow[]): Step<void> {
  if (roles.length === 0) return;
  yield* run(ADD_PERMISSIONS, JSON.stringify([...new Set(roles.flatMap((r) => r.permissions))]));
  for (const r of roles) {
    yield* run(UPSERT_ROLE, r.id, r.name, r.description);
    yield* run(CLEAR_ROLE_PERMISSIONS, r.id);
    yield* run(ADD_ROLE_PERMISSIONS, r.id, JSON.stringify(r.permissions));
  }
}

function* upsertUsers(users: readonly UserRow[]): Step<void> {
  for (const u of users) {
    yield* run(UPSERT_USER, u.id, u.name, u.email, u.disabled ? 1 : 0, u.twoFactorEnabled ? 1 : 0, u.createdAt, u.updatedAt);
    yield* run(CLEAR_USER_ROLES, u.id);
    if (u.roleIds.length > 0) yield* run(ADD_USER_ROLES, u.id, JSON.stringify(u.roleIds));
  }
}

function* upsertConfigurations(configurations: readonly ConfigurationRow[]): Step<void> {
  for (const c of configurations) {
    yield* run(
      UPSERT_CONFIGURATION,
      c.id,
      c.name,
      c.type,
      c.provider,
      c.proxySlug,
      c.keyringId,
      c.deterministic ? 1 : 0,
      c.minDecryptionVersion,
      c.destinations,
      c.fields,
      c.extra,
      c.createdAt,
      c.updatedAt,
    );
    yield* run(CLEAR_DATA_KEYS, c.id);
    for (const k of c.keys) yield* run(INSERT_DATA_KEY, c.id, k.version, k.wrapped, k.createdAt, k.destroyedAt);
  }
}

function* upsertClassifications(classifications: readonly ClassificationRow[]): Step<void> {
  for (const c of classifications) {
    yield* run(
      UPSERT_CLASSIFICATION,
      c.id,
      c.name,
      c.slug,
      c.description,
      c.bgColor,
      c.fgColor,
      c.emoji,
      c.providerContainerId,
      c.reveal,
      c.revealDefault,
      c.revealDefaultMask,
      c.createdAt,
      c.updatedAt,
    );
    for (const clear of CLEAR_CLASSIFICATION_MEMBERS) yield* run(clear, c.id);
    if (c.userIds.length > 0) yield* run(ADD_CLASSIFICATION_USERS, c.id, JSON.stringify(c.userIds));
    if (c.roleIds.length > 0) yield* run(ADD_CLASSIFICATION_ROLES, c.id, JSON.stringify(c.roleIds));
    for (const p of c.providers) yield* run(ADD_CLASSIFICATION_PROVIDER, c.id, p.configurationId, p.gwsGroups);
  }
}

function* upsertApiKeys(keys: readonly ApiKeyRow[]): Step<void> {
  for (const k of keys) {
    yield* run(UPSERT_API_KEY, k.id, k.name, k.prefix, k.keyHash, k.userId, k.permissions, k.configurations, k.status, k.createdAt, k.updatedAt, k.revokedAt);
  }
}
