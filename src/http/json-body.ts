/**
 * Small JSON bodies of the management API: read whole (they are bounded by the limit),
 * parsed with JSON.parse.
 */
import { InvalidJsonError, SvcError } from '../errors.ts';
import { FieldMatcher } from '../fields/paths.ts';
import { transformBuffer, type ValueHandler } from '../fields/transformer.ts';
import { consumeBody, requireJson } from './body.ts';
import type { RequestContext } from './context.ts';

export const MANAGEMENT_BODY_LIMIT = 1024 * 1024;

export async function readJson(ctx: RequestContext, limit = MANAGEMENT_BODY_LIMIT): Promise<unknown> {
  requireJson(ctx);
  const chunks: Buffer[] = [];
  await consumeBody(ctx, limit, (chunk) => chunks.push(chunk));
  const body = Buffer.concat(chunks);
  const text = body.toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    throw syntaxError(body);
  }
}

const NO_FIELDS = FieldMatcher.compile([], []);
const KEEP: ValueHandler = { replace: () => null };

/**
 * JSON.parse's message quotes the body ("Unexpected token 'h', "password: hunter2" is not
 * valid JSON"), and these bodies carry passwords and keys: the answer must not. The data
 * plane's transformer says what is wrong and at which byte, never with the bytes
 * themselves, so it is run (only on this failure path) to find the place.
 */
function syntaxError(body: Buffer): SvcError {
  try {
    transformBuffer(body, NO_FIELDS, KEEP);
  } catch (err) {
    if (err instanceof SvcError) return err;
    throw err;
  }
  // JSON.parse failed where the transformer did not: say nothing more than that.
  return new InvalidJsonError('a syntax error');
}
