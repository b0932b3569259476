/**
 * Small JSON bodies of the management API: read whole (they are bounded by the limit),
 * parsed with JSON.parse.
 */
import { InvalidJsonError } from '../errors.ts';
import { consumeBody, requireJson } from './body.ts';
import type { RequestContext } from './context.ts';

export const MANAGEMENT_BODY_LIMIT = 1024 * 1024;

export async function readJson(ctx: RequestContext, limit = MANAGEMENT_BODY_LIMIT): Promise<unknown> {
  requireJson(ctx);
  const chunks: Buffer[] = [];
  await consumeBody(ctx, limit, (chunk) => chunks.push(chunk));
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new InvalidJsonError((err as Error).message.replace(/\.$/, ''));
  }
}
