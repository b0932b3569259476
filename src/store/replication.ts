/**
 * The store side of replication (docs/replication.md): reading the whole management state
 * for a snapshot, applying one, and the `sync_state` rows. Shipped logs are in
 * shipped-logs.ts.
 *
 * Ids are kept as they are on the control plane: tokens bind classification ids and
 * keyring ids, access tokens carry user ids, and api keys name configurations by id, so a
 * replica that renumbered anything would break them.
 */
import type { DatabaseSync, Session, StatementSync } from 'node:sqlite';
import { toBuffer } from './sql.ts';
import { runInTransaction } from './sqlite/transaction.ts';
import type { Classification, ClassificationMembers } from './classifications.ts';

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

/** The tables a snapshot is read from. */
const STATE_TABLES = [
  'roles',
  'permissions',
  'role_permissions',
  'users',
  'user_roles',
  'configurations',
  'data_keys',
  'api_keys',
  'classifications',
  'classification_users',
  'classification_roles',
  'classification_providers',
] as const;

/**
 * Tells whether the state tables changed through this connection since `restart`, using
 * SQLite sessions (which record the rows a connection changes, per table). Writes to
 * other tables (logs, sync_state, token revocations) do not count, so a control plane
 * busy writing logs does not re-read its whole state for every poll. Changes made by
 * other connections are not seen here: see `PRAGMA data_version`.
 */
