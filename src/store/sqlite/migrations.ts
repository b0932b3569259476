import type { DatabaseSync } from 'node:sqlite';
import { normalizeEmail } from '../identity-text.ts';
import { runInTransaction } from './transaction.ts';

/**
 * Schema migrations, tracked with `PRAGMA user_version`. A migration is never edited once
 * released: a database that already ran it would silently disagree with a fresh one. Change
 * the schema by appending a new version.
 *
 * Tables are STRICT so that a column always holds the type the repositories cast it to.
 * Logs carry no foreign keys on purpose: they must outlive the users, keys and
 * configurations they mention.
 */

/** SQL run as it is, or a function for what SQL alone cannot say (rebuilding a table as it stands). */
export type Migration =
  | { readonly version: number; readonly sql: string }
  | { readonly version: number; readonly run: (db: DatabaseSync) => void };

const schemaV1 = /* sql */ `
CREATE TABLE roles (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  description TEXT
) STRICT;

CREATE TABLE permissions (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
) STRICT;

CREATE TABLE role_permissions (
  role_id INTEGER NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
  permission_id INTEGER NOT NULL REFERENCES permissions(id) ON DELETE CASCADE,
  PRIMARY KEY (role_id, permission_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX role_permissions_permission_id ON role_permissions(permission_id);

CREATE TABLE users (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email TEXT NOT NULL COLLATE NOCASE UNIQUE,
  password_hash TEXT,
  disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
  two_factor_enabled INTEGER NOT NULL DEFAULT 0 CHECK (two_factor_enabled IN (0, 1)),
  source TEXT NOT NULL DEFAULT 'api',
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
) STRICT;

CREATE TABLE user_roles (
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  role_id INTEGER NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
  PRIMARY KEY (user_id, role_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX user_roles_role_id ON user_roles(role_id);

CREATE TABLE configurations (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  type TEXT NOT NULL CHECK (type IN ('encryption', 'provider')),
  provider TEXT,
  proxy_slug TEXT UNIQUE,
  keyring_id BLOB CHECK (keyring_id IS NULL OR length(keyring_id) = 16),
  deterministic INTEGER NOT NULL DEFAULT 0 CHECK (deterministic IN (0, 1)),
  min_decryption_version INTEGER NOT NULL DEFAULT 1 CHECK (min_decryption_version >= 1),
  destinations TEXT NOT NULL DEFAULT '[]',
  fields TEXT NOT NULL DEFAULT '[]',
  extra TEXT NOT NULL DEFAULT '{}',
  source TEXT NOT NULL DEFAULT 'api',
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  -- tokens bind the keyring id into their AAD, so an encryption configuration without one
  -- could never produce a token
  CHECK ((type = 'encryption') = (keyring_id IS NOT NULL))
) STRICT;

CREATE TABLE data_keys (
  configuration_id TEXT NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
  version INTEGER NOT NULL CHECK (version >= 1),
  wrapped BLOB NOT NULL,
  created_at TEXT NOT NULL,
  destroyed_at TEXT,
  PRIMARY KEY (configuration_id, version)
) STRICT, WITHOUT ROWID;

CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  prefix TEXT NOT NULL,
  key_hash BLOB NOT NULL UNIQUE CHECK (length(key_hash) = 32),
  user_id INTEGER NOT NULL REFERENCES users(id),
  permissions TEXT NOT NULL DEFAULT '[]',
  configurations TEXT NOT NULL DEFAULT '[]',
  status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
  source TEXT NOT NULL DEFAULT 'api',
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  revoked_at TEXT
) STRICT;
CREATE INDEX api_keys_user_id ON api_keys(user_id);

CREATE TABLE classifications (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  slug TEXT NOT NULL UNIQUE,
  description TEXT,
  bg_color TEXT NOT NULL,
  fg_color TEXT NOT NULL,
  emoji TEXT,
  provider_container_id TEXT,
  source TEXT NOT NULL DEFAULT 'api',
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
) STRICT;
CREATE INDEX classifications_name ON classifications(name);
CREATE INDEX classifications_created_at ON classifications(created_at);

CREATE TABLE classification_users (
  classification_id INTEGER NOT NULL REFERENCES classifications(id) ON DELETE CASCADE,
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  PRIMARY KEY (classification_id, user_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX classification_users_user_id ON classification_users(user_id);

CREATE TABLE classification_roles (
  classification_id INTEGER NOT NULL REFERENCES classifications(id) ON DELETE CASCADE,
  role_id INTEGER NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
  PRIMARY KEY (classification_id, role_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX classification_roles_role_id ON classification_roles(role_id);

CREATE TABLE classification_providers (
  classification_id INTEGER NOT NULL REFERENCES classifications(id) ON DELETE CASCADE,
  configuration_id TEXT NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
  gws_groups TEXT NOT NULL DEFAULT '[]',
  PRIMARY KEY (classification_id, configuration_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX classification_providers_configuration_id ON classification_providers(configuration_id);

CREATE TABLE activity_logs (
  id INTEGER PRIMARY KEY,
  action TEXT NOT NULL,
  description TEXT NOT NULL,
  ip TEXT NOT NULL,
  user_id INTEGER,
  causer_email TEXT,
  request_id TEXT,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX activity_logs_created_at ON activity_logs(created_at);
CREATE INDEX activity_logs_request_id ON activity_logs(request_id);
CREATE INDEX activity_logs_user_id ON activity_logs(user_id, created_at);

CREATE TABLE api_logs (
  id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  status_code INTEGER NOT NULL,
  api_key_id TEXT,
  user_id INTEGER,
  configuration_id TEXT,
  destination TEXT,
  duration_ms REAL NOT NULL,
  ip TEXT NOT NULL,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX api_logs_created_at ON api_logs(created_at);
CREATE INDEX api_logs_request_id ON api_logs(request_id);
CREATE INDEX api_logs_user_id ON api_logs(user_id, created_at);

CREATE TABLE usage_logs (
  id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL,
  configuration_id TEXT NOT NULL,
  api_key_id TEXT,
  user_id INTEGER,
  mode TEXT NOT NULL CHECK (mode IN ('encrypt', 'decrypt')),
  field_count INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX usage_logs_created_at ON usage_logs(created_at);
CREATE INDEX usage_logs_request_id ON usage_logs(request_id);
CREATE INDEX usage_logs_user_id ON usage_logs(user_id, created_at);

-- Built-in roles and permissions (DESIGN §9).
INSERT INTO permissions (name) VALUES
  ('classifications.view'), ('classifications.create'), ('classifications.update'), ('classifications.delete'),
  ('configurations.view'), ('configurations.create'), ('configurations.update'), ('configurations.delete'),
  ('configurations.rotate'),
  ('data.encrypt'), ('data.decrypt'),
  ('logs.view'),
  ('api-keys.view'), ('api-keys.create'), ('api-keys.revoke'), ('api-keys.rotate'),
  ('users.view'), ('users.manage'),
  ('roles.view');

INSERT INTO roles (name, description) VALUES
  ('owner', 'Owns the account. Full access.'),
  ('administrator', 'Manages the account. Full access.'),
  ('developer', 'Encrypts and decrypts data, views settings and creates API keys.'),
  ('viewer', 'Read-only access to settings and logs.');

INSERT INTO role_permissions (role_id, permission_id)
  SELECT r.id, p.id FROM roles r, permissions p
  WHERE r.name IN ('owner', 'administrator')
     OR (r.name = 'developer' AND (p.name LIKE 'data.%' OR p.name LIKE '%.view' OR p.name = 'api-keys.create'))
     OR (r.name = 'viewer' AND p.name LIKE '%.view');
`;

