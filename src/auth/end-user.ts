/**
 * The end user behind the relay (DESIGN §14 "End users behind the relay"): who the
 * application's reader is, from the JWT the client sends the application. The relay only
 * reads it — the header goes on to the application untouched — and never answers
 * differently because of it: a missing, malformed, forged, expired, early, foreign or
 * unreadable token makes the reader anonymous, never an error.
 *
 * Keys are built once (a WebCrypto key from the secret file, jose key sets from the JWKS
 * file or URL) and the algorithms are pinned to what the key source can vouch for: HS256
 * for a shared secret, RS256 and ES256 for a key set. So `alg: none` is refused, and so
 * is the old confusion of signing HS256 with a published public key as the HMAC secret.
 *
 * The JWT is never logged or stored. What may be logged is the subject: `sub`, else the
 * user claim.
 */
import { createHash, createSecretKey, type webcrypto } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { JWTPayload, JWTVerifyGetKey, JWTVerifyOptions } from 'jose';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { Agent, target } from '../http/undici.ts';
import { ConfigError } from '../config/config-error.ts';
import { JWKS_ALGORITHMS, MAX_JWKS_BYTES, readCaFile, readJwksFile, readSecretFile, type Read } from '../config/jwt-key-files.ts';
import type { JwtIdentityConfig } from '../config/schema.ts';
import type { Store } from '../store/db.ts';
import { hasUnsafeText, normalizeEmail } from '../store/identity-text.ts';
import { Memo, stateOf } from '../store/state-view.ts';
import { isCompactJws } from './access-tokens.ts';
import type { Identity } from './classification-access.ts';
import { isJoseError, jose, type Jose } from './jose.ts';

/**
 * An identified end user: an `Identity` (DESIGN §9 admission: a svc user, roles, and an
 * email that provider groups list) plus what logs name it by and the groups its token
 * claims. Anonymous is `null`, never an EndUser.
 */
export interface EndUser extends Identity {
  /** `sub`, else the user claim: at most 256 characters, no control or bidi characters. What logs show. */
  readonly subject: string;
  /** The svc user the user claim names by email (enabled), or null when it names none. */
  readonly userId: number | null;
  /** The svc user's roles and the roles the roles claim names, as role ids, ascending. */
  readonly roleIds: readonly number[];
  /** The user claim, normalised (normalizeEmail); '' when the token carries none that can be used. */
  readonly email: string;
  /** Provider group ids the groups claim lists. */
  readonly groups: readonly string[];
}

/** Longer than any JWT a provider issues; the header itself is bounded by `server.max_header_size`. */
const MAX_TOKEN_CHARS = 8192;
const MAX_SUBJECT_CHARS = 256;
/** RFC 5321 §4.5.3.1: 64 + @ + 255. */
const MAX_EMAIL_CHARS = 320;
/** Entries of a roles or groups claim; a claim with more counts as none. */
const MAX_CLAIM_ENTRIES = 256;
const MAX_CLAIM_ENTRY_CHARS = 256;

/**
 * Verified tokens are kept (by their SHA-256, never the token itself) for at most this
 * long, and never past their `exp` (plus the tolerance): a client sends the same token
 * with every request, and verifying costs ~35 µs (HS256) to ~140 µs (ES256) where a
 * remembered answer, user lookup included, costs ~5 µs. Only verified tokens are kept
 * (one not yet valid may become so), so a flood of bad tokens evicts good ones at worst.
 * A key removed from the provider's set stops vouching within this time.
 */
const VERIFIED_TTL_MS = 60_000;
const VERIFIED_MAX = 10_000;

/** jose's defaults, spelt out: how long fetched keys are used, and how often a new kid may trigger a fetch. */
const JWKS_MAX_AGE_MS = 10 * 60_000;
const JWKS_COOLDOWN_MS = 30_000;
const JWKS_TIMEOUT_MS = 5_000;
/**
 * After a failed fetch, readers are anonymous at once for this long instead of each
 * waiting out another attempt (a provider that hangs would otherwise cost every request
 * the timeout).
 */
