import { all, get, type Dialect, type Step } from './query.ts';
import { parseJsonArray } from './sql.ts';

export interface Role {
  id: number;
  name: string;
  description: string | null;
  /** Permission names, in catalogue order. */
  permissions: string[];
}

/** Selects a role (aliased `r`) with its permission names as a JSON array; users.ts reuses it. */
export function roleColumns(d: Dialect): string {
  return `r.id, r.name, r.description,
  (SELECT ${d.jsonArrayOf('p.name', 'p.id')}
     FROM role_permissions rp JOIN permissions p ON p.id = rp.permission_id
    WHERE rp.role_id = r.id) AS permissions`;
}

export interface RoleRecord {
  id: number;
  name: string;
  description: string | null;
  permissions: string;
}

export function toRole(record: RoleRecord): Role {
  return {
    id: record.id,
    name: record.name,
    description: record.description,
    permissions: parseJsonArray<string>(record.permissions),
  };
}

const LIST = (d: Dialect): string => `SELECT ${roleColumns(d)} FROM roles r ORDER BY r.id`;
const BY_ID = (d: Dialect): string => `SELECT ${roleColumns(d)} FROM roles r WHERE r.id = ?`;
const BY_NAME = (d: Dialect): string => `SELECT ${roleColumns(d)} FROM roles r WHERE r.name = ?`;
// A JSON array parameter lets one prepared statement take any number of ids.
const PERMISSIONS_OF_ROLES = (d: Dialect): string => `
  SELECT DISTINCT p.name FROM role_permissions rp JOIN permissions p ON p.id = rp.permission_id
   WHERE rp.role_id IN (${d.jsonIntegers('?')})`;
const PERMISSION_NAMES = 'SELECT name FROM permissions ORDER BY id';

export class RolesRepository {
  *list(): Step<Role[]> {
    return (yield* all<RoleRecord>(LIST)).map(toRole);
  }

  *findById(id: number): Step<Role | undefined> {
    const record = yield* get<RoleRecord>(BY_ID, id);
    return record && toRole(record);
  }

  *findByName(name: string): Step<Role | undefined> {
    const record = yield* get<RoleRecord>(BY_NAME, name);
    return record && toRole(record);
  }

  *permissionsForRoles(roleIds: readonly number[]): Step<Set<string>> {
    const rows = yield* all<{ name: string }>(PERMISSIONS_OF_ROLES, JSON.stringify(roleIds));
    return new Set(rows.map((row) => row.name));
  }

  /** Every permission the service knows, in catalogue order. */
  *permissionNames(): Step<string[]> {
    return (yield* all<{ name: string }>(PERMISSION_NAMES)).map((row) => row.name);
  }
}