/**
 * Logged-out access tokens (DESIGN §9). A row only has to outlive the token it names, so
 * it keeps the token's expiry and rows past it are purged.
 */
const schemaV2 = /* sql */ `
CREATE TABLE token_revocations (
  jti TEXT PRIMARY KEY,
  expires_at TEXT NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX token_revocations_expires_at ON token_revocations(expires_at);
`;

/**
 * The classification list sorts names case-insensitively (ASCII, as SQLite's NOCASE folds).
 * Without an index in that collation every page of the default listing sorted the whole
 * table; with it a page reads just its rows. Index entries end with the rowid, so this
 * also serves the `id` tie-break.
 */
const schemaV3 = /* sql */ `
CREATE INDEX classifications_name_nocase ON classifications(name COLLATE NOCASE);
`;

/**
 * Replication (docs/replication.md). `sync.read` lets a replica pull the state snapshot,
 * `sync.write` lets it ship its logs; both carry secrets' hashes or fleet-wide logs, so only
 * the roles with full access get them.
 *
 * `sync_state` keeps one row per role a store plays: `published` on a control plane (the
 * last snapshot served and the version it got, so versions only move forward across
 * restarts) and `applied` on a replica (the last good snapshot itself, so a restart while
 * the control plane is down still serves). `sync_log_cursors` is a replica's shipping
 * position per log kind.
 *
 * Rows a control plane receives from replicas carry the replica's name and the row's id
 * there; the unique index makes a retried batch land once. Local rows leave both NULL and
 * stay out of the (partial) index.
 */
