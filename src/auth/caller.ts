/**
 * Who is calling: the API key in `x-svc-authorization` and the user it acts for
 * (DESIGN §9). Effective permissions = the key's scope ∩ the acting user's role
 * permissions. The acting user is the key's user, or the user of a bearer access token.
 */
import { timingSafeEqual } from 'node:crypto';
import type { MasterKey } from '../crypto/master-key.ts';
import { ActionUnauthorizedError, ForbiddenError, UnauthorizedError } from '../errors.ts';
import type { Store } from '../store/db.ts';
import { normalizeEmail } from '../store/identity-text.ts';
import type { Role } from '../store/roles.ts';
import { Memo, stateOf, type StateView } from '../store/state-view.ts';
import type { User } from '../store/users.ts';
import { ACCESS_TOKEN_SECRET_LABEL, AccessTokens, type AccessTokenClaims, type IssuedToken } from './access-tokens.ts';
import { API_KEY_PATTERN, apiKeyHashText } from './api-keys.ts';
import { LoginThrottle } from './login-throttle.ts';
import { unusablePasswordHash, verifyPasswordAsync } from './passwords.ts';

export interface Caller {
  readonly apiKeyId: string;
  readonly user: User;
  readonly roleIds: readonly number[];
  readonly permissions: ReadonlySet<string>;
  /** Configuration ids the key is limited to; null when it is not limited. */
  readonly configurations: ReadonlySet<string> | null;
  /** The key's permission scope; null when it is not limited. */
  readonly keyScope: ReadonlySet<string> | null;
  /** The bearer token that made `user` the acting user; null when the key's user acts. */
  readonly accessToken: AccessTokenClaims | null;
}

export interface AuthSettings {
  /** Milliseconds. */
  readonly access_token_ttl: number;
  readonly login_max_attempts: number;
  /** Milliseconds. */
  readonly login_window: number;
}

export type LoginOutcome =
  | { readonly kind: 'ok'; readonly user: User; readonly issued: IssuedToken }
  /** Unknown email, no password set, or a wrong password: indistinguishable to the client. */
  | { readonly kind: 'wrong-credentials'; readonly user: User | undefined }
  | { readonly kind: 'disabled'; readonly user: User };

const DATA_PLANE_PERMISSIONS: ReadonlySet<string> = new Set(['data.encrypt', 'data.decrypt']);

/**
 * A data-plane key: its scope is limited to `data.*` permissions. Such keys live in
 * applications that only encrypt and decrypt, so they may not log users in or carry a
 * user's access token (docs/auth.md).
 */
export function isDataPlaneKey(caller: Caller): boolean {
  const scope = caller.keyScope;
  if (scope === null || scope.size === 0) return false;
  for (const permission of scope) if (!DATA_PLANE_PERMISSIONS.has(permission)) return false;
  return true;
}

const REPLICATION_PERMISSIONS: ReadonlySet<string> = new Set(['sync.read', 'sync.write']);

/**
 * A replicas' key: its scope is limited to `sync.*` permissions. It pulls snapshots and
 * ships logs and nothing else: the management routes refuse it (api/routes.ts), login
 * included (docs/replication.md "The replicas' API key").
 */
export function isReplicationKey(caller: Caller): boolean {
  const scope = caller.keyScope;
  if (scope === null || scope.size === 0) return false;
  for (const permission of scope) if (!REPLICATION_PERMISSIONS.has(permission)) return false;
  return true;
}

/** 403 `This action is unauthorized.` for a data-plane key. */
export function requireUserKey(caller: Caller): void {
  if (isDataPlaneKey(caller)) throw new ActionUnauthorizedError();
}

const BEARER = /^bearer[ \t]+(\S+)[ \t]*$/i;
/** Revocations of expired tokens are purged at most this often. */
const PURGE_INTERVAL_MS = 60 * 60 * 1000;

/** Callers by key hash, for as long as the rows they were made from hold. */
const CALLERS = new Memo<Caller>('callers by API key hash');

export class Authenticator {
  private readonly store: Store;
  readonly tokens: AccessTokens;
  readonly throttle: LoginThrottle;
  /** Verified against when the email is unknown, so the miss costs a full scrypt too. */
  private readonly decoyHash = unusablePasswordHash();
  private lastPurge = 0;

  constructor(store: Store, tokens: AccessTokens, throttle: LoginThrottle) {
    this.store = store;
    this.tokens = tokens;
    this.throttle = throttle;
  }

  /** The signing secret is derived from the master key once, here, not per request. */
  static fromConfig(store: Store, master: MasterKey, settings: AuthSettings): Authenticator {
    return new Authenticator(
      store,
      new AccessTokens(master.deriveSecret(ACCESS_TOKEN_SECRET_LABEL), settings.access_token_ttl),
      new LoginThrottle(store, { maxAttempts: settings.login_max_attempts, windowMs: settings.login_window }),
    );
  }

  /** Resolves the caller from the request's API key; 401 when it is missing, unknown or revoked. */
  authenticate(apiKeyHeader: string | undefined): Caller {
    if (apiKeyHeader === undefined) throw new UnauthorizedError();
    const presented = apiKeyHeader.trim();
    if (!API_KEY_PATTERN.test(presented)) throw new UnauthorizedError();
    const hashText = apiKeyHashText(presented);
    const state = stateOf(this.store);
    // Only keys that authenticate are memoised (lookUp throws for the others), so keys that
    // do not cannot crowd them out.
    return state.memo(CALLERS, hashText, () => this.lookUp(state, Buffer.from(hashText, 'base64')));
  }

