import type { ApiKey } from './api-keys.ts';
import type { Classification, ClassificationMembers } from './classifications.ts';
import type { Configuration } from './configurations.ts';
import type { Repositories, Store } from './db.ts';
import { normalizeEmail } from './identity-text.ts';
import type { Role } from './roles.ts';
import { inTransaction, syncRepositories } from './sqlite/connection.ts';
import type { User } from './users.ts';

/**
 * Where a view reads its rows. On SQLite, the store's connection itself, synchronously:
 * users and keys one at a time as requests name them. On PostgreSQL, whose reads are
 * awaited, every row loaded beforehand (`prepareState`), off the request's own path.
 */
interface StateSource {
  readonly roles: readonly Role[];
  readonly configurations: readonly Configuration[];
  readonly classifications: readonly Classification[];
  readonly members: ReadonlyMap<number, ClassificationMembers>;
  user(id: number): User | undefined;
  userByEmail(email: string): User | undefined;
  rolesOf(userId: number): Role[];
  apiKeyByHash(hash: Buffer): ApiKey | undefined;
}

/** The small tables read whole, users and keys read as asked: six queries to start with. */
function connectionSource(repositories: Repositories): StateSource {
  return {
    roles: repositories.roles.list(),
    configurations: repositories.configurations.list(),
    classifications: repositories.classifications.list(),
    members: repositories.classifications.allMembers(),
    user: (id) => repositories.users.findById(id),
    userByEmail: (email) => repositories.users.findByEmail(email),
    rolesOf: (userId) => repositories.users.rolesOf(userId),
    apiKeyByHash: (hash) => repositories.apiKeys.findByHash(hash),
  };
}

/** Every row the view may be asked for, read now in one consistent read: seven queries, whatever the numbers. */
async function loadedSource(store: Store): Promise<StateSource> {
  const { roles, configurations, classifications, members, users, roleIds, apiKeys } = await store.stateRows.view();
  const usersById = new Map(users.map((user) => [user.id, user]));
  const usersByEmail = new Map(users.map((user) => [user.email, user]));
  const rolesById = new Map(roles.map((role) => [role.id, role]));
  const keysByHash = new Map(apiKeys.map((key) => [key.keyHash.toString('base64'), key]));
  return {
    roles,
    configurations,
    classifications,
    members,
    user: (id) => usersById.get(id),
    userByEmail: (email) => usersByEmail.get(normalizeEmail(email)),
    rolesOf: (userId) => (roleIds.get(userId) ?? []).map((id) => rolesById.get(id)).filter((role) => role !== undefined),
    apiKeyByHash: (hash) => keysByHash.get(hash.toString('base64')),
  };
}

/**
 * The state as the request path reads it, and the one place that decides whether what a
 * request reads is fresh. A view belongs to one value of the store's change stamp and is
 * replaced as a whole when the stamp moves; everything derived from the rows (callers by
 * key hash, access rules) is memoised on the view (`memo`) and goes with it.
 *
 * On SQLite the stamp moves at once with a write or rollback through this process, and
 * within OTHERS_CHECK_MS of another connection's commit. What the body transforms read
 * deep inside a request (roles, configurations, classifications with their members) is
 * read whole when the view is made: a handful of small tables. Users and API keys, of which
 * there may be tens of thousands, are read one at a time as requests name them (a rebuild
 * after every write would cost tens of milliseconds with that many); users by id and their
 * roles are kept for the view's life, and what callers derive from a key or an email is
 * memoised by them.
 *
 * On PostgreSQL (a control plane of several instances, DESIGN §16) reads are awaited, so
 * the view holds every row it may be asked for, loaded by `prepareState` before a request
 * reads it. The stamp there follows the database's state version: this instance's own
 * writes move it as they commit (and the write's caller waits for the new view), the
 * other instances' through their notification or, failing that, the next poll.
 *
 * Not in the view, because they must be exact on every check rather than as fresh as the
 * stamp: whether a key version still exists (KeyInUse, DESIGN §13), token revocations,
 * and a login's password hash.
 *
 * Everything the view hands out is frozen: it is shared by every request until the next
 * change, so a caller that tried to modify a row would change it for all of them.
 */