const JWKS_RETRY_AFTER_MS = 10_000;

/** RFC 9110 §11.1: the scheme is case-insensitive, separated by one or more spaces (as src/auth/caller.ts reads it). */
const BEARER = /^bearer[ \t]+(\S+)[ \t]*$/i;

/** What a verified token says, before the store is consulted: kept in the cache. */
interface VerifiedClaims {
  readonly subject: string;
  readonly email: string;
  readonly roleNames: readonly string[];
  readonly groups: readonly string[];
}

interface Settings {
  readonly header: string;
  readonly userClaim: string;
  readonly rolesClaim: string | null;
  readonly groupsClaim: string | null;
  readonly clockToleranceMs: number;
  readonly verify: JWTVerifyOptions;
}

/** The relay's end-user identity, compiled once from `relay.identity.jwt`. */
export class EndUserIdentity {
  readonly #settings: Settings;
  readonly #key: webcrypto.CryptoKey | JWTVerifyGetKey;
  readonly #remote: RemoteKeys | null;
  readonly #verified = new LRUCache<string, VerifiedClaims>({ max: VERIFIED_MAX, ttlAutopurge: false });
  readonly #logger: Logger;

  private constructor(settings: Settings, key: webcrypto.CryptoKey | JWTVerifyGetKey, remote: RemoteKeys | null, logger: Logger) {
    this.#settings = settings;
    this.#key = key;
    this.#remote = remote;
    this.#logger = logger;
  }

