import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { parseJsonArray } from './sql.ts';

export interface Role {
  id: number;
  name: string;
  description: string | null;
  /** Permission names, in catalogue order. */
  permissions: string[];
}

/** Selects a role (aliased `r`) with its permission names as a JSON array; users.ts reuses it. */
export const ROLE_COLUMNS = `r.id, r.name, r.description,
  (SELECT json_group_array(p.name ORDER BY p.id)
     FROM role_permissions rp JOIN permissions p ON p.id = rp.permission_id
    WHERE rp.role_id = r.id) AS permissions`;

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

export class RolesRepository {
  readonly #list: StatementSync;
  readonly #byId: StatementSync;
  readonly #byName: StatementSync;
  readonly #permissionsOfRoles: StatementSync;
  readonly #permissionNames: StatementSync;

  constructor(db: DatabaseSync) {
    this.#list = db.prepare(`SELECT ${ROLE_COLUMNS} FROM roles r ORDER BY r.id`);
    this.#byId = db.prepare(`SELECT ${ROLE_COLUMNS} FROM roles r WHERE r.id = ?`);
    this.#byName = db.prepare(`SELECT ${ROLE_COLUMNS} FROM roles r WHERE r.name = ?`);
    // A JSON array parameter lets one prepared statement take any number of ids.
    this.#permissionsOfRoles = db.prepare(`
      SELECT DISTINCT p.name FROM role_permissions rp JOIN permissions p ON p.id = rp.permission_id
       WHERE rp.role_id IN (SELECT value FROM json_each(?))`);
    this.#permissionNames = db.prepare('SELECT name FROM permissions ORDER BY id');
  }

  list(): Role[] {
    return (this.#list.all() as unknown as RoleRecord[]).map(toRole);
  }

  findById(id: number): Role | undefined {
    const record = this.#byId.get(id) as RoleRecord | undefined;
    return record && toRole(record);
  }

  findByName(name: string): Role | undefined {
    const record = this.#byName.get(name) as RoleRecord | undefined;
    return record && toRole(record);
  }

  permissionsForRoles(roleIds: readonly number[]): Set<string> {
    const rows = this.#permissionsOfRoles.all(JSON.stringify(roleIds)) as unknown as Array<{ name: string }>;
    return new Set(rows.map((row) => row.name));
  }

  /** Every permission the service knows, in catalogue order. */
  permissionNames(): string[] {
    return (this.#permissionNames.all() as unknown as Array<{ name: string }>).map((row) => row.name);
  }
}