const schemaV4 = /* sql */ `
INSERT INTO permissions (name) VALUES ('sync.read'), ('sync.write');
INSERT INTO role_permissions (role_id, permission_id)
  SELECT r.id, p.id FROM roles r, permissions p
  WHERE r.name IN ('owner', 'administrator') AND p.name IN ('sync.read', 'sync.write');

CREATE TABLE sync_state (
  name TEXT PRIMARY KEY CHECK (name IN ('published', 'applied')),
  version INTEGER NOT NULL CHECK (version >= 1),
  digest TEXT NOT NULL,
  sections TEXT NOT NULL,
  body BLOB,
  updated_at TEXT NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE sync_log_cursors (
  kind TEXT PRIMARY KEY CHECK (kind IN ('api', 'usage')),
  last_id INTEGER NOT NULL,
  last_request_id TEXT NOT NULL,
  updated_at TEXT NOT NULL
) STRICT, WITHOUT ROWID;

ALTER TABLE api_logs ADD COLUMN replica TEXT;
ALTER TABLE api_logs ADD COLUMN replica_log_id INTEGER;
CREATE UNIQUE INDEX api_logs_replica_row ON api_logs(replica, replica_log_id, request_id) WHERE replica IS NOT NULL;
ALTER TABLE usage_logs ADD COLUMN replica TEXT;
ALTER TABLE usage_logs ADD COLUMN replica_log_id INTEGER;
CREATE UNIQUE INDEX usage_logs_replica_row ON usage_logs(replica, replica_log_id, request_id) WHERE replica IS NOT NULL;
`;

/**
 * Facts about the store itself, never replicated: the check value of the master key the
 * store's keys are wrapped under (DESIGN §13), so a start with another key stops at once.
 */
const schemaV5 = /* sql */ `
CREATE TABLE store_meta (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
`;

/**
 * When each key version stopped being the current one (DESIGN §13, "Key destruction is never
 * a data-loss race"): a version may be destroyed only `keys.destroy_after` later, since
 * requests in flight and replicas that have not polled yet still encrypt with it. NULL for
 * the current version. Versions superseded before this column existed get the time the next
 * version was created: rotation is the only way a version stops being current, and it
 * inserts the next version at that moment.
 */
const schemaV6 = /* sql */ `
ALTER TABLE data_keys ADD COLUMN superseded_at TEXT;
UPDATE data_keys SET superseded_at = (
  SELECT min(n.created_at) FROM data_keys n WHERE n.configuration_id = data_keys.configuration_id AND n.version > data_keys.version
);
`;

/**
 * Fleet logs that no other holder of the fleet key can suppress (DESIGN §13). A replica
 * makes a random instance id at its first start (`sync_instance`, one row) and ships it
 * with its logs; the control plane keeps each received row once per (instance id, row
 * id). The previous key, (replica name, row id, request id), could be claimed in advance
 * by anyone who knew a replica's name, which every log list shows. Rows received before
 * this version keep a NULL instance and stay out of the (partial) index.
 *
 * `id_base` moves a replica's shipped row ids past every id shipped before once retention
 * has emptied a log table and SQLite numbers it from 1 again.
 */
