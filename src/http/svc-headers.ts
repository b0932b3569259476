/**
 * svc-sidecar's own request headers (DESIGN §4). On `/api` and `/proxy` an `x-svc-` header
 * that is none of them is a mistake — a misspelt `x-svc-field` would otherwise fall back to
 * the configuration's fields and leave the intended one in plaintext — so it is refused,
 * with the nearest known name as a suggestion.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { BadRequestError } from '../errors.ts';
import { nearestName } from '../util/nearest.ts';

export const SVC_REQUEST_HEADERS: readonly string[] = [
  'x-svc-authorization',
  'x-svc-fields',
  'x-svc-mode',
  'x-svc-classification',
  'x-svc-destination',
  'x-svc-request-id',
];

const KNOWN = new Set(SVC_REQUEST_HEADERS);
/** Names are echoed in the error: long ones are cut. */
const SHOWN = 64;

/** Throws 400 for the first `x-svc-` header that is not one of ours. */
export function refuseUnknownSvcHeaders(headers: IncomingHttpHeaders): void {
  for (const name in headers) {
    if (!name.startsWith('x-svc-') || KNOWN.has(name)) continue;
    const shown = name.length > SHOWN ? `${name.slice(0, SHOWN)}…` : name;
    const suggestion = nearestName(name, SVC_REQUEST_HEADERS);
    throw new BadRequestError(`Unknown header ${shown}.${suggestion === undefined ? '' : ` Did you mean ${suggestion}?`}`);
  }
}