  private lookUp(state: StateView, hash: Buffer): Caller {
    const key = state.apiKeyByHash(hash);
    // The map finds the row by hash; comparing the stored hash again in constant time keeps
    // the check independent of how the lookup matched.
    if (key === undefined || !timingSafeEqual(key.keyHash, hash) || key.status !== 'active') throw new UnauthorizedError();
    const user = state.user(key.userId);
    if (user === undefined || user.disabled) throw new UnauthorizedError();
    return this.callerFor(user, state.rolesOf(user.id), {
      apiKeyId: key.id,
      keyScope: key.permissions.length === 0 ? null : new Set(key.permissions),
      configurations: key.configurations.length === 0 ? null : new Set(key.configurations),
      accessToken: null,
    });
  }

  /**
   * Makes the user of a bearer access token the acting user, keeping the key and its
   * scopes. Other authorization schemes are left alone: on /proxy they may be meant for
   * the destination.
   */
  async actAs(caller: Caller, authorization: string): Promise<Caller> {
    const match = BEARER.exec(authorization);
    if (match === null) {
      if (/^bearer(?:[ \t]|$)/i.test(authorization.trimStart())) throw new UnauthorizedError();
      return caller;
    }
    const claims = await this.tokens.verify(match[1]!);
    if (await this.store.tokenRevocations.isRevoked(claims.jti)) throw new UnauthorizedError();
    const state = stateOf(this.store);
    const user = state.user(claims.userId);
    // A token from before its user's last change (password, disable, roles) has ended
    // (DESIGN §13); so has one of a user who is gone. Ids are never reused, so a token can
    // never name a newer user.
    if (user === undefined || user.disabled || user.updatedAt !== claims.credentialsStamp) throw new UnauthorizedError();
    requireUserKey(caller);
    return this.callerFor(user, state.rolesOf(user.id), { apiKeyId: caller.apiKeyId, keyScope: caller.keyScope, configurations: caller.configurations, accessToken: claims });
  }

  /**
   * Checks credentials for login. The lockout is taken before the password is looked at,
   * and every attempt counts as a failure until it succeeds, so parallel guesses cannot
   * slip past the limit while their hashes are being computed.
   */
  async login(email: string, password: string): Promise<LoginOutcome> {
    // One identity per person: `\u212Aate@example.com` shares the lockout of kate@example.com.
    const key = normalizeEmail(email);
    await this.throttle.attempt(key);
    // Read once, before the password is checked: the token carries this row's stamp, so a
    // change that lands while scrypt runs ends the token too.
    const user = await this.store.users.findByEmail(key);
    const hash = user?.passwordHash ?? this.decoyHash;
    const matches = await verifyPasswordAsync(password, hash);
    if (user === undefined || user.passwordHash === null || !matches) return { kind: 'wrong-credentials', user };
    if (user.disabled) return { kind: 'disabled', user };
    await this.throttle.succeed(key);
    return { kind: 'ok', user, issued: await this.tokens.issue(user.id, user.updatedAt) };
  }

  /** Ends the caller's access token; 401 when the request carries none. */
  async logout(caller: Caller): Promise<void> {
    const token = caller.accessToken;
    if (token === null) throw new UnauthorizedError();
    const now = Date.now();
    await this.store.tokenRevocations.revoke(token.jti, new Date(token.expiresAt * 1000).toISOString());
    if (now - this.lastPurge >= PURGE_INTERVAL_MS) {
      this.lastPurge = now;
      await this.store.tokenRevocations.purgeExpired(new Date(now).toISOString());
    }
  }

  private callerFor(user: User, roles: readonly Role[], key: Pick<Caller, 'apiKeyId' | 'keyScope' | 'configurations' | 'accessToken'>): Caller {
    const granted = new Set<string>();
    for (const role of roles) for (const p of role.permissions) granted.add(p);
    const scope = key.keyScope;
    return {
      apiKeyId: key.apiKeyId,
      user,
      roleIds: roles.map((r) => r.id),
      permissions: scope === null ? granted : new Set([...scope].filter((p) => granted.has(p))),
      configurations: key.configurations,
      keyScope: scope,
      accessToken: key.accessToken,
    };
  }
}

export function requirePermission(caller: Caller, permission: string): void {
  if (!caller.permissions.has(permission)) throw new ForbiddenError();
}

/**
 * Whether a key limited to `configurations` (empty: every one) stays within the caller's
 * configuration scope: always for an unlimited caller, else only a non-empty list of
 * configurations the caller's key names.
 */
export function withinConfigurationScope(caller: Caller, configurations: readonly string[]): boolean {
  const scope = caller.configurations;
  return scope === null || (configurations.length > 0 && configurations.every((id) => scope.has(id)));
}

export function requireConfigurationScope(caller: Caller, configurationId: string): void {
  if (caller.configurations !== null && !caller.configurations.has(configurationId)) throw new ForbiddenError();
}