const schemaV7 = /* sql */ `
CREATE TABLE sync_instance (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  instance_id TEXT NOT NULL CHECK (length(instance_id) = 32),
  created_at TEXT NOT NULL
) STRICT;

ALTER TABLE sync_log_cursors ADD COLUMN id_base INTEGER NOT NULL DEFAULT 0;

ALTER TABLE api_logs ADD COLUMN replica_instance TEXT;
DROP INDEX api_logs_replica_row;
CREATE UNIQUE INDEX api_logs_replica_row ON api_logs(replica_instance, replica_log_id) WHERE replica_instance IS NOT NULL;
ALTER TABLE usage_logs ADD COLUMN replica_instance TEXT;
DROP INDEX usage_logs_replica_row;
CREATE UNIQUE INDEX usage_logs_replica_row ON usage_logs(replica_instance, replica_log_id) WHERE replica_instance IS NOT NULL;
`;

/**
 * Identities (DESIGN §13).
 *
 * Ids are never reused: `users` and `classifications` had plain INTEGER PRIMARY KEYs, which
 * hand the highest id out again once its row is deleted, and tokens and access tokens name
 * rows by id. Both are rebuilt with AUTOINCREMENT. The counters start above every id the
 * store still knows of: the rows, and for users the ids the logs name (logs outlive the
 * rows), for classifications the ids in the activity entries of classification changes.
 *
 * Emails are stored normalised (normalizeEmail). Two users whose emails normalise alike
 * were one person twice (or one posing as the other): the one already stored in normal
 * form keeps the email, else the oldest; each other one is disabled, its email becomes
 * `<local>+duplicate-<id>@<domain>` of the normalised email (still an address, so every
 * view of it stays valid, and no longer the one identity's), and an activity entry names
 * what it was.
 */
function schemaV8(db: DatabaseSync): void {
  addAutoincrement(db, 'users');
  addAutoincrement(db, 'classifications');
  const userIdsInLogs = db
    .prepare(`SELECT max(m) AS n FROM (SELECT max(user_id) AS m FROM activity_logs UNION ALL SELECT max(user_id) FROM api_logs
              UNION ALL SELECT max(user_id) FROM usage_logs)`)
    .get() as { n: number | null };
  raiseSequence(db, 'users', userIdsInLogs.n ?? 0);
  raiseSequence(db, 'classifications', classificationIdsInLogs(db));
  normalizeStoredEmails(db);
}

/**
 * The relay's end user (DESIGN §14): the subject of the JWT a relay request carried — `sub`,
 * else the user claim, never the token — on the api log row of that request. NULL for
 * every other row, and for rows from before this version.
 */
const schemaV9 = /* sql */ `
ALTER TABLE api_logs ADD COLUMN end_user TEXT;
`;

/**
 * Reveal levels (DESIGN §14). A classification keeps its grants as one JSON array (users
 * and roles by id, groups by provider group id: store/reveal-rules.ts), the level everyone
 * else gets, and the mask of a `mask` default. Existing classifications get no grants and a
 * `deny` default: they reveal exactly what they did. A usage entry of a decrypt records
 * how many values it showed at each level (`{"plain":n,"mask":n,"redact":n,"token":n}`);
 * NULL for an encrypt and for the entries written before.
 */
const schemaV10 = /* sql */ `
ALTER TABLE classifications ADD COLUMN reveal TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(reveal) AND json_type(reveal) = 'array');
ALTER TABLE classifications ADD COLUMN reveal_default TEXT NOT NULL DEFAULT 'deny' CHECK (reveal_default IN ('deny', 'token', 'redact', 'mask'));
ALTER TABLE classifications ADD COLUMN reveal_default_mask TEXT CHECK (reveal_default_mask IS NULL OR json_valid(reveal_default_mask));
ALTER TABLE usage_logs ADD COLUMN reveal TEXT CHECK (reveal IS NULL OR json_valid(reveal));
`;

/**
 * Failed logins in the store rather than in one process's memory (DESIGN §9 lockout): every
 * process on the store counts the same attempts, and a restart keeps them. Times are
 * milliseconds since the epoch.
 */
const schemaV11 = /* sql */ `
CREATE TABLE login_failures (
  email TEXT NOT NULL,
  failed_at INTEGER NOT NULL
) STRICT;
CREATE INDEX login_failures_email ON login_failures(email, failed_at);
CREATE INDEX login_failures_failed_at ON login_failures(failed_at);
`;