export class StateView {
  readonly #source: StateSource;
  readonly #roles = new Map<number, Role>();
  readonly #rolesByName = new Map<string, Role>();
  readonly #configurations = new Map<string, Configuration>();
  readonly #configurationsByName = new Map<string, Configuration>();
  readonly #configurationsBySlug = new Map<string, Configuration>();
  readonly #classifications = new Map<number, Classification>();
  readonly #classificationsBySlug = new Map<string, Classification>();
  readonly #members = new Map<number, ClassificationMembers>();
  readonly #memos = new Map<Memo<unknown>, Map<string, unknown>>();
  /** Configurations in `configurations.list()` order. */
  readonly configurations: readonly Configuration[];
  /** Classifications in id order. */
  readonly classifications: readonly Classification[];

  constructor(source: StateSource) {
    this.#source = source;
    for (const role of source.roles) {
      deepFreeze(role);
      this.#roles.set(role.id, role);
      this.#rolesByName.set(role.name, role);
    }
    this.configurations = Object.freeze(source.configurations.map(deepFreeze));
    for (const configuration of this.configurations) {
      this.#configurations.set(configuration.id, configuration);
      this.#configurationsByName.set(configuration.name, configuration);
      if (configuration.proxySlug !== null) this.#configurationsBySlug.set(configuration.proxySlug, configuration);
    }
    this.classifications = Object.freeze(source.classifications.map(deepFreeze));
    for (const classification of this.classifications) {
      this.#classifications.set(classification.id, classification);
      this.#classificationsBySlug.set(classification.slug, classification);
    }
    for (const [id, members] of source.members) this.#members.set(id, deepFreeze(members));
  }

