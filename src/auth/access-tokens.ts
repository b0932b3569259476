/**
 * Access tokens from login (DESIGN §9): HS256 JWTs signed with a secret derived from the
 * master key, so every instance sharing the master key accepts the same tokens and no
 * separate signing key has to be distributed or rotated on its own.
 */
import { createSecretKey, randomBytes, type webcrypto } from 'node:crypto';
import { isCanonicalBase64url } from '../crypto/base64url.ts';
import { UnauthorizedError } from '../errors.ts';
import { isJoseError, jose } from './jose.ts';

/** HKDF info for the signing secret; changing it invalidates every token issued. */
export const ACCESS_TOKEN_SECRET_LABEL = 'svc-sidecar access token v1';
export const ACCESS_TOKEN_ISSUER = 'svc-sidecar';
const ALGORITHM = 'HS256';

/**
 * The claim that carries the user's credentials stamp (the user row's `updated_at` when the
 * login read it): a token whose stamp is no longer the user's was issued before a password
 * change, a disable or a role change, and is refused (DESIGN §13).
 */
const STAMP_CLAIM = 'cst';

/** What a verified token says. */
export interface AccessTokenClaims {
  readonly userId: number;
  /** The user's credentials stamp at login. */
  readonly credentialsStamp: string;
  readonly jti: string;
  /** Expiry, seconds since the epoch (the JWT `exp`). */
  readonly expiresAt: number;
}

export interface IssuedToken {
  readonly token: string;
  /** Seconds the token is valid for. */
  readonly expiresIn: number;
  readonly claims: AccessTokenClaims;
}

export class AccessTokens {
  /**
   * A WebCrypto key imported once: jose re-imports a raw Uint8Array secret on every
   * sign and verify, which would be a per-request key import.
   */
  readonly #key: webcrypto.CryptoKey;
  readonly ttlSeconds: number;

  /** `secret` is at least 32 bytes; `ttlMs` is `auth.access_token_ttl`. */
  constructor(secret: Buffer, ttlMs: number) {
    if (secret.length < 32) throw new RangeError('the access token secret must be at least 32 bytes');
    this.#key = createSecretKey(secret).toCryptoKey({ name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
    // JWT times are whole seconds; a sub-second TTL still gives a token that lives one.
    this.ttlSeconds = Math.max(1, Math.round(ttlMs / 1000));
  }

  async issue(userId: number, credentialsStamp: string): Promise<IssuedToken> {
    const now = Math.floor(Date.now() / 1000);
    const claims: AccessTokenClaims = { userId, credentialsStamp, jti: randomBytes(16).toString('base64url'), expiresAt: now + this.ttlSeconds };
    const { SignJWT } = await jose();
    const token = await new SignJWT({ [STAMP_CLAIM]: credentialsStamp })
      .setProtectedHeader({ alg: ALGORITHM, typ: 'JWT' })
      .setSubject(String(userId))
      .setJti(claims.jti)
      .setIssuer(ACCESS_TOKEN_ISSUER)
      .setIssuedAt(now)
      .setExpirationTime(claims.expiresAt)
      .sign(this.#key);
    return { token, expiresIn: this.ttlSeconds, claims };
  }

  /**
   * Checks signature, algorithm, issuer and expiry; any failure is the same 401, so a
   * client learns nothing about which check failed.
   */
  async verify(token: string): Promise<AccessTokenClaims> {
    // jose decodes with atob, which takes padding, whitespace and non-zero unused bits: one
    // signature would have many accepted spellings. Only the text we issued is accepted.
    if (!isCompactJws(token)) throw new UnauthorizedError();
    const { jwtVerify } = await jose();
    let payload;
    try {
      ({ payload } = await jwtVerify(token, this.#key, {
        algorithms: [ALGORITHM],
        issuer: ACCESS_TOKEN_ISSUER,
        requiredClaims: ['sub', 'jti', 'exp', 'iat', STAMP_CLAIM],
      }));
    } catch (err) {
      if (isJoseError(err)) throw new UnauthorizedError({ cause: err });
      throw err;
    }
    const userId = payload.sub !== undefined && /^[1-9]\d{0,15}$/.test(payload.sub) ? Number(payload.sub) : NaN;
    const stamp = payload[STAMP_CLAIM];
    if (!Number.isSafeInteger(userId) || typeof payload.jti !== 'string' || payload.jti === '' || typeof payload.exp !== 'number' || typeof stamp !== 'string' || stamp === '') {
      throw new UnauthorizedError();
    }
    return { userId, credentialsStamp: stamp, jti: payload.jti, expiresAt: payload.exp };
  }
}

/** `header.payload.signature`, each part canonical unpadded base64url (RFC 7515 §2, §7.1). */
export function isCompactJws(token: string): boolean {
  const first = token.indexOf('.');
  const second = token.indexOf('.', first + 1);
  if (first <= 0 || second <= first + 1 || second === token.length - 1 || token.indexOf('.', second + 1) !== -1) return false;
  return isCanonicalBase64url(token, 0, first) && isCanonicalBase64url(token, first + 1, second) && isCanonicalBase64url(token, second + 1, token.length);
}