export const migrations: readonly Migration[] = Object.freeze([
  { version: 1, sql: schemaV1 },
  { version: 2, sql: schemaV2 },
  { version: 3, sql: schemaV3 },
  { version: 4, sql: schemaV4 },
  { version: 5, sql: schemaV5 },
  { version: 6, sql: schemaV6 },
  { version: 7, sql: schemaV7 },
  { version: 8, run: schemaV8 },
  { version: 9, sql: schemaV9 },
  { version: 10, sql: schemaV10 },
  { version: 11, sql: schemaV11 },
]);

/**
 * Rebuilds `table` with `id INTEGER PRIMARY KEY AUTOINCREMENT` (SQLite cannot add it in
 * place), keeping every row, column, index and trigger as they are: the new definition is
 * the stored one with AUTOINCREMENT added, so columns later migrations added survive, and
 * the table's indexes and triggers are read back and created again. Foreign keys of other
 * tables name the table by name, so they hold across the rename. Runs with foreign keys
 * off (see migrate): with them on, dropping the old table would cascade into its children.
 */
function addAutoincrement(db: DatabaseSync, table: string): void {
  const definition = db.prepare("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?").get(table) as { sql: string } | undefined;
  if (definition === undefined) throw new Error(`Migration: table ${table} does not exist.`);
  const temporary = `${table}__rebuild`;
  const primaryKey = /\bid\s+INTEGER\s+PRIMARY\s+KEY\b(?!\s+AUTOINCREMENT)/i;
  const head = /^CREATE\s+TABLE\s+("?)(\w+)\1/i;
  if (!primaryKey.test(definition.sql) || !head.test(definition.sql)) throw new Error(`Migration: cannot add AUTOINCREMENT to ${table}: ${definition.sql}`);
  const rebuilt = definition.sql.replace(head, `CREATE TABLE "${temporary}"`).replace(primaryKey, 'id INTEGER PRIMARY KEY AUTOINCREMENT');
  const dependents = db
    .prepare("SELECT sql FROM sqlite_schema WHERE tbl_name = ? AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name")
    .all(table) as Array<{ sql: string }>;
  const columns = (db.prepare(`SELECT name FROM pragma_table_info(?) ORDER BY cid`).all(table) as Array<{ name: string }>).map((c) => `"${c.name}"`).join(', ');
  db.exec(rebuilt);
  db.exec(`INSERT INTO "${temporary}" (${columns}) SELECT ${columns} FROM "${table}"`);
  db.exec(`DROP TABLE "${table}"`);
  db.exec(`ALTER TABLE "${temporary}" RENAME TO "${table}"`);
  for (const { sql } of dependents) db.exec(sql);
}

/** Makes the next AUTOINCREMENT id of `table` at least `above + 1`. */
function raiseSequence(db: DatabaseSync, table: string, above: number): void {
  db.prepare('INSERT INTO sqlite_sequence (name, seq) SELECT ?1, 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)').run(table);
  db.prepare(`UPDATE sqlite_sequence SET seq = max(seq, ?2, (SELECT coalesce(max(id), 0) FROM main."${table}")) WHERE name = ?1`).run(table, above);
}

/**
 * The highest classification id named by an activity entry of the API (`... (id 7, slug phi).`
 * at the end of the description: a name, written earlier in it, cannot forge the end).
 */
function classificationIdsInLogs(db: DatabaseSync): number {
  const rows = db.prepare("SELECT description FROM activity_logs WHERE action LIKE 'classification.%'").all() as Array<{ description: string }>;
  let highest = 0;
  for (const { description } of rows) {
    const match = /\(id ([0-9]{1,15}), slug [a-z0-9-]+\)\.$/.exec(description);
    if (match !== null) highest = Math.max(highest, Number(match[1]));
  }
  return highest;
}

function normalizeStoredEmails(db: DatabaseSync): void {
  const users = db.prepare('SELECT id, email FROM users ORDER BY id').all() as Array<{ id: number; email: string }>;
  const byKey = new Map<string, Array<{ id: number; email: string }>>();
  for (const user of users) {
    const key = normalizeEmail(user.email);
    const group = byKey.get(key);
    if (group === undefined) byKey.set(key, [user]);
    else group.push(user);
  }
  const now = new Date().toISOString();
  const rename = db.prepare('UPDATE users SET email = ?, updated_at = max(updated_at, ?) WHERE id = ?');
  const disable = db.prepare('UPDATE users SET email = ?, disabled = 1, updated_at = max(updated_at, ?) WHERE id = ?');
  const record = db.prepare(`INSERT INTO activity_logs (action, description, ip, user_id, causer_email, request_id, created_at)
                             VALUES ('user.disabled', ?, '', ?, ?, NULL, ?)`);
  // Losers first: their old emails may equal the keeper's new one in the NOCASE index.
  const keepers: Array<{ id: number; key: string }> = [];
  for (const [key, group] of byKey) {
    const keeper = group.find((user) => user.email === key) ?? group[0]!;
    for (const user of group) {
      if (user === keeper) continue;
      const at = key.lastIndexOf('@');
      const parked = at < 0 ? `${key}+duplicate-${user.id}` : `${key.slice(0, at)}+duplicate-${user.id}${key.slice(at)}`;
      disable.run(parked, now, user.id);
      record.run(
        `Disabled user ${JSON.stringify(user.email)} (id ${user.id}) on upgrade: its email normalises to ${key}, the email of user ${keeper.id}; its email is now ${parked}.`,
        user.id,
        parked,
        now,
      );
    }
    if (keeper.email !== key) keepers.push({ id: keeper.id, key });
  }
  for (const { id, key } of keepers) rename.run(key, now, id);
}

export function schemaVersion(db: DatabaseSync): number {
  const row = db.prepare('PRAGMA user_version').get() as { user_version: number } | undefined;
  return row?.user_version ?? 0;
}

/**
 * Brings the database up to the newest version in `list`. Returns the versions it moved
 * between. Throws, changing nothing, when the database was written by a newer build:
 * running old code on a newer schema would corrupt it in ways no error reports.
 */
export function migrate(db: DatabaseSync, list: readonly Migration[] = migrations): { from: number; to: number } {
  checkMigrationList(list);
  const latest = list.at(-1)?.version ?? 0;
  const current = schemaVersion(db);
  assertNotNewer(current, latest);
  if (current === latest) return { from: current, to: current };

  // A migration may rebuild a table others refer to (SQLite's recipe for schema changes
  // ALTER TABLE cannot make): with foreign keys on, dropping the old table would delete or
  // refuse its children. So they are off while migrations run (the pragma is ignored
  // inside a transaction, hence before it) and every constraint is checked before commit.
  if (db.isTransaction) throw new Error('Migrations cannot run inside a transaction.');
  const foreignKeys = (db.prepare('PRAGMA foreign_keys').get() as { foreign_keys: number }).foreign_keys === 1;
  if (foreignKeys) db.exec('PRAGMA foreign_keys = OFF');
  try {
    // Re-read inside the write lock: another process may have migrated while we waited.
    return runInTransaction(db, () => {
      const from = schemaVersion(db);
      assertNotNewer(from, latest);
      for (const migration of list) {
        if (migration.version <= from) continue;
        if ('sql' in migration) db.exec(migration.sql);
        else migration.run(db);
        // Pragmas take no bound parameters; the version is an integer from our own list.
        db.exec(`PRAGMA user_version = ${migration.version}`);
      }
      const broken = db.prepare('PRAGMA foreign_key_check').all() as Array<{ table: string; parent: string }>;
      if (broken.length > 0) {
        const first = broken[0]!;
        throw new Error(`A migration left ${broken.length} row(s) whose foreign keys point nowhere (first: ${first.table} → ${first.parent}); nothing was changed.`);
      }
      return { from, to: latest };
    });
  } finally {
    if (foreignKeys) db.exec('PRAGMA foreign_keys = ON');
  }
}

function assertNotNewer(current: number, latest: number): void {
  if (current > latest) {
    throw new Error(
      `The database schema is version ${current}, but this build of svc-sidecar only knows versions up to ${latest}. ` +
        'Run a newer svc-sidecar, or restore a backup made by this version.',
    );
  }
}

function checkMigrationList(list: readonly Migration[]): void {
  list.forEach((migration, index) => {
    if (migration.version !== index + 1) {
      throw new Error(`Migration versions must run 1, 2, 3, ... without gaps; found ${migration.version} at position ${index + 1}.`);
    }
  });
}
