/**
 * Access tokens accept only the text they were issued as: jose decodes base64url leniently
 * (padding, whitespace, non-zero unused bits), so without a strict check one signature
 * would have several accepted spellings.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { AccessTokens } from '../../src/auth/access-tokens.ts';
import { UnauthorizedError } from '../../src/errors.ts';

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

async function refused(tokens: AccessTokens, token: string, what: string): Promise<void> {
  await assert.rejects(tokens.verify(token), (err: unknown) => err instanceof UnauthorizedError, what);
}

test('a JWT whose parts are not canonical base64url is refused, though it carries a valid signature', async () => {
  const tokens = new AccessTokens(randomBytes(32), 60_000);
  const { token } = await tokens.issue(7, '2026-01-01T00:00:00.000Z');
  assert.equal((await tokens.verify(token)).userId, 7);
  const [header, payload, signature] = token.split('.') as [string, string, string];
  // An HMAC-SHA256 signature is 32 bytes: 43 characters, whose last carries 2 unused bits.
  assert.equal(signature.length, 43);
  const last = B64URL.indexOf(signature.at(-1)!);
  const variants: Array<[string, string]> = [
    ['non-zero unused bits in the signature', `${header}.${payload}.${signature.slice(0, -1)}${B64URL[last | 1]}`],
    ['non-zero unused bits (the other one)', `${header}.${payload}.${signature.slice(0, -1)}${B64URL[last | 2]}`],
    ['a padded signature', `${token}=`],
    ['a space in the signature', `${header}.${payload}.${signature.slice(0, 10)} ${signature.slice(10)}`],
    ['a newline in the payload', `${header}.${payload.slice(0, 8)}\n${payload.slice(8)}.${signature}`],
    ['a padded header', `${header}${'='.repeat((4 - (header.length % 4)) % 4 || 4)}.${payload}.${signature}`],
    ['the standard alphabet', token.replaceAll('-', '+').replaceAll('_', '/')],
    ['a fourth part', `${token}.`],
    ['an empty signature', `${header}.${payload}.`],
  ];
  for (const [what, variant] of variants) {
    if (variant === token) continue;
    await refused(tokens, variant, what);
  }
  // The first two are the ones jose itself would accept: the check is ours.
  assert.deepEqual(Buffer.from(variants[0]![1].split('.')[2]!, 'base64url'), Buffer.from(signature, 'base64url'));
});
