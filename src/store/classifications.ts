import { all, atomically, get, run, type Dialect, type Step } from './query.ts';
import { grantsText, maskText, parseDefault, parseGrants, DENY_DEFAULT, type RevealDefault, type RevealGrant } from './reveal-rules.ts';
import { definedOnly, nowIso, parseJsonArray, type RowSource } from './sql.ts';

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
  /** Who sees how much of its values beyond its members (DESIGN §14). */
  reveal: readonly RevealGrant[];
  /** What everyone else sees. */
  revealDefault: RevealDefault;
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
  /** Default: none. */
  reveal?: readonly RevealGrant[];
  /** Default: deny. */
  revealDefault?: RevealDefault;
}

/** A member list (or the reveal grants) that is present replaces the stored one; an absent one is left alone. */
export interface ClassificationPatch {
  name?: string;
  slug?: string;
  description?: string | null;
  bgColor?: string;
  fgColor?: string;
  emoji?: string | null;
  providerContainerId?: string | null;
  reveal?: readonly RevealGrant[];
  revealDefault?: RevealDefault;
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
  reveal: string;
  reveal_default: string;
  reveal_default_mask: string | null;
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
    reveal: parseGrants(record.reveal),
    revealDefault: parseDefault(record.reveal_default, record.reveal_default_mask),
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

export const CLASSIFICATION_SORTS = ['name', 'id', 'created_at'] as const;
export type ClassificationSort = (typeof CLASSIFICATION_SORTS)[number];
export const SORT_DIRECTIONS = ['asc', 'desc'] as const;
export type SortDirection = (typeof SORT_DIRECTIONS)[number];

/** A filtered, sorted page of classifications. Absent filters match everything. */
export interface ClassificationQuery {
  /** Case-insensitive (ASCII letters) substring of name, slug or description. */
  search?: string;
  /** Classifications that list this user. */
  userId?: number;
  /** Classifications that list any of these roles. */
  roleIds?: readonly number[];
  /** Classifications that list any of these provider configurations. */
  providerIds?: readonly string[];
  sort: ClassificationSort;
  direction: SortDirection;
  limit: number;
  offset: number;
}

export interface ClassificationPage {
  total: number;
  items: Classification[];
}

/** The filters of a classification page; each matches a named parameter of the same name. */
const FILTER_TERMS = {
  user: () => 'c.id IN (SELECT classification_id FROM classification_users WHERE user_id = $user)',
  roles: (d: Dialect) => `c.id IN (SELECT classification_id FROM classification_roles WHERE role_id IN (${d.jsonIntegers('$roles')}))`,
  providers: (d: Dialect) => `c.id IN (SELECT classification_id FROM classification_providers
                       WHERE configuration_id IN (${d.jsonStrings('$providers')}))`,
  search: (d: Dialect) =>
    `(${d.likeNocase('c.name', '$search')} OR ${d.likeNocase('c.slug', '$search')} OR ${d.likeNocase('c.description', '$search')})`,
} as const;
type Filter = keyof typeof FILTER_TERMS;
/**
 * In evaluation order: SQLite tests WHERE terms in the order written, so the membership
 * tests (uncorrelated subqueries, built once per run from the member tables' indexes)
 * come first and the LIKE of three text columns only sees the rows they let through.
 */
const FILTERS: readonly Filter[] = ['user', 'roles', 'providers', 'search'];
type FilterValues = Record<Filter, number | string | null>;

/**
 * Pages use one WHERE clause for every combination of filters: an absent filter binds
 * NULL and its term is true at once. That keeps the planner walking the sort column's
 * index, so a page stops reading once it has offset + limit matches.
 */
const pageWhere = (d: Dialect): string => `WHERE ${FILTERS.map((f) => `(CAST($${f} AS ${FILTER_TYPES[f]}) IS NULL OR ${FILTER_TERMS[f](d)})`).join(' AND ')}`;
/** Each filter's parameter typed, so that a NULL bound alone still has a type to PostgreSQL. */
const FILTER_TYPES: Record<Filter, string> = { user: 'BIGINT', roles: 'TEXT', providers: 'TEXT', search: 'TEXT' };

/**
 * A count visits every match anyway, so it gets a statement per combination of filters
 * present (16): with only the present terms, SQLite drives it from the membership indexes
 * (or, with no filter, counts from the smallest index) instead of scanning every row.
 */
function countSql(shape: number): (d: Dialect) => string {
  return (d) => {
    const terms = FILTERS.filter((_, bit) => (shape & (1 << bit)) !== 0).map((f) => FILTER_TERMS[f](d));
    return `SELECT count(*) AS n FROM classifications c${terms.length === 0 ? '' : ` WHERE ${terms.join(' AND ')}`}`;
  };
}
const COUNT = Array.from({ length: 1 << FILTERS.length }, (_, shape) => countSql(shape));

function shapeOf(values: FilterValues): number {
  return FILTERS.reduce((shape, f, bit) => (values[f] === null ? shape : shape | (1 << bit)), 0);
}

/** A statement takes only the named parameters it has. */
function presentOnly(values: FilterValues): Record<string, number | string> {
  const out: Record<string, number | string> = {};
  for (const f of FILTERS) {
    const value = values[f];
    if (value !== null) out[f] = value;
  }
  return out;
}

/**
 * ORDER BY per sort column. `id` breaks ties so pages never overlap or skip rows. Names
 * sort case-insensitively (ASCII), as people read a list. Every order is served by an
 * index in either direction (the NOCASE name index of migration 3, `created_at`, the
 * rowid), so a page stops reading once it has its rows.
 */
const ORDER_BY: Record<ClassificationSort, Record<SortDirection, (d: Dialect) => string>> = {
  name: { asc: (d) => `${d.nocase('c.name')} ASC, c.id ASC`, desc: (d) => `${d.nocase('c.name')} DESC, c.id DESC` },
  id: { asc: () => 'c.id ASC', desc: () => 'c.id DESC' },
  created_at: { asc: () => 'c.created_at ASC, c.id ASC', desc: () => 'c.created_at DESC, c.id DESC' },
};
const pageSql = (order: (d: Dialect) => string) => (d: Dialect): string =>
  `SELECT c.* FROM classifications c ${pageWhere(d)} ORDER BY ${order(d)} LIMIT $limit OFFSET $offset`;
const PAGE: Record<ClassificationSort, Record<SortDirection, (d: Dialect) => string>> = {
  name: { asc: pageSql(ORDER_BY.name.asc), desc: pageSql(ORDER_BY.name.desc) },
  id: { asc: pageSql(ORDER_BY.id.asc), desc: pageSql(ORDER_BY.id.desc) },
  created_at: { asc: pageSql(ORDER_BY.created_at.asc), desc: pageSql(ORDER_BY.created_at.desc) },
};

/** `%`, `_` and the escape character itself are literal in a search. */
function likePattern(search: string): string {
  return `%${search.replace(/[\\%_]/g, (ch) => `\\${ch}`)}%`;
}

const INSERT = `
  INSERT INTO classifications (name, slug, description, bg_color, fg_color, emoji, provider_container_id, reveal, reveal_default,
    reveal_default_mask, source, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`;
const UPDATE = `
  UPDATE classifications SET name = ?, slug = ?, description = ?, bg_color = ?, fg_color = ?, emoji = ?,
    provider_container_id = ?, reveal = ?, reveal_default = ?, reveal_default_mask = ?, updated_at = ?
   WHERE id = ? RETURNING *`;
const DELETE = 'DELETE FROM classifications WHERE id = ?';
const BY_ID = 'SELECT * FROM classifications WHERE id = ?';
const BY_SLUG = 'SELECT * FROM classifications WHERE slug = ?';
const BY_NAME = 'SELECT * FROM classifications WHERE name = ? ORDER BY id LIMIT 1';
const LIST = 'SELECT * FROM classifications ORDER BY id';
const SLUG_TAKEN = 'SELECT 1 AS taken FROM classifications WHERE slug = ? AND id IS DISTINCT FROM CAST(? AS BIGINT)';
const USER_IDS = 'SELECT user_id FROM classification_users WHERE classification_id = ? ORDER BY user_id';
const ROLE_IDS = 'SELECT role_id FROM classification_roles WHERE classification_id = ? ORDER BY role_id';
const PROVIDERS = `
  SELECT configuration_id, gws_groups FROM classification_providers
   WHERE classification_id = ? ORDER BY configuration_id`;
const ALL_USERS = 'SELECT classification_id, user_id FROM classification_users ORDER BY classification_id, user_id';
const ALL_ROLES = 'SELECT classification_id, role_id FROM classification_roles ORDER BY classification_id, role_id';
const ALL_PROVIDERS = `
  SELECT classification_id, configuration_id, gws_groups FROM classification_providers
   ORDER BY classification_id, configuration_id`;
const CLEAR_USERS = 'DELETE FROM classification_users WHERE classification_id = ?';
const ADD_USERS = (d: Dialect): string =>
  `INSERT INTO classification_users (classification_id, user_id) SELECT DISTINCT CAST(? AS BIGINT), value FROM (${d.jsonIntegers('?')}) ids`;
const CLEAR_ROLES = 'DELETE FROM classification_roles WHERE classification_id = ?';
const ADD_ROLES = (d: Dialect): string =>
  `INSERT INTO classification_roles (classification_id, role_id) SELECT DISTINCT CAST(? AS BIGINT), value FROM (${d.jsonIntegers('?')}) ids`;
const CLEAR_PROVIDERS = 'DELETE FROM classification_providers WHERE classification_id = ?';
const ADD_PROVIDER = 'INSERT INTO classification_providers (classification_id, configuration_id, gws_groups) VALUES (?, ?, ?)';
const USERS_OF = (d: Dialect): string => `
  SELECT classification_id, user_id FROM classification_users
   WHERE classification_id IN (${d.jsonIntegers('?')}) ORDER BY classification_id, user_id`;
const ROLES_OF = (d: Dialect): string => `
  SELECT classification_id, role_id FROM classification_roles
   WHERE classification_id IN (${d.jsonIntegers('?')}) ORDER BY classification_id, role_id`;
const PROVIDERS_OF = (d: Dialect): string => `
  SELECT classification_id, configuration_id, gws_groups FROM classification_providers
   WHERE classification_id IN (${d.jsonIntegers('?')}) ORDER BY classification_id, configuration_id`;

export class ClassificationsRepository {
  *create(input: NewClassification): Step<Classification> {
    const self = this;
    return yield* atomically(function* () {
      const now = nowIso();
      const revealDefault = input.revealDefault ?? DENY_DEFAULT;
      const record = (yield* get<ClassificationRecord>(
        INSERT,
        input.name,
        input.slug ?? (yield* self.uniqueSlug(input.name)),
        input.description ?? null,
        input.bgColor,
        input.fgColor,
        input.emoji ?? null,
        input.providerContainerId ?? null,
        grantsText(input.reveal ?? []),
        revealDefault.level,
        maskText(revealDefault.mask),
        input.source ?? 'api',
        now,
        now,
      ))!;
      yield* setMembers(record.id, input);
      return toClassification(record);
    });
  }

