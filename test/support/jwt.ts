/**
 * Test support for the relay's end-user identity: real keys and real signed JWTs made
 * with jose, the files `relay.identity.jwt` reads, and a JWKS served over real HTTPS.
 * The HTTPS side uses the throwaway PKI of test-pki.ts.
 */
import { generateKeyPairSync, randomBytes, createSecretKey, type KeyObject } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { exportJWK, SignJWT, type JWK, type JWTPayload } from 'jose';
import { SERVER_CERT, SERVER_KEY } from './test-pki.ts';

export { TEST_CA_FILE } from './test-pki.ts';

/** A directory removed when the test ends. */
export function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-identity-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface SigningKey {
  readonly alg: 'HS256' | 'RS256' | 'ES256';
  readonly key: KeyObject;
  /** The public JWK (with `kid` and `alg`), for a JWKS; none for a secret. */
  readonly jwk: JWK | null;
  readonly kid: string | null;
}

/** A 48-byte HS256 secret as text, as an operator writes it to a file (with a final newline). */
export function hs256(text = randomBytes(36).toString('base64url')): SigningKey & { readonly text: string } {
  return { alg: 'HS256', key: createSecretKey(Buffer.from(text)), jwk: null, kid: null, text };
}

export async function asymmetric(alg: 'RS256' | 'ES256', kid: string | null = `${alg.toLowerCase()}-${randomBytes(4).toString('hex')}`, bits = 2048): Promise<SigningKey> {
  const { privateKey, publicKey } = alg === 'ES256' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('rsa', { modulusLength: bits });
  const jwk: JWK = { ...(await exportJWK(publicKey)), alg, use: 'sig', ...(kid === null ? {} : { kid }) };
  return { alg, key: privateKey, jwk, kid };
}

export function jwks(...keys: SigningKey[]): { keys: JWK[] } {
  return { keys: keys.map((k) => k.jwk!).filter((jwk) => jwk !== null) };
}

export interface SignOptions {
  /** Seconds from now; null leaves `exp` out. Default 600. */
  readonly expiresIn?: number | null;
  /** Seconds from now for `nbf`. */
  readonly notBefore?: number;
  readonly issuer?: string;
  readonly audience?: string | string[];
  /** Header fields over the defaults (`alg`, `kid`, `typ`). */
  readonly header?: Record<string, unknown>;
}

export const ISSUER = 'https://login.example.com/realms/app';
export const AUDIENCE = 'patients-app';

/** A JWT signed with `signer`: `sub` and the given claims, issuer and audience as configured unless said otherwise. */
export async function sign(signer: SigningKey, claims: JWTPayload, options: SignOptions = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: signer.alg, typ: 'JWT', ...(signer.kid === null ? {} : { kid: signer.kid }), ...options.header } as { alg: string })
    .setIssuedAt(now)
    .setIssuer(options.issuer ?? ISSUER)
    .setAudience(options.audience ?? AUDIENCE);
  const expiresIn = options.expiresIn === undefined ? 600 : options.expiresIn;
  if (expiresIn !== null) jwt.setExpirationTime(now + expiresIn);
  if (options.notBefore !== undefined) jwt.setNotBefore(now + options.notBefore);
  return jwt.sign(signer.key);
}

/** `header.payload.` with `alg: none`: an unsecured JWT (RFC 7519 §6). */
export function unsigned(claims: JWTPayload): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  return `${part({ alg: 'none', typ: 'JWT' })}.${part({ iss: ISSUER, aud: AUDIENCE, iat: now, exp: now + 600, ...claims })}.`;
}

/** Writes `content` to a new file in `dir` and returns its path. */
export function writeFile(dir: string, name: string, content: string | Buffer): string {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

export interface JwksServer {
  readonly url: string;
  /** Requests the server has answered. */
  readonly fetches: () => number;
  /** What the next fetches get: the key set, a status, or nothing at all (the connection hangs). */
  answer: { jwks: unknown } | { status: number } | 'hang';
  close(): Promise<void>;
}

/** A JWKS over HTTPS on 127.0.0.1 (certificate of the test CA), closed when the test ends. */
export async function startJwksServer(t: TestContext, keySet: unknown): Promise<JwksServer> {
  let fetches = 0;
  const sockets = new Set<Socket>();
  const state: { answer: JwksServer['answer'] } = { answer: { jwks: keySet } };
  const server: Server = createServer({ key: SERVER_KEY, cert: SERVER_CERT }, (req, res) => {
    fetches++;
    const answer = state.answer;
    if (answer === 'hang') return;
    if ('status' in answer) {
      res.writeHead(answer.status, { 'content-type': 'text/plain' }).end('no');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/jwk-set+json' }).end(JSON.stringify(answer.jwks));
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  let closed: Promise<void> | null = null;
  const close = () =>
    (closed ??= new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    }));
  t.after(close);
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}/realms/app/protocol/openid-connect/certs`,
    fetches: () => fetches,
    get answer() {
      return state.answer;
    },
    set answer(value) {
      state.answer = value;
    },
    close,
  };
}
