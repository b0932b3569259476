import { normalizeEmail } from './identity-text.ts';
import { all, atomically, get, run, type Dialect, type Step } from './query.ts';
import { roleColumns, toRole, type Role, type RoleRecord } from './roles.ts';
import { definedOnly, nowIso, type RowSource } from './sql.ts';

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

const INSERT = `
  INSERT INTO users (name, email, password_hash, disabled, two_factor_enabled, source, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`;
// Strictly later than before, even within the same millisecond, so two changes never
// leave the same stamp (a token from between them would look current).
const UPDATE = (d: Dialect): string => `
  UPDATE users SET name = ?, email = ?, password_hash = ?, disabled = ?, two_factor_enabled = ?,
         updated_at = ${d.laterThan('updated_at', '?')}
   WHERE id = ? RETURNING *`;
const TOUCH = (d: Dialect): string => `UPDATE users SET updated_at = ${d.laterThan('updated_at', '?')} WHERE id = ?`;
const BY_ID = 'SELECT * FROM users WHERE id = ?';
// Emails are stored normalised and looked up normalised.
const BY_EMAIL = 'SELECT * FROM users WHERE email = ?';
const LIST = 'SELECT * FROM users ORDER BY id';
const PAGE = 'SELECT * FROM users ORDER BY id LIMIT ? OFFSET ?';
const COUNT = 'SELECT count(*) AS n FROM users';
const CLEAR_ROLES = 'DELETE FROM user_roles WHERE user_id = ?';
const ADD_ROLES = (d: Dialect): string => `INSERT INTO user_roles (user_id, role_id) SELECT DISTINCT CAST(? AS BIGINT), value FROM (${d.jsonIntegers('?')}) ids`;
const ROLES_OF = (d: Dialect): string => `
  SELECT ${roleColumns(d)} FROM user_roles ur JOIN roles r ON r.id = ur.role_id
   WHERE ur.user_id = ? ORDER BY r.id`;
const ALL_ROLE_IDS = 'SELECT user_id, role_id FROM user_roles ORDER BY user_id, role_id';
const PERMISSIONS_OF = `
  SELECT DISTINCT p.name FROM user_roles ur
    JOIN role_permissions rp ON rp.role_id = ur.role_id
    JOIN permissions p ON p.id = rp.permission_id
   WHERE ur.user_id = ?`;

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
  *create(input: NewUser): Step<User> {
    return yield* atomically(function* () {
      const now = nowIso();
      const record = (yield* get<UserRecord>(
        INSERT,
        input.name,
        normalizeEmail(input.email),
        input.passwordHash ?? null,
        input.disabled === true ? 1 : 0,
        input.twoFactorEnabled === true ? 1 : 0,
        input.source ?? 'api',
        now,
        now,
      ))!;
      yield* run(ADD_ROLES, record.id, JSON.stringify(input.roleIds));
      return toUser(record);
    });
  }

  /** Returns the updated user, or undefined when there is no user `id`. */
  *update(id: number, patch: UserPatch): Step<User | undefined> {
    const self = this;
    return yield* atomically(function* () {
      const current = yield* self.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      const record = (yield* get<UserRecord>(
        UPDATE,
        next.name,
        normalizeEmail(next.email),
        next.passwordHash,
        next.disabled ? 1 : 0,
        next.twoFactorEnabled ? 1 : 0,
        nowIso(),
        id,
      ))!;
      return toUser(record);
    });
  }

  *findById(id: number): Step<User | undefined> {
    const record = yield* get<UserRecord>(BY_ID, id);
    return record && toUser(record);
  }

  /** Compared normalised: `\u212Aate@example.com` finds `kate@example.com`. */
  *findByEmail(email: string): Step<User | undefined> {
    const record = yield* get<UserRecord>(BY_EMAIL, normalizeEmail(email));
    return record && toUser(record);
  }

  *list(): Step<User[]> {
    return (yield* all<UserRecord>(LIST)).map(toUser);
  }

  /** One page in `list()` order. */
  *page(limit: number, offset: number): Step<User[]> {
    return (yield* all<UserRecord>(PAGE, limit, offset)).map(toUser);
  }

  *count(): Step<number> {
    return (yield* get<{ n: number }>(COUNT))!.n;
  }

  /** Replaces the user's roles; a change moves the user's `updatedAt`, ending their sessions. */
  *setRoles(id: number, roleIds: readonly number[]): Step<void> {
    const self = this;
    yield* atomically(function* () {
      const before = new Set((yield* self.rolesOf(id)).map((role) => role.id));
      const after = new Set(roleIds);
      yield* run(CLEAR_ROLES, id);
      yield* run(ADD_ROLES, id, JSON.stringify(roleIds));
      if (before.size !== after.size || [...after].some((roleId) => !before.has(roleId))) yield* run(TOUCH, nowIso(), id);
    });
  }

  *rolesOf(id: number): Step<Role[]> {
    return (yield* all<RoleRecord>(ROLES_OF, id)).map(toRole);
  }

  /** Every user's role ids, in id order; users without roles are absent. */
  *roleIdsByUser(): Step<Map<number, number[]>> {
    const out = new Map<number, number[]>();
    for (const row of yield* all<{ user_id: number; role_id: number }>(ALL_ROLE_IDS)) {
      let ids = out.get(row.user_id);
      if (ids === undefined) out.set(row.user_id, (ids = []));
      ids.push(row.role_id);
    }
    return out;
  }

  /** The union of the permissions of the user's roles. */
  *permissionsOf(id: number): Step<Set<string>> {
    const rows = yield* all<{ name: string }>(PERMISSIONS_OF, id);
    return new Set(rows.map((row) => row.name));
  }
}
