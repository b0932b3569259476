/**
 * Query strings (DESIGN §15 `query:`): the part of a request target after `?`, read with
 * the form rules (`fields/form.ts`) — a parameter name is decoded and read as a field
 * path, `card[number]` being `card.number` — so one rule names a field in a body and in a
 * query alike. Matched values go to the handler; every other byte is copied as it came.
 *
 * One function for every caller that names query parameters (relay routes, egress routes,
 * the relay guard, and any listener to come): it takes the query, a matcher and a handler,
 * and leaves deciding what a failure means to the caller (`handler`'s own checks).
 */
import { InvalidFormError, InvalidQueryError } from '../errors.ts';
import { FormTransformer } from './form.ts';
import type { FieldMatcher } from './paths.ts';
import { UNLIMITED, type CaptureLimits, type ValueHandler } from './value.ts';

/**
 * The query (without its `?`) with the matched values replaced by `handler`. Bytes are
 * kept as they are (`latin1` in and out, as Node hands a target over). A space in a
 * replaced value is written `%20`, which every query reader takes as a space. A name, or
 * a matched value, that does not decode: 400 `InvalidQueryError`.
 *
 * A handler that protects (`protects`) has the query split at `;` too, as some servers do,
 * so a parameter after a `;` is not missed; one that decrypts reads only `&`, as WHATWG URL
 * does: a token hidden after a `;` then stays a token, which reveals nothing.
 */
export function transformQuery(query: string, matcher: FieldMatcher, handler: ValueHandler, limits: CaptureLimits = UNLIMITED): string {
  if (query === '') return query;
  const transformer = new FormTransformer(matcher, handler, limits, { semicolons: handler.protects === true, plusForSpace: false });
  const out: Buffer[] = [];
  try {
    transformer.push(Buffer.from(query, 'latin1'), out);
    transformer.end(out);
  } catch (err) {
    if (err instanceof InvalidFormError) throw new InvalidQueryError(err.detail);
    throw err;
  }
  return Buffer.concat(out).toString('latin1');
}

/** A request target's path and query (null: none), split at the first `?`. */
export function splitTarget(target: string): { path: string; query: string | null } {
  const q = target.indexOf('?');
  return q === -1 ? { path: target, query: null } : { path: target.slice(0, q), query: target.slice(q + 1) };
}