  user(id: number): User | undefined {
    return this.memo(USERS, String(id), () => deepFreeze(this.#source.user(id)));
  }

  /**
   * Compared normalised, as `users.findByEmail`. Not memoised: its callers on the request
   * path keep what they derive from it (end-user.ts), and the others are management actions.
   */
  userByEmail(email: string): User | undefined {
    return deepFreeze(this.#source.userByEmail(email));
  }

  /** The user's roles in id order; empty for a user without roles, or no such user. */
  rolesOf(userId: number): readonly Role[] {
    return this.memo(ROLES_OF_USER, String(userId), () => deepFreeze(this.#source.rolesOf(userId)));
  }

  /** The union of the permissions of the user's roles, as `users.permissionsOf`. */
  permissionsOf(userId: number): Set<string> {
    const granted = new Set<string>();
    for (const role of this.rolesOf(userId)) for (const permission of role.permissions) granted.add(permission);
    return granted;
  }

  role(id: number): Role | undefined {
    return this.#roles.get(id);
  }

  roleByName(name: string): Role | undefined {
    return this.#rolesByName.get(name);
  }

  /**
   * Revoked keys included: the caller decides (revoked → 401). Not memoised: the
   * Authenticator keeps the callers made from keys that authenticate, and asks only on a
   * miss.
   */
  apiKeyByHash(hash: Buffer): ApiKey | undefined {
    return deepFreeze(this.#source.apiKeyByHash(hash));
  }

  configuration(id: string): Configuration | undefined {
    return this.#configurations.get(id);
  }

  configurationByName(name: string): Configuration | undefined {
    return this.#configurationsByName.get(name);
  }

  configurationBySlug(slug: string): Configuration | undefined {
    return this.#configurationsBySlug.get(slug);
  }

  classification(id: number): Classification | undefined {
    return this.#classifications.get(id);
  }

  /** All digits means an id, anything else a slug, as `classifications.findByIdOrSlug`. */
  classificationByIdOrSlug(value: string): Classification | undefined {
    if (ALL_DIGITS.test(value)) {
      const id = Number(value);
      return Number.isSafeInteger(id) ? this.#classifications.get(id) : undefined;
    }
    return this.#classificationsBySlug.get(value);
  }

  /** Who a classification lists; nobody for one without members, or no such classification. */
  members(classificationId: number): ClassificationMembers {
    return this.#members.get(classificationId) ?? NO_MEMBERS;
  }

  /**
   * `build()`'s value for `key`, computed once per view: derived data that is right for as
   * long as the rows it came from are. At most `memo.max` values are kept per kind; beyond
   * that the kind starts over, so clients that send many different keys cannot grow it.
   */
  memo<V>(memo: Memo<V>, key: string, build: () => V): V {
    let values = this.#memos.get(memo) as Map<string, V> | undefined;
    if (values === undefined) {
      values = new Map();
      this.#memos.set(memo, values);
    }
    if (values.has(key)) return values.get(key) as V;
    const value = build();
    if (values.size >= memo.max) values.clear();
    values.set(key, value);
    return value;
  }
}

/** A kind of derived value memoised on a StateView: one module-level constant per kind. */
export class Memo<V> {
  readonly name: string;
  readonly max: number;
  declare readonly __value?: V;

  constructor(name: string, max = 1024) {
    this.name = name;
    this.max = max;
  }
}

interface Current {
  stamp: number;
  view: StateView;
}

const views = new WeakMap<Store, Current>();
const building = new WeakMap<Store, Promise<void>>();

/**
 * The view of `store`'s state as of its current change stamp. On SQLite it is built on
 * first use after the stamp moves, then shared until it moves again. On PostgreSQL it is
 * the view `prepareState` last made: every request awaits that first.
 */
export function stateOf(store: Store): StateView {
  const current = views.get(store);
  if (store.kind === 'postgres') {
    if (current === undefined) throw new Error('The state view of a PostgreSQL store is read before prepareState made it.');
    return current.view;
  }
  const stamp = store.changeStamp();
  if (current !== undefined && current.stamp === stamp) return current.view;
  // A transaction's writes move the stamp before they commit: until it ends, the view
  // stays the one read before it, never one it may still roll back.
  if (current !== undefined && inTransaction(store)) return current.view;
  // Kept under the stamp read before building: another process's commit that lands between
  // the queries moves the stamp past it, so the next check after OTHERS_CHECK_MS builds
  // again rather than keeping a view that is half before and half after that commit.
  const view = new StateView(connectionSource(syncRepositories(store)));
  views.set(store, { stamp, view });
  return view;
}

/**
 * Makes the view `stateOf` answers current, where that means waiting for the database:
 * undefined when there is nothing to wait for (SQLite, or a view of the current stamp).
 * On PostgreSQL every request calls it before it reads anything, so a write acknowledged
 * by this instance (which moves the stamp when it commits) is seen by the very next
 * request, and another instance's within the state version's notice (DESIGN §16). One
 * build runs at a time; a caller that finds one running waits for it and checks again.
 */
export function prepareState(store: Store): Promise<void> | undefined {
  if (store.kind !== 'postgres') return undefined;
  // The stamp only grows: a view of this stamp or a later one has every change made before
  // the caller asked, however busy the other instances are meanwhile.
  const wanted = store.changeStamp();
  if ((views.get(store)?.stamp ?? -1) >= wanted) return undefined;
  return buildFrom(store, wanted);
}

/** Waits for a build that started at `wanted` or later, starting one when none runs: two at most. */
async function buildFrom(store: Store, wanted: number): Promise<void> {
  while ((views.get(store)?.stamp ?? -1) < wanted) {
    let pending = building.get(store);
    if (pending === undefined) {
      // The stamp is read before the rows: a change committed while they are read moves it
      // past this one, and the next request builds again.
      const stamp = store.changeStamp();
      pending = loadedSource(store)
        .then((source) => {
          views.set(store, { stamp, view: new StateView(source) });
        })
        .finally(() => building.delete(store));
      building.set(store, pending);
    }
    await pending;
  }
}

const USERS = new Memo<User | undefined>('users by id');
const ROLES_OF_USER = new Memo<readonly Role[]>('roles by user id');
const ALL_DIGITS = /^[0-9]+$/;
const NO_MEMBERS: ClassificationMembers = deepFreeze({ userIds: [], roleIds: [], providers: [] });

/** Freezes `value` and every object and array under it (Buffers are left as they are). */
function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value) || ArrayBuffer.isView(value)) return value;
  Object.freeze(value);
  for (const child of Object.values(value)) deepFreeze(child);
  return value;
}