  /**
   * Builds the keys: reads the secret, JWKS or CA file (the config check read them too; a
   * file changed since is a ConfigError naming it) or prepares the JWKS URL, fetched on
   * first use.
   */
  static fromConfig(config: JwtIdentityConfig, logger: Logger): EndUserIdentity {
    const audience = config.audience === undefined ? undefined : typeof config.audience === 'string' ? config.audience : [...config.audience];
    const base = {
      header: config.header,
      userClaim: config.user_claim,
      rolesClaim: config.roles_claim ?? null,
      groupsClaim: config.groups_claim ?? null,
      clockToleranceMs: config.clock_tolerance,
    };
    const verify = (algorithms: string[]): JWTVerifyOptions => ({
      algorithms,
      ...(config.issuer === undefined ? {} : { issuer: config.issuer }),
      ...(audience === undefined ? {} : { audience }),
      clockTolerance: Math.floor(config.clock_tolerance / 1000),
      // A token that never expires is not one a provider issues for end users.
      requiredClaims: ['exp'],
    });
    if (config.secret_file !== undefined) {
      const secret = orConfigError(readSecretFile(config.secret_file), 'secret_file');
      // Imported once: jose re-imports a raw secret on every verification.
      const key = createSecretKey(secret).toCryptoKey({ name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
      secret.fill(0);
      return new EndUserIdentity({ ...base, verify: verify(['HS256']) }, key, null, logger);
    }
    const algorithms = [...JWKS_ALGORITHMS];
    if (config.jwks_file !== undefined) {
      const jwks = orConfigError(readJwksFile(config.jwks_file), 'jwks_file');
      // Made on the first token (jose is loaded then); readJwksFile has checked the set.
      let keySet: JWTVerifyGetKey | undefined;
      const key: JWTVerifyGetKey = async (header, token) => {
        keySet ??= (await jose()).createLocalJWKSet(jwks as Parameters<Jose['createLocalJWKSet']>[0]);
        return keySet(header, token);
      };
      return new EndUserIdentity({ ...base, verify: verify(algorithms) }, key, null, logger);
    }
    if (config.jwks_url === undefined) throw new ConfigError(['relay.identity.jwt: give one key source: secret_file (HS256), jwks_file or jwks_url (RS256, ES256)']);
    const ca = config.jwks_ca_file === undefined ? undefined : orConfigError(readCaFile(config.jwks_ca_file), 'jwks_ca_file');
    const remote = new RemoteKeys(new URL(config.jwks_url), ca, logger);
    return new EndUserIdentity({ ...base, verify: verify(algorithms) }, remote.getKey, remote, logger);
  }

  /**
   * The end user of a request, or null (anonymous): no token, a malformed one, a bad
   * signature, an algorithm the key source does not allow, expired, not yet valid, a
   * wrong issuer or audience, no usable subject, a user claim that names a disabled svc
   * user, or keys that cannot be fetched. Never throws for anything the request carries.
   */
  async resolve(headers: IncomingHttpHeaders, store: Store): Promise<EndUser | null> {
    const token = presentedToken(headers, this.#settings.header);
    if (token === null) return null;
    const claims = await this.#verify(token);
    return claims === null ? null : endUserOf(claims, store);
  }

  /** Closes the connections to the JWKS URL. */
  async close(): Promise<void> {
    await this.#remote?.close();
  }

  async #verify(token: string): Promise<VerifiedClaims | null> {
    const id = createHash('sha256').update(token).digest('base64url');
    const known = this.#verified.get(id);
    if (known !== undefined) return known;
    let payload: JWTPayload;
    try {
      payload = await verifyJwt(token, this.#key, this.#settings.verify);
    } catch (err) {
      // Which check failed, never the token. Whatever failed, the reader is anonymous: the
      // relay never fails an application's answer because of its reader (DESIGN §14).
      if (isJoseError(err) || err instanceof KeysUnavailable) {
        if (this.#logger.isLevelEnabled('debug')) this.#logger.debug({ reason: (err as { code?: string }).code ?? err.name }, 'relay identity: the end user is anonymous');
      } else {
        this.#logger.warn({ reason: err instanceof Error ? `${err.name}: ${err.message}` : 'unknown' }, 'relay identity: verifying a token failed unexpectedly; the end user is anonymous');
      }
      return null;
    }
    const claims = claimsOf(payload, this.#settings);
    if (claims === null) return null;
    // jose refuses a token once `exp` <= now - tolerance (whole seconds).
    const ttl = Math.min(VERIFIED_TTL_MS, (payload.exp! + Math.floor(this.#settings.clockToleranceMs / 1000)) * 1000 - Date.now());
    if (ttl > 0) this.#verified.set(id, claims, { ttl });
    return claims;
  }
}

/**
 * The token a request presents. In `authorization`, the Bearer scheme is required (RFC
 * 6750 §2.1); another header may carry the JWT alone (as proxies in front of applications
 * forward it) or as `Bearer <jwt>`. Anything that is not three canonical base64url parts
 * (DESIGN §13 "Strict encodings") is no token.
 */
function presentedToken(headers: IncomingHttpHeaders, header: string): string | null {
  const value = headers[header];
  if (typeof value !== 'string' || value.length > MAX_TOKEN_CHARS + 16) return null;
  const bearer = BEARER.exec(value);
  const token = bearer !== null ? bearer[1]! : header === 'authorization' ? null : value.trim();
  if (token === null || token.length > MAX_TOKEN_CHARS || !isCompactJws(token)) return null;
  return token;
}

/**
 * jwtVerify, and when several keys of a set could have signed the token (no `kid`, or
 * one shared by several keys), each of them in turn.
 */
async function verifyJwt(token: string, key: webcrypto.CryptoKey | JWTVerifyGetKey, options: JWTVerifyOptions): Promise<JWTPayload> {
  const { errors: joseErrors, jwtVerify } = await jose();
  try {
    return (await jwtVerify(token, key as JWTVerifyGetKey, options)).payload;
  } catch (err) {
    if (!(err instanceof joseErrors.JWKSMultipleMatchingKeys)) throw err;
    for await (const candidate of err) {
      try {
        return (await jwtVerify(token, candidate, options)).payload;
      } catch (inner) {
        if (!(inner instanceof joseErrors.JWSSignatureVerificationFailed)) throw inner;
      }
    }
    throw new joseErrors.JWSSignatureVerificationFailed();
  }
}

/**
 * What the claims say, or null when the token names nobody: no subject, or one the logs
 * could not show as it is. Claims of the wrong type grant nothing: a user claim that is
 * no string names no svc user, a roles or groups claim that is no string or list of
 * strings (or lists more than 256) gives no roles or groups.
 */
function claimsOf(payload: JWTPayload, settings: Settings): VerifiedClaims | null {
  const user = claimAt(payload, settings.userClaim);
  const userText = typeof user === 'string' && user !== '' ? user : null;
  const subject = typeof payload.sub === 'string' && payload.sub !== '' ? payload.sub : userText;
  if (subject === null || subject.length > MAX_SUBJECT_CHARS || hasUnsafeText(subject)) return null;
  // An address the provider says it has not verified is anyone's to type in (OIDC Core
  // §5.1). Some providers send the flag as a string; any value other than true or "true"
  // ("FALSE", 0, null, "no") is taken as not verified, so no spelling of "no" counts as yes.
  const flag = payload['email_verified'];
  const unverified = settings.userClaim === 'email' && flag !== undefined && flag !== true && flag !== 'true';
  const email = userText === null || unverified || userText.length > MAX_EMAIL_CHARS ? '' : normalizeEmail(userText);
  return {
    subject,
    email,
    roleNames: settings.rolesClaim === null ? [] : listClaim(claimAt(payload, settings.rolesClaim)),
    groups: settings.groupsClaim === null ? [] : listClaim(claimAt(payload, settings.groupsClaim)),
  };
}

/**
 * A claim by name: the top-level claim of that name first (`https://example.com/roles`, as
 * some providers namespace theirs), else, for a dotted name, the nested one
 * (`realm_access.roles`). Own properties of plain objects only.
 */
function claimAt(payload: JWTPayload, name: string): unknown {
  if (Object.hasOwn(payload, name)) return payload[name];
  if (!name.includes('.')) return undefined;
  let node: unknown = payload;
  for (const part of name.split('.')) {
    if (typeof node !== 'object' || node === null || Array.isArray(node) || !Object.hasOwn(node, part)) return undefined;
    node = (node as Record<string, unknown>)[part];
  }
  return node;
}

function listClaim(value: unknown): string[] {
  const list = typeof value === 'string' ? [value] : Array.isArray(value) ? value : [];
  if (list.length > MAX_CLAIM_ENTRIES) return [];
  const out = new Set<string>();
  for (const entry of list) if (typeof entry === 'string' && entry !== '' && entry.length <= MAX_CLAIM_ENTRY_CHARS) out.add(entry);
  return [...out];
}

/** A svc user as the end-user mapping needs it: null when none has the email. */
interface MappedUser {
  readonly id: number;
  readonly disabled: boolean;
  readonly roleIds: readonly number[];
}

/** The svc user an email maps to, for as long as the rows it was read from hold. */
const USERS_BY_EMAIL = new Memo<MappedUser | null>('end users by email');

/**
 * The end user of verified claims. The user claim maps to a svc user by email, compared
 * normalised; the roles and groups claims count whether or not it does (the provider
 * vouches for them). A user claim that names a disabled svc user makes the reader
 * anonymous: disabling a user ends what that person may see.
 */
function endUserOf(claims: VerifiedClaims, store: Store): EndUser | null {
  const state = stateOf(store);
  let user: MappedUser | null = null;
  if (claims.email !== '') {
    user = state.memo(USERS_BY_EMAIL, claims.email, () => {
      const found = state.userByEmail(claims.email);
      return found === undefined ? null : { id: found.id, disabled: found.disabled, roleIds: state.rolesOf(found.id).map((role) => role.id) };
    });
    if (user?.disabled === true) return null;
  }
  const roleIds = new Set(user?.roleIds ?? []);
  for (const name of claims.roleNames) {
    const id = state.roleByName(name)?.id;
    if (id !== undefined) roleIds.add(id);
  }
  return {
    subject: claims.subject,
    userId: user?.id ?? null,
    roleIds: [...roleIds].sort((a, b) => a - b),
    email: claims.email,
    groups: claims.groups,
  };
}

/** The keys could not be fetched: the reader is anonymous. */
class KeysUnavailable extends Error {
  override readonly name = 'KeysUnavailable';
}

/**
 * The JWKS URL through jose's remote key set (cached for 10 minutes, fetched again for a
 * `kid` it does not know at most every 30 s), over an undici pool of its own (with the
 * CAs of `jwks_ca_file` when given) that reads at most MAX_JWKS_BYTES of an answer.
 */
class RemoteKeys {
  readonly #url: URL;
  readonly #agent: Agent;
  /** Made on the first token, when jose is loaded. */
  #jwks: ReturnType<Jose['createRemoteJWKSet']> | null = null;
  readonly #logger: Logger;
  /** performance.now() before which a stale key set is not fetched again. */
  #retryAt = Number.NEGATIVE_INFINITY;

  constructor(url: URL, ca: string | undefined, logger: Logger) {
    this.#url = url;
    this.#logger = logger;
    this.#agent = new Agent({ connect: { timeout: JWKS_TIMEOUT_MS, ...(ca === undefined ? {} : { ca }) } });
  }

  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    const loaded = await jose();
    const jwks = (this.#jwks ??= loaded.createRemoteJWKSet(this.#url, {
      timeoutDuration: JWKS_TIMEOUT_MS,
      cooldownDuration: JWKS_COOLDOWN_MS,
      cacheMaxAge: JWKS_MAX_AGE_MS,
      [loaded.customFetch]: (resource, init) => this.#fetch(resource, init),
    }));
    if (!jwks.fresh && performance.now() < this.#retryAt) throw new KeysUnavailable('the JWKS could not be fetched recently');
    try {
      return await jwks(header, token);
    } catch (err) {
      if (!isFetchFailure(err, loaded.errors)) throw err;
      this.#retryAt = performance.now() + JWKS_RETRY_AFTER_MS;
      // The URL without its query (it may carry a provider's parameters), never a token.
      this.#logger.warn(
        { jwks: `${this.#url.origin}${this.#url.pathname}`, reason: (err as Error).message, retryAfterMs: JWKS_RETRY_AFTER_MS },
        'relay identity: the JWKS could not be fetched; end users are anonymous until it can be',
      );
      throw new KeysUnavailable('the JWKS could not be fetched', { cause: err });
    }
  };

  async close(): Promise<void> {
    await this.#agent.close();
  }

  async #fetch(resource: string, init: { headers: Headers; method: 'GET'; redirect: 'manual'; signal: AbortSignal }): Promise<Response> {
    // undici's request API follows no redirect, as jose's `redirect: 'manual'` asks.
    const res = await this.#agent.request({ ...target(resource), method: init.method, headers: Object.fromEntries(init.headers), signal: init.signal });
    if (res.statusCode !== 200) {
      await res.body.dump();
      throw new Error(`the JWKS URL answered ${res.statusCode}`);
    }
    const declared = Number(res.headers['content-length'] ?? '0');
    if (declared > MAX_JWKS_BYTES) {
      await res.body.dump({ limit: 0 });
      throw new Error(`the JWKS answer is larger than ${MAX_JWKS_BYTES} bytes`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.byteLength;
      // Leaving the loop destroys the rest of the answer.
      if (size > MAX_JWKS_BYTES) throw new Error(`the JWKS answer is larger than ${MAX_JWKS_BYTES} bytes`);
      chunks.push(chunk);
    }
    return new Response(Buffer.concat(chunks), { status: 200, headers: { 'content-type': 'application/json' } });
  }
}

/** Errors of the token or of key selection are the token's; everything else is the fetch's. */
function isFetchFailure(err: unknown, joseErrors: Jose['errors']): boolean {
  return !(
    err instanceof joseErrors.JWKSNoMatchingKey ||
    err instanceof joseErrors.JWKSMultipleMatchingKeys ||
    err instanceof joseErrors.JOSENotSupported ||
    err instanceof joseErrors.JOSEAlgNotAllowed ||
    err instanceof joseErrors.JWKInvalid ||
    err instanceof joseErrors.JWSInvalid
  );
}

function orConfigError<T>(read: Read<T>, key: string): T {
  if (!read.ok) throw new ConfigError([`relay.identity.jwt.${key}: ${read.problem}`]);
  return read.value;
}
