import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { normalizeEmail } from './identity-text.ts';
import { ROLE_COLUMNS, toRole, type Role, type RoleRecord } from './roles.ts';
import { definedOnly, nowIso, type RowSource } from './sql.ts';
import { runInTransaction } from './sqlite/transaction.ts';

export interface User {
  /** Never reused: AUTOINCREMENT, so no new user takes the id of a deleted one. */
  id: number;
  name: string;
  /** Normalised (normalizeEmail). */
  email: string;
  passwordHash: string | null;
  disabled: boolean;
  twoFactorEnabled: boolean;
  source: RowSource;
  createdAt: string;
  /**
   * Moves forward with every change of the user, roles included, and never repeats: access
   * tokens carry it and are refused once it moves (DESIGN §13, "Sessions end with their
   * credentials").
   */
  updatedAt: string;
}

export interface NewUser {
  name: string;
  email: string;
  passwordHash?: string | null;
  roleIds: readonly number[];
  disabled?: boolean;
  twoFactorEnabled?: boolean;
  /** Default `api`. */
  source?: RowSource;
}

export interface UserPatch {
  name?: string;
  email?: string;
  /** `null` removes the password: the user can no longer log in. */
  passwordHash?: string | null;
  disabled?: boolean;
  twoFactorEnabled?: boolean;
}

interface UserRecord {
  id: number;
  name: string;
  email: string;
  password_hash: string | null;
  disabled: number;
  two_factor_enabled: number;
  source: RowSource;
  created_at: string;
  updated_at: string;
}

/** `updated_at` set to now (the first parameter), or 1 ms past its old value if that is not earlier. */
const LATER = "updated_at = max(?, strftime('%Y-%m-%dT%H:%M:%fZ', updated_at, '+0.001 seconds'))";

function toUser(record: UserRecord): User {
  return {
    id: record.id,
    name: record.name,
    email: record.email,
    passwordHash: record.password_hash,
    disabled: record.disabled === 1,
    twoFactorEnabled: record.two_factor_enabled === 1,
    source: record.source,
    createdAt: record.created_at,
    updatedAt: record.updated_at,
  };
}

export class UsersRepository {
  readonly #db: DatabaseSync;
  readonly #insert: StatementSync;
  readonly #update: StatementSync;
  readonly #touch: StatementSync;
  readonly #byId: StatementSync;
  readonly #byEmail: StatementSync;
  readonly #list: StatementSync;
  readonly #page: StatementSync;
  readonly #count: StatementSync;
  readonly #clearRoles: StatementSync;
  readonly #addRoles: StatementSync;
  readonly #rolesOf: StatementSync;
  readonly #permissionsOf: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#insert = db.prepare(`
      INSERT INTO users (name, email, password_hash, disabled, two_factor_enabled, source, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`);
    // Strictly later than before, even within the same millisecond, so two changes never
    // leave the same stamp (a token from between them would look current).
    this.#update = db.prepare(`
      UPDATE users SET name = ?, email = ?, password_hash = ?, disabled = ?, two_factor_enabled = ?, ${LATER}
       WHERE id = ? RETURNING *`);
    this.#touch = db.prepare(`UPDATE users SET ${LATER} WHERE id = ?`);
    this.#byId = db.prepare('SELECT * FROM users WHERE id = ?');
    // Emails are stored normalised and looked up normalised (COLLATE NOCASE stays from
    // before, and changes nothing for normalised text).
    this.#byEmail = db.prepare('SELECT * FROM users WHERE email = ?');
    this.#list = db.prepare('SELECT * FROM users ORDER BY id');
    this.#page = db.prepare('SELECT * FROM users ORDER BY id LIMIT ? OFFSET ?');
    this.#count = db.prepare('SELECT count(*) AS n FROM users');
    this.#clearRoles = db.prepare('DELETE FROM user_roles WHERE user_id = ?');
    this.#addRoles = db.prepare('INSERT INTO user_roles (user_id, role_id) SELECT DISTINCT ?, value FROM json_each(?)');
    this.#rolesOf = db.prepare(`
      SELECT ${ROLE_COLUMNS} FROM user_roles ur JOIN roles r ON r.id = ur.role_id
       WHERE ur.user_id = ? ORDER BY r.id`);
    this.#permissionsOf = db.prepare(`
      SELECT DISTINCT p.name FROM user_roles ur
        JOIN role_permissions rp ON rp.role_id = ur.role_id
        JOIN permissions p ON p.id = rp.permission_id
       WHERE ur.user_id = ?`);
  }

  create(input: NewUser): User {
    return runInTransaction(this.#db, () => {
      const now = nowIso();
      const record = this.#insert.get(
        input.name,
        normalizeEmail(input.email),
        input.passwordHash ?? null,
        input.disabled === true ? 1 : 0,
        input.twoFactorEnabled === true ? 1 : 0,
        input.source ?? 'api',
        now,
        now,
      ) as unknown as UserRecord;
      this.#addRoles.run(record.id, JSON.stringify(input.roleIds));
      return toUser(record);
    });
  }

  /** Returns the updated user, or undefined when there is no user `id`. */
  update(id: number, patch: UserPatch): User | undefined {
    return runInTransaction(this.#db, () => {
      const current = this.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      const record = this.#update.get(
        next.name,
        normalizeEmail(next.email),
        next.passwordHash,
        next.disabled ? 1 : 0,
        next.twoFactorEnabled ? 1 : 0,
        nowIso(),
        id,
      ) as unknown as UserRecord;
      return toUser(record);
    });
  }

  findById(id: number): User | undefined {
    const record = this.#byId.get(id) as UserRecord | undefined;
    return record && toUser(record);
  }

  /** Compared normalised: `\u212Aate@example.com` finds `kate@example.com`. */
  findByEmail(email: string): User | undefined {
    const record = this.#byEmail.get(normalizeEmail(email)) as UserRecord | undefined;
    return record && toUser(record);
  }

  list(): User[] {
    return (this.#list.all() as unknown as UserRecord[]).map(toUser);
  }

  /** One page in `list()` order. */
  page(limit: number, offset: number): User[] {
    return (this.#page.all(limit, offset) as unknown as UserRecord[]).map(toUser);
  }

  count(): number {
    return (this.#count.get() as { n: number }).n;
  }

  /** Replaces the user's roles; a change moves the user's `updatedAt`, ending their sessions. */
  setRoles(id: number, roleIds: readonly number[]): void {
    runInTransaction(this.#db, () => {
      const before = new Set(this.rolesOf(id).map((role) => role.id));
      const after = new Set(roleIds);
      this.#clearRoles.run(id);
      this.#addRoles.run(id, JSON.stringify(roleIds));
      if (before.size !== after.size || [...after].some((roleId) => !before.has(roleId))) this.#touch.run(nowIso(), id);
    });
  }

  rolesOf(id: number): Role[] {
    return (this.#rolesOf.all(id) as unknown as RoleRecord[]).map(toRole);
  }

  /** The union of the permissions of the user's roles. */
  permissionsOf(id: number): Set<string> {
    const rows = this.#permissionsOf.all(id) as unknown as Array<{ name: string }>;
    return new Set(rows.map((row) => row.name));
  }
}