  /**
   * Returns the updated classification, or undefined when there is none with `id`. The slug
   * is kept when the name changes, because headers and relay routes name classifications
   * by slug; pass `slug` to change it.
   */
  *update(id: number, patch: ClassificationPatch): Step<Classification | undefined> {
    const self = this;
    return yield* atomically(function* () {
      const current = yield* self.findById(id);
      if (current === undefined) return undefined;
      const next = { ...current, ...definedOnly(patch) };
      const record = (yield* get<ClassificationRecord>(
        UPDATE,
        next.name,
        next.slug,
        next.description,
        next.bgColor,
        next.fgColor,
        next.emoji,
        next.providerContainerId,
        grantsText(next.reveal),
        next.revealDefault.level,
        maskText(next.revealDefault.mask),
        nowIso(),
        id,
      ))!;
      yield* setMembers(id, patch);
      return toClassification(record);
    });
  }

  *delete(id: number): Step<boolean> {
    return (yield* run(DELETE, id)).changes > 0;
  }

  *findById(id: number): Step<Classification | undefined> {
    const record = yield* get<ClassificationRecord>(BY_ID, id);
    return record && toClassification(record);
  }

  *findBySlug(slug: string): Step<Classification | undefined> {
    const record = yield* get<ClassificationRecord>(BY_SLUG, slug);
    return record && toClassification(record);
  }

