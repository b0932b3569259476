/**
 * API keys (DESIGN §9): `svc_` + 40 base62 characters, stored only as SHA-256.
 */
import { hash, randomFillSync } from 'node:crypto';

export const API_KEY_PATTERN = /^svc_[A-Za-z0-9]{40}$/;
export const API_KEY_PREFIX_LENGTH = 12;

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** 40 base62 characters by rejection sampling, so every character is equally likely. */
export function generateApiKey(): string {
  let out = 'svc_';
  const bytes = Buffer.alloc(64);
  while (out.length < 44) {
    randomFillSync(bytes);
    for (const b of bytes) {
      if (b < 248 && out.length < 44) out += ALPHABET[b % 62];
    }
  }
  return out;
}

export function hashApiKey(key: string): Buffer {
  return hash('sha256', key, 'buffer');
}

/** The same SHA-256 as base64 text: a map key, computed in one call on every request. */
export function apiKeyHashText(key: string): string {
  return hash('sha256', key, 'base64');
}

export function apiKeyPrefix(key: string): string {
  return key.slice(0, API_KEY_PREFIX_LENGTH);
}
