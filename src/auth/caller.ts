/**
 * Who is calling: the API key in `x-svc-authorization` and the user it acts for
 * (DESIGN §9). Effective permissions = the key's scope ∩ the user's role permissions.
 */
import { timingSafeEqual } from 'node:crypto';
import { ForbiddenError, UnauthorizedError } from '../errors.ts';
import type { Store } from '../store/db.ts';
import type { User } from '../store/users.ts';
import { API_KEY_PATTERN, hashApiKey } from './api-keys.ts';

export interface Caller {
  readonly apiKeyId: string;
  readonly user: User;
  readonly roleIds: readonly number[];
  readonly permissions: ReadonlySet<string>;
  /** Configuration ids the key is limited to; null when it is not limited. */
  readonly configurations: ReadonlySet<string> | null;
}

export class Authenticator {
  private readonly store: Store;

  constructor(store: Store) {
    this.store = store;
  }

  /**
   * Makes the user of a bearer access token the acting user. Until access tokens are
   * issued, any bearer token is refused (deny by default).
   */
  async actAs(_caller: Caller, _authorization: string): Promise<Caller> {
    throw new UnauthorizedError();
  }

  /** Resolves the caller from the request's API key; 401 when it is missing, unknown or revoked. */
  authenticate(apiKeyHeader: string | undefined): Caller {
    if (apiKeyHeader === undefined) throw new UnauthorizedError();
    const presented = apiKeyHeader.trim();
    if (!API_KEY_PATTERN.test(presented)) throw new UnauthorizedError();
    const hash = hashApiKey(presented);
    const key = this.store.apiKeys.findByHash(hash);
    // The index lookup finds the row by hash; comparing the stored hash again in
    // constant time keeps the check independent of how the lookup matched.
    if (key === undefined || !timingSafeEqual(key.keyHash, hash) || key.status !== 'active') throw new UnauthorizedError();
    const user = this.store.users.findById(key.userId);
    if (user === undefined || user.disabled) throw new UnauthorizedError();
    const roles = this.store.users.rolesOf(user.id);
    const granted = new Set<string>();
    for (const role of roles) for (const p of role.permissions) granted.add(p);
    const permissions = key.permissions.length === 0 ? granted : new Set(key.permissions.filter((p) => granted.has(p)));
    return {
      apiKeyId: key.id,
      user,
      roleIds: roles.map((r) => r.id),
      permissions,
      configurations: key.configurations.length === 0 ? null : new Set(key.configurations),
    };
  }
}

export function requirePermission(caller: Caller, permission: string): void {
  if (!caller.permissions.has(permission)) throw new ForbiddenError();
}

export function requireConfigurationScope(caller: Caller, configurationId: string): void {
  if (caller.configurations !== null && !caller.configurations.has(configurationId)) throw new ForbiddenError();
}
