import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { definedOnly, nowIso, parseJsonArray, type RowSource } from './sql.ts';
import { runInTransaction } from './transaction.ts';

export interface GwsGroup {
  id: string;
  name?: string;
  email?: string;
}

export interface ClassificationProvider {
  configurationId: string;
  gwsGroups: GwsGroup[];
}

export interface ClassificationMembers {
  userIds: number[];
  roleIds: number[];
  providers: ClassificationProvider[];
}

export interface Classification {
  id: number;
  name: string;
  slug: string;
  description: string | null;
  bgColor: string;
  fgColor: string;
  emoji: string | null;
  providerContainerId: string | null;
  source: RowSource;
  createdAt: string;
  updatedAt: string;
}

export interface NewClassification {
  name: string;
  /** Default: `uniqueSlug(name)`. */
  slug?: string;
  description?: string | null;
  bgColor: string;
  fgColor: string;
  emoji?: string | null;
  providerContainerId?: string | null;
  /** Default `api`. */
  source?: RowSource;
  userIds?: readonly number[];
  roleIds?: readonly number[];
  providers?: readonly ClassificationProvider[];
}

/** A member list that is present replaces the stored one; an absent one is left alone. */
export interface ClassificationPatch {
  name?: string;
  slug?: string;
  description?: string | null;
  bgColor?: string;
  fgColor?: string;
  emoji?: string | null;
  providerContainerId?: string | null;
  userIds?: readonly number[];
  roleIds?: readonly number[];
  providers?: readonly ClassificationProvider[];
}

interface ClassificationRecord {
  id: number;
  name: string;
  slug: string;
  description: string | null;
  bg_color: string;
  fg_color: string;
  emoji: string | null;
  provider_container_id: string | null;
  source: RowSource;
  created_at: string;
  updated_at: string;
}

function toClassification(record: ClassificationRecord): Classification {
  return {
    id: record.id,
    name: record.name,
    slug: record.slug,
    description: record.description,
    bgColor: record.bg_color,
    fgColor: record.fg_color,
    emoji: record.emoji,
    providerContainerId: record.provider_container_id,
    source: record.source,
    createdAt: record.created_at,
    updatedAt: record.updated_at,
  };
}

/**
 * DESIGN §10: lowercase, each run of characters other than a-z0-9 becomes one `-`, `-`
 * trimmed from both ends. Lowercasing first keeps `PHI` → `phi`; letters outside ASCII
 * (`é`) count as "other" and become `-`.
 */
