/**
 * How much of a body the data plane holds at once (DESIGN §13): one field value or object
 * key of at most `limits.max_value` bytes as written, quotes and escapes included. A value
 * being decrypted is a token, which may be as long as the token of a `max_value` value.
 */
import { maxTokenLength } from '../crypto/token.ts';
import type { CaptureLimits } from '../fields/value.ts';

export interface DataLimits {
  /** Values to encrypt. */
  readonly plaintext: CaptureLimits;
  /** Tokens to decrypt, and values that may be either (the relay guard). */
  readonly token: CaptureLimits;
}

export function dataLimits(maxValue: number): DataLimits {
  return {
    plaintext: { value: maxValue, capture: maxValue + 2 },
    token: { value: maxValue, capture: maxTokenLength(maxValue) + 2 },
  };
}