export class StateChangeTracker {
  readonly #db: DatabaseSync;
  #sessions: Session[] = [];

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.restart();
  }

  get changed(): boolean {
    return this.#sessions.some((session) => session.patchset().length > 0);
  }

  restart(): void {
    for (const session of this.#sessions) session.close();
    this.#sessions = STATE_TABLES.map((table) => this.#db.createSession({ table }));
  }
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

export class ReplicationRepository {
  readonly #db: DatabaseSync;
  // export
  readonly #roles: StatementSync;
  readonly #users: StatementSync;
  readonly #configurations: StatementSync;
  readonly #dataKeys: StatementSync;
  readonly #classifications: StatementSync;
  readonly #classificationUsers: StatementSync;
  readonly #classificationRoles: StatementSync;
  readonly #classificationProviders: StatementSync;
  readonly #apiKeys: StatementSync;
  // apply
  readonly #addPermissions: StatementSync;
  readonly #upsertRole: StatementSync;
  readonly #removeRoles: StatementSync;
  readonly #parkRoles: StatementSync;
  readonly #clearRolePermissions: StatementSync;
  readonly #addRolePermissions: StatementSync;
  readonly #upsertUser: StatementSync;
  readonly #removeUsers: StatementSync;
  readonly #clearPasswords: StatementSync;
  readonly #parkUsers: StatementSync;
  readonly #clearUserRoles: StatementSync;
  readonly #addUserRoles: StatementSync;
  readonly #upsertConfiguration: StatementSync;
  readonly #removeConfigurations: StatementSync;
  readonly #parkConfigurations: StatementSync;
  readonly #clearDataKeys: StatementSync;
  readonly #insertDataKey: StatementSync;
  readonly #upsertClassification: StatementSync;
  readonly #removeClassifications: StatementSync;
  readonly #parkClassifications: StatementSync;
  readonly #clearClassificationMembers: StatementSync[];
  readonly #addClassificationUsers: StatementSync;
  readonly #addClassificationRoles: StatementSync;
  readonly #addClassificationProvider: StatementSync;
  readonly #upsertApiKey: StatementSync;
  readonly #removeApiKeys: StatementSync;
  readonly #parkApiKeys: StatementSync;
  readonly #secureDelete: StatementSync;
  readonly #checkpoint: StatementSync;
  readonly #inMemory: boolean;
  // sync_state
  readonly #getSync: StatementSync;
  readonly #putSync: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#roles = db.prepare(`
      SELECT r.id, r.name, r.description,
        (SELECT json_group_array(p.name ORDER BY p.name) FROM role_permissions rp JOIN permissions p ON p.id = rp.permission_id
          WHERE rp.role_id = r.id) AS permissions
        FROM roles r ORDER BY r.id`);
    this.#users = db.prepare(`
      SELECT u.id, u.name, u.email, u.disabled, u.two_factor_enabled, u.created_at, u.updated_at,
        (SELECT json_group_array(ur.role_id ORDER BY ur.role_id) FROM user_roles ur WHERE ur.user_id = u.id) AS role_ids
        FROM users u ORDER BY u.id`);
    this.#configurations = db.prepare(`
      SELECT id, name, type, provider, proxy_slug, keyring_id, deterministic, min_decryption_version, destinations, fields, extra,
             created_at, updated_at
        FROM configurations ORDER BY rowid`);
    this.#dataKeys = db.prepare('SELECT configuration_id, version, wrapped, created_at, destroyed_at FROM data_keys ORDER BY configuration_id, version');
    this.#classifications = db.prepare(`
      SELECT id, name, slug, description, bg_color, fg_color, emoji, provider_container_id, reveal, reveal_default, reveal_default_mask,
             created_at, updated_at
        FROM classifications ORDER BY id`);
    this.#classificationUsers = db.prepare('SELECT classification_id AS owner, user_id AS id FROM classification_users ORDER BY classification_id, user_id');
    this.#classificationRoles = db.prepare('SELECT classification_id AS owner, role_id AS id FROM classification_roles ORDER BY classification_id, role_id');
    this.#classificationProviders = db.prepare(`
      SELECT classification_id, configuration_id, gws_groups FROM classification_providers ORDER BY classification_id, configuration_id`);
    this.#apiKeys = db.prepare(`
      SELECT id, name, prefix, key_hash, user_id, permissions, configurations, status, created_at, updated_at, revoked_at
        FROM api_keys ORDER BY rowid`);

    // Applying a change set. Every id list is a JSON array, so one statement takes any
    // number of ids. A row that is updated first has its unique columns "parked" on a
    // value no real row holds (a control character no API accepts, then the row id; or a
    // random hash), so values that moved between rows (two slugs swapped) never collide
    // halfway through. Not NUL: NOCASE comparison stops at a NUL, so every parked email
    // would compare equal.
    const ids = 'SELECT value FROM json_each(?)';
    const park = "char(1) || 'svc-sync-parked:' || id";
    // INSERT ... SELECT needs a WHERE before ON CONFLICT, or SQLite reads ON as a join.
    this.#addPermissions = db.prepare('INSERT INTO permissions (name) SELECT value FROM json_each(?) WHERE true ON CONFLICT (name) DO NOTHING');
    this.#upsertRole = db.prepare(`
      INSERT INTO roles (id, name, description) VALUES (?, ?, ?)
      ON CONFLICT (id) DO UPDATE SET name = excluded.name, description = excluded.description`);
    this.#removeRoles = db.prepare(`DELETE FROM roles WHERE id IN (${ids})`);
    this.#parkRoles = db.prepare(`UPDATE roles SET name = ${park} WHERE id IN (${ids})`);
    this.#clearRolePermissions = db.prepare('DELETE FROM role_permissions WHERE role_id = ?');
    this.#addRolePermissions = db.prepare(`
      INSERT INTO role_permissions (role_id, permission_id)
        SELECT ?, id FROM permissions WHERE name IN (SELECT value FROM json_each(?))`);
    this.#upsertUser = db.prepare(`
      INSERT INTO users (id, name, email, password_hash, disabled, two_factor_enabled, source, created_at, updated_at)
      VALUES (?, ?, ?, NULL, ?, ?, 'control-plane', ?, ?)
      ON CONFLICT (id) DO UPDATE SET name = excluded.name, email = excluded.email, password_hash = NULL,
        disabled = excluded.disabled, two_factor_enabled = excluded.two_factor_enabled, source = excluded.source,
        created_at = excluded.created_at, updated_at = excluded.updated_at`);
    this.#removeUsers = db.prepare(`DELETE FROM users WHERE id IN (${ids})`);
    // A replica keeps no password hash: not one from a bootstrap seed, nor one an older
    // snapshot format carried. Run with secure_delete on, so the bytes go too.
    this.#clearPasswords = db.prepare('UPDATE users SET password_hash = NULL WHERE password_hash IS NOT NULL');
    this.#parkUsers = db.prepare(`UPDATE users SET email = ${park} WHERE id IN (${ids})`);
    this.#clearUserRoles = db.prepare('DELETE FROM user_roles WHERE user_id = ?');
    this.#addUserRoles = db.prepare('INSERT INTO user_roles (user_id, role_id) SELECT DISTINCT ?, value FROM json_each(?)');
    this.#upsertConfiguration = db.prepare(`
      INSERT INTO configurations (id, name, type, provider, proxy_slug, keyring_id, deterministic, min_decryption_version,
        destinations, fields, extra, source, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'control-plane', ?, ?)
      ON CONFLICT (id) DO UPDATE SET name = excluded.name, type = excluded.type, provider = excluded.provider,
        proxy_slug = excluded.proxy_slug, keyring_id = excluded.keyring_id, deterministic = excluded.deterministic,
        min_decryption_version = excluded.min_decryption_version, destinations = excluded.destinations, fields = excluded.fields,
        extra = excluded.extra, source = excluded.source, created_at = excluded.created_at, updated_at = excluded.updated_at`);
    this.#removeConfigurations = db.prepare(`DELETE FROM configurations WHERE id IN (${ids})`);
    this.#parkConfigurations = db.prepare(`UPDATE configurations SET name = ${park}, proxy_slug = NULL WHERE id IN (${ids})`);
    this.#clearDataKeys = db.prepare('DELETE FROM data_keys WHERE configuration_id = ?');
    this.#insertDataKey = db.prepare('INSERT INTO data_keys (configuration_id, version, wrapped, created_at, destroyed_at) VALUES (?, ?, ?, ?, ?)');
    this.#upsertClassification = db.prepare(`
      INSERT INTO classifications (id, name, slug, description, bg_color, fg_color, emoji, provider_container_id, reveal, reveal_default,
        reveal_default_mask, source, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'control-plane', ?, ?)
      ON CONFLICT (id) DO UPDATE SET name = excluded.name, slug = excluded.slug, description = excluded.description,
        bg_color = excluded.bg_color, fg_color = excluded.fg_color, emoji = excluded.emoji,
        provider_container_id = excluded.provider_container_id, reveal = excluded.reveal, reveal_default = excluded.reveal_default,
        reveal_default_mask = excluded.reveal_default_mask, source = excluded.source, created_at = excluded.created_at,
        updated_at = excluded.updated_at`);
    this.#removeClassifications = db.prepare(`DELETE FROM classifications WHERE id IN (${ids})`);
    this.#parkClassifications = db.prepare(`UPDATE classifications SET slug = ${park} WHERE id IN (${ids})`);
    this.#clearClassificationMembers = ['classification_users', 'classification_roles', 'classification_providers'].map((table) =>
      db.prepare(`DELETE FROM ${table} WHERE classification_id = ?`),
    );
    this.#addClassificationUsers = db.prepare('INSERT INTO classification_users (classification_id, user_id) SELECT DISTINCT ?, value FROM json_each(?)');
    this.#addClassificationRoles = db.prepare('INSERT INTO classification_roles (classification_id, role_id) SELECT DISTINCT ?, value FROM json_each(?)');
    this.#addClassificationProvider = db.prepare('INSERT INTO classification_providers (classification_id, configuration_id, gws_groups) VALUES (?, ?, ?)');
    this.#upsertApiKey = db.prepare(`
      INSERT INTO api_keys (id, name, prefix, key_hash, user_id, permissions, configurations, status, source, created_at, updated_at, revoked_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'control-plane', ?, ?, ?)
      ON CONFLICT (id) DO UPDATE SET name = excluded.name, prefix = excluded.prefix, key_hash = excluded.key_hash,
        user_id = excluded.user_id, permissions = excluded.permissions, configurations = excluded.configurations,
        status = excluded.status, source = excluded.source, created_at = excluded.created_at, updated_at = excluded.updated_at,
        revoked_at = excluded.revoked_at`);
    this.#removeApiKeys = db.prepare(`DELETE FROM api_keys WHERE id IN (${ids})`);
    this.#parkApiKeys = db.prepare(`UPDATE api_keys SET name = ${park}, key_hash = randomblob(32) WHERE id IN (${ids})`);
    this.#secureDelete = db.prepare('PRAGMA secure_delete');
    this.#checkpoint = db.prepare('PRAGMA wal_checkpoint(TRUNCATE)');
    this.#inMemory = (db.prepare('PRAGMA database_list').get() as { file: string }).file === '';

    this.#getSync = db.prepare('SELECT version, digest, sections, body, updated_at FROM sync_state WHERE name = ?');
    this.#putSync = db.prepare(`
      INSERT INTO sync_state (name, version, digest, sections, body, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT (name) DO UPDATE SET version = excluded.version, digest = excluded.digest, sections = excluded.sections,
        body = excluded.body, updated_at = excluded.updated_at`);
  }

  // -------------------------------------------------------------------------------------
  // Export

  /** A new tracker of changes to the state tables (see StateChangeTracker). */
  trackChanges(): StateChangeTracker {
    return new StateChangeTracker(this.#db);
  }

  /**
   * The whole management state, every list in id order (rowid order for the tables with
   * text ids: the lists that break ties by rowid then come out alike on a replica), read in one transaction so the
   * lists agree with each other. A deferred (read) transaction: in WAL mode it sees one
   * snapshot of the file without taking the write lock the log writer needs.
   */
  readState(): StateRows {
    return this.readSections(new Set(SECTIONS)) as StateRows;
  }

  /** The `sections` of the state, read as `readState` does. */
  readSections(sections: ReadonlySet<SectionName>): Partial<StateRows> {
    const read = (): Partial<StateRows> => ({
      roles: sections.has('roles') ? this.#readRoles() : undefined,
      users: sections.has('users') ? this.#readUsers() : undefined,
      configurations: sections.has('configurations') ? this.#readConfigurations() : undefined,
      classifications: sections.has('classifications') ? this.#readClassifications() : undefined,
      apiKeys: sections.has('apiKeys') ? this.#readApiKeys() : undefined,
    });
    if (this.#db.isTransaction) return read();
    this.#db.exec('BEGIN DEFERRED');
    try {
      return read();
    } finally {
      this.#db.exec('COMMIT');
    }
  }

  #readRoles(): RoleRow[] {
    const rows = this.#roles.all() as unknown as Array<{ id: number; name: string; description: string | null; permissions: string }>;
    return rows.map((r) => ({ id: r.id, name: r.name, description: r.description, permissions: JSON.parse(r.permissions) as string[] }));
  }

  #readUsers(): UserRow[] {
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
    return (this.#users.all() as unknown as Row[]).map((r) => ({
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

  #readConfigurations(): ConfigurationRow[] {
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
    const out = (this.#configurations.all() as unknown as Row[]).map((r) => {
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
    for (const k of this.#dataKeys.all() as unknown as KeyRecord[]) {
      byId.get(k.configuration_id)?.keys.push({ version: k.version, wrapped: toBuffer(k.wrapped), createdAt: k.created_at, destroyedAt: k.destroyed_at });
    }
    return out;
  }

  #readClassifications(): ClassificationRow[] {
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
    const out = (this.#classifications.all() as unknown as Row[]).map((r) => {
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
    for (const m of this.#classificationUsers.all() as unknown as Array<{ owner: number; id: number }>) byId.get(m.owner)?.userIds.push(m.id);
    for (const m of this.#classificationRoles.all() as unknown as Array<{ owner: number; id: number }>) byId.get(m.owner)?.roleIds.push(m.id);
    type ProviderRecord = { classification_id: number; configuration_id: string; gws_groups: string };
    for (const p of this.#classificationProviders.all() as unknown as ProviderRecord[]) {
      byId.get(p.classification_id)?.providers.push({ configurationId: p.configuration_id, gwsGroups: p.gws_groups });
    }
    return out;
  }

  #readApiKeys(): ApiKeyRow[] {
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
    return (this.#apiKeys.all() as unknown as Row[]).map((r) => ({
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

  // -------------------------------------------------------------------------------------
  // Apply

  /**
   * Applies a change set and records `applied`, in one transaction: every request sees the
   * old state or the new one, never a mix, and a failure (a constraint the snapshot breaks)
   * leaves both the state and the `applied` row as they were.
   *
   * Foreign keys are checked at commit rather than per statement, so the order of the
   * sections does not matter. secure_delete zeroes the freed bytes of replaced rows, so a
   * key destroyed on the control plane does not linger in a replica's free pages.
   */
  applyChanges(changes: StateChanges, applied: SyncStateRow): void {
    const previous = (this.#secureDelete.get() as { secure_delete: number }).secure_delete;
    this.#db.exec('PRAGMA secure_delete = ON');
    try {
      runInTransaction(this.#db, () => {
        this.#db.exec('PRAGMA defer_foreign_keys = ON');
        const json = (values: readonly unknown[]) => JSON.stringify(values);
        // Remove and park first, so an upsert can take a unique value another row gave up.
        if (changes.apiKeys) {
          this.#removeApiKeys.run(json(changes.apiKeys.remove));
          this.#parkApiKeys.run(json(changes.apiKeys.upsert.map((k) => k.id)));
        }
        if (changes.classifications) {
          this.#removeClassifications.run(json(changes.classifications.remove));
          this.#parkClassifications.run(json(changes.classifications.upsert.map((c) => c.id)));
        }
        if (changes.configurations) {
          this.#removeConfigurations.run(json(changes.configurations.remove));
          this.#parkConfigurations.run(json(changes.configurations.upsert.map((c) => c.id)));
        }
        if (changes.users) {
          this.#removeUsers.run(json(changes.users.remove));
          this.#parkUsers.run(json(changes.users.upsert.map((u) => u.id)));
        }
        if (changes.roles) {
          this.#removeRoles.run(json(changes.roles.remove));
          this.#parkRoles.run(json(changes.roles.upsert.map((r) => r.id)));
        }
        if (changes.roles) this.#upsertRoles(changes.roles.upsert);
        if (changes.users) {
          this.#upsertUsers(changes.users.upsert);
          this.#clearPasswords.run();
        }
        if (changes.configurations) this.#upsertConfigurations(changes.configurations.upsert);
        if (changes.classifications) this.#upsertClassifications(changes.classifications.upsert);
        if (changes.apiKeys) this.#upsertApiKeys(changes.apiKeys.upsert);
        this.putSync('applied', applied);
      });
    } finally {
      this.#db.exec(`PRAGMA secure_delete = ${Number(previous)}`);
    }
    // Best effort, as for a destroyed key (configurations.ts): moves the zeroed pages out of the WAL.
    const keysChanged = changes.configurations !== undefined && changes.configurations.upsert.length + changes.configurations.remove.length > 0;
    if (keysChanged && !this.#inMemory && !this.#db.isTransaction) this.#checkpoint.get();
  }

  #upsertRoles(roles: readonly RoleRow[]): void {
    if (roles.length === 0) return;
    this.#addPermissions.run(JSON.stringify([...new Set(roles.flatMap((r) => r.permissions))]));
    for (const r of roles) {
      this.#upsertRole.run(r.id, r.name, r.description);
      this.#clearRolePermissions.run(r.id);
      this.#addRolePermissions.run(r.id, JSON.stringify(r.permissions));
    }
  }

  #upsertUsers(users: readonly UserRow[]): void {
    for (const u of users) {
      this.#upsertUser.run(u.id, u.name, u.email, u.disabled ? 1 : 0, u.twoFactorEnabled ? 1 : 0, u.createdAt, u.updatedAt);
      this.#clearUserRoles.run(u.id);
      if (u.roleIds.length > 0) this.#addUserRoles.run(u.id, JSON.stringify(u.roleIds));
    }
  }

  #upsertConfigurations(configurations: readonly ConfigurationRow[]): void {
    for (const c of configurations) {
      this.#upsertConfiguration.run(
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
      this.#clearDataKeys.run(c.id);
      for (const k of c.keys) this.#insertDataKey.run(c.id, k.version, k.wrapped, k.createdAt, k.destroyedAt);
    }
  }

  #upsertClassifications(classifications: readonly ClassificationRow[]): void {
    for (const c of classifications) {
      this.#upsertClassification.run(
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
      for (const clear of this.#clearClassificationMembers) clear.run(c.id);
      if (c.userIds.length > 0) this.#addClassificationUsers.run(c.id, JSON.stringify(c.userIds));
      if (c.roleIds.length > 0) this.#addClassificationRoles.run(c.id, JSON.stringify(c.roleIds));
      for (const p of c.providers) this.#addClassificationProvider.run(c.id, p.configurationId, p.gwsGroups);
    }
  }

  #upsertApiKeys(keys: readonly ApiKeyRow[]): void {
    for (const k of keys) {
      this.#upsertApiKey.run(k.id, k.name, k.prefix, k.keyHash, k.userId, k.permissions, k.configurations, k.status, k.createdAt, k.updatedAt, k.revokedAt);
    }
  }

  // -------------------------------------------------------------------------------------
  // sync_state

  getSync(role: SyncRole): SyncStateRow | undefined {
    const r = this.#getSync.get(role) as { version: number; digest: string; sections: string; body: Uint8Array | null; updated_at: string } | undefined;
    if (r === undefined) return undefined;
    return { version: r.version, digest: r.digest, sections: r.sections, body: r.body === null ? null : toBuffer(r.body), updatedAt: r.updated_at };
  }

  putSync(role: SyncRole, row: SyncStateRow): void {
    this.#putSync.run(role, row.version, row.digest, row.sections, row.body, row.updatedAt);
  }
}