export function slugify(name: string): string {
  return name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

const ALL_DIGITS = /^[0-9]+$/;

export class ClassificationsRepository {
  readonly #db: DatabaseSync;
  readonly #insert: StatementSync;
  readonly #update: StatementSync;
  readonly #delete: StatementSync;
  readonly #byId: StatementSync;
  readonly #bySlug: StatementSync;
  readonly #byName: StatementSync;
  readonly #list: StatementSync;
  readonly #slugTaken: StatementSync;
  readonly #userIds: StatementSync;
  readonly #roleIds: StatementSync;
  readonly #providers: StatementSync;
  readonly #allUsers: StatementSync;
  readonly #allRoles: StatementSync;
  readonly #allProviders: StatementSync;
  readonly #clearUsers: StatementSync;
  readonly #addUsers: StatementSync;
  readonly #clearRoles: StatementSync;
  readonly #addRoles: StatementSync;
  readonly #clearProviders: StatementSync;
  readonly #addProvider: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.#insert = db.prepare(`
      INSERT INTO classifications (name, slug, description, bg_color, fg_color, emoji, provider_container_id, source, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`);
    this.#update = db.prepare(`
      UPDATE classifications SET name = ?, slug = ?, description = ?, bg_color = ?, fg_color = ?, emoji = ?,
        provider_container_id = ?, updated_at = ?
       WHERE id = ? RETURNING *`);
    this.#delete = db.prepare('DELETE FROM classifications WHERE id = ?');
    this.#byId = db.prepare('SELECT * FROM classifications WHERE id = ?');
    this.#bySlug = db.prepare('SELECT * FROM classifications WHERE slug = ?');
    this.#byName = db.prepare('SELECT * FROM classifications WHERE name = ? ORDER BY id LIMIT 1');
    this.#list = db.prepare('SELECT * FROM classifications ORDER BY id');
    this.#slugTaken = db.prepare('SELECT 1 FROM classifications WHERE slug = ? AND id IS NOT ?');
    this.#userIds = db.prepare('SELECT user_id FROM classification_users WHERE classification_id = ? ORDER BY user_id');
    this.#roleIds = db.prepare('SELECT role_id FROM classification_roles WHERE classification_id = ? ORDER BY role_id');
    this.#providers = db.prepare(`
      SELECT configuration_id, gws_groups FROM classification_providers
       WHERE classification_id = ? ORDER BY configuration_id`);
    this.#allUsers = db.prepare('SELECT classification_id, user_id FROM classification_users ORDER BY classification_id, user_id');
    this.#allRoles = db.prepare('SELECT classification_id, role_id FROM classification_roles ORDER BY classification_id, role_id');
    this.#allProviders = db.prepare(`
      SELECT classification_id, configuration_id, gws_groups FROM classification_providers
       ORDER BY classification_id, configuration_id`);
    this.#clearUsers = db.prepare('DELETE FROM classification_users WHERE classification_id = ?');
    this.#addUsers = db.prepare('INSERT INTO classification_users (classification_id, user_id) SELECT DISTINCT ?, value FROM json_each(?)');
    this.#clearRoles = db.prepare('DELETE FROM classification_roles WHERE classification_id = ?');
    this.#addRoles = db.prepare('INSERT INTO classification_roles (classification_id, role_id) SELECT DISTINCT ?, value FROM json_each(?)');
    this.#clearProviders = db.prepare('DELETE FROM classification_providers WHERE classification_id = ?');
    this.#addProvider = db.prepare('INSERT INTO classification_providers (classification_id, configuration_id, gws_groups) VALUES (?, ?, ?)');
  }

  create(input: NewClassification): Classification {
    return runInTransaction(this.#db, () => {
      const now = nowIso();
      const record = this.#insert.get(
        input.name,
        input.slug ?? this.uniqueSlug(input.name),
        input.description ?? null,
        input.bgColor,
        input.fgColor,
        input.emoji ?? null,
        input.providerContainerId ?? null,
        input.source ?? 'api',
        now,
        now,
      ) as unknown as ClassificationRecord;
      this.#setMembers(record.id, input);
      return toClassification(record);
    });
  }

  /**
   * Returns the updated classification, or undefined when there is none with `id`. The slug
   * is kept when the name changes, because headers and relay routes name classifications
   * by slug; pass `slug` to change it.
   */
  update(id: number, patch: ClassificationPatch): Classification | undefined {
    return runInTransaction(this.#db, () => {
      const current = this.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      const record = this.#update.get(
        next.name,
        next.slug,
        next.description,
        next.bgColor,
        next.fgColor,
        next.emoji,
        next.providerContainerId,
        nowIso(),
        id,
      ) as unknown as ClassificationRecord;
      this.#setMembers(id, patch);
      return toClassification(record);
    });
  }

  delete(id: number): boolean {
    return this.#delete.run(id).changes > 0;
  }

  findById(id: number): Classification | undefined {
    const record = this.#byId.get(id) as ClassificationRecord | undefined;
    return record && toClassification(record);
  }

  findBySlug(slug: string): Classification | undefined {
    const record = this.#bySlug.get(slug) as ClassificationRecord | undefined;
    return record && toClassification(record);
  }

  /** Names are not unique; this returns the oldest classification with `name`. */
  findByName(name: string): Classification | undefined {
    const record = this.#byName.get(name) as ClassificationRecord | undefined;
    return record && toClassification(record);
  }

  /** `x-svc-classification` and `/classifications/{id}` accept either: all digits means id. */
  findByIdOrSlug(value: string): Classification | undefined {
    if (ALL_DIGITS.test(value)) {
      const id = Number(value);
      return Number.isSafeInteger(id) ? this.findById(id) : undefined;
    }
    return this.findBySlug(value);
  }

  list(): Classification[] {
    return (this.#list.all() as unknown as ClassificationRecord[]).map(toClassification);
  }

  members(id: number): ClassificationMembers {
    const users = this.#userIds.all(id) as unknown as Array<{ user_id: number }>;
    const roles = this.#roleIds.all(id) as unknown as Array<{ role_id: number }>;
    const providers = this.#providers.all(id) as unknown as Array<{ configuration_id: string; gws_groups: string }>;
    return {
      userIds: users.map((row) => row.user_id),
      roleIds: roles.map((row) => row.role_id),
      providers: providers.map((row) => ({
        configurationId: row.configuration_id,
        gwsGroups: parseJsonArray<GwsGroup>(row.gws_groups),
      })),
    };
  }

  /**
   * Members of every classification in three queries, for the list endpoint and access
   * caches. Classifications without members are absent from the map.
   */
  allMembers(): Map<number, ClassificationMembers> {
    const out = new Map<number, ClassificationMembers>();
    const entry = (id: number): ClassificationMembers => {
      let members = out.get(id);
      if (members === undefined) {
        members = { userIds: [], roleIds: [], providers: [] };
        out.set(id, members);
      }
      return members;
    };
    for (const row of this.#allUsers.all() as unknown as Array<{ classification_id: number; user_id: number }>) {
      entry(row.classification_id).userIds.push(row.user_id);
    }
    for (const row of this.#allRoles.all() as unknown as Array<{ classification_id: number; role_id: number }>) {
      entry(row.classification_id).roleIds.push(row.role_id);
    }
    const providers = this.#allProviders.all() as unknown as Array<{ classification_id: number; configuration_id: string; gws_groups: string }>;
    for (const row of providers) {
      entry(row.classification_id).providers.push({
        configurationId: row.configuration_id,
        gwsGroups: parseJsonArray<GwsGroup>(row.gws_groups),
      });
    }
    return out;
  }

  /**
   * The slug DESIGN §10 gives a new classification named `name`: `slugify(name)`, or
   * `classification` when that is empty, then `-2`, `-3`, ... until free. `exceptId` lets a
   * classification keep its own slug when renamed.
   */
  uniqueSlug(name: string, exceptId?: number): string {
    const base = slugify(name) || 'classification';
    let candidate = base;
    for (let n = 2; this.#slugTaken.get(candidate, exceptId ?? null) !== undefined; n++) {
      candidate = `${base}-${n}`;
    }
    return candidate;
  }

  #setMembers(id: number, members: Pick<ClassificationPatch, 'userIds' | 'roleIds' | 'providers'>): void {
    if (members.userIds !== undefined) {
      this.#clearUsers.run(id);
      this.#addUsers.run(id, JSON.stringify(members.userIds));
    }
    if (members.roleIds !== undefined) {
      this.#clearRoles.run(id);
      this.#addRoles.run(id, JSON.stringify(members.roleIds));
    }
    if (members.providers !== undefined) {
      this.#clearProviders.run(id);
      for (const provider of members.providers) {
        this.#addProvider.run(id, provider.configurationId, JSON.stringify(provider.gwsGroups));
      }
    }
  }
}