  /** Names are not unique; this returns the oldest classification with `name`. */
  *findByName(name: string): Step<Classification | undefined> {
    const record = yield* get<ClassificationRecord>(BY_NAME, name);
    return record && toClassification(record);
  }

  /** `x-svc-classification` and `/classifications/{id}` accept either: all digits means id. */
  *findByIdOrSlug(value: string): Step<Classification | undefined> {
    if (ALL_DIGITS.test(value)) {
      const id = Number(value);
      return Number.isSafeInteger(id) ? yield* this.findById(id) : undefined;
    }
    return yield* this.findBySlug(value);
  }

  *list(): Step<Classification[]> {
    return (yield* all<ClassificationRecord>(LIST)).map(toClassification);
  }

  /**
   * One page of classifications matching `query`, and how many match in all. Filtering,
   * sorting, counting and paging all happen in SQL.
   */
  *page(query: ClassificationQuery): Step<ClassificationPage> {
    const filters: FilterValues = {
      user: query.userId ?? null,
      roles: query.roleIds === undefined || query.roleIds.length === 0 ? null : JSON.stringify(query.roleIds),
      providers: query.providerIds === undefined || query.providerIds.length === 0 ? null : JSON.stringify(query.providerIds),
      search: query.search === undefined || query.search === '' ? null : likePattern(query.search),
    };
    const records = yield* all<ClassificationRecord>(PAGE[query.sort][query.direction], { ...filters, limit: query.limit, offset: query.offset });
    let total = query.offset + records.length;
    // A page that is not full, and not past the end, already tells the total: skip the count.
    if (records.length === 0 || records.length === query.limit) {
      const row = yield* get<{ n: number }>(COUNT[shapeOf(filters)]!, presentOnly(filters));
      total = row?.n ?? 0;
    }
    return { total, items: records.map(toClassification) };
  }

  /** Members of the classifications `ids`, in three queries; every id gets an entry. */
  *membersOf(ids: readonly number[]): Step<Map<number, ClassificationMembers>> {
    const out = new Map<number, ClassificationMembers>();
    for (const id of ids) out.set(id, { userIds: [], roleIds: [], providers: [] });
    if (ids.length === 0) return out;
    const json = JSON.stringify(ids);
    for (const row of yield* all<{ classification_id: number; user_id: number }>(USERS_OF, json)) {
      out.get(row.classification_id)?.userIds.push(row.user_id);
    }
    for (const row of yield* all<{ classification_id: number; role_id: number }>(ROLES_OF, json)) {
      out.get(row.classification_id)?.roleIds.push(row.role_id);
    }
    const providers = yield* all<{ classification_id: number; configuration_id: string; gws_groups: string }>(PROVIDERS_OF, json);
    for (const row of providers) {
      out.get(row.classification_id)?.providers.push({
        configurationId: row.configuration_id,
        gwsGroups: parseJsonArray<GwsGroup>(row.gws_groups),
      });
    }
    return out;
  }

  *members(id: number): Step<ClassificationMembers> {
    const users = yield* all<{ user_id: number }>(USER_IDS, id);
    const roles = yield* all<{ role_id: number }>(ROLE_IDS, id);
    const providers = yield* all<{ configuration_id: string; gws_groups: string }>(PROVIDERS, id);
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
  *allMembers(): Step<Map<number, ClassificationMembers>> {
    const out = new Map<number, ClassificationMembers>();
    const entry = (id: number): ClassificationMembers => {
      let members = out.get(id);
      if (members === undefined) {
        members = { userIds: [], roleIds: [], providers: [] };
        out.set(id, members);
      }
      return members;
    };
    for (const row of yield* all<{ classification_id: number; user_id: number }>(ALL_USERS)) {
      entry(row.classification_id).userIds.push(row.user_id);
    }
    for (const row of yield* all<{ classification_id: number; role_id: number }>(ALL_ROLES)) {
      entry(row.classification_id).roleIds.push(row.role_id);
    }
    const providers = yield* all<{ classification_id: number; configuration_id: string; gws_groups: string }>(ALL_PROVIDERS);
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
  *uniqueSlug(name: string, exceptId?: number): Step<string> {
    const base = slugify(name) || 'classification';
    let candidate = base;
    for (let n = 2; (yield* get(SLUG_TAKEN, candidate, exceptId ?? null)) !== undefined; n++) {
      candidate = `${base}-${n}`;
    }
    return candidate;
  }
}

function* setMembers(id: number, members: Pick<ClassificationPatch, 'userIds' | 'roleIds' | 'providers'>): Step<void> {
  if (members.userIds !== undefined) {
    yield* run(CLEAR_USERS, id);
    yield* run(ADD_USERS, id, JSON.stringify(members.userIds));
  }
  if (members.roleIds !== undefined) {
    yield* run(CLEAR_ROLES, id);
    yield* run(ADD_ROLES, id, JSON.stringify(members.roleIds));
  }
  if (members.providers !== undefined) {
    yield* run(CLEAR_PROVIDERS, id);
    for (const provider of members.providers) {
      yield* run(ADD_PROVIDER, id, provider.configurationId, JSON.stringify(provider.gwsGroups));
    }
  }
}
