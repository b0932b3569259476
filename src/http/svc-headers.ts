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

/**
 * Throws 400 for the first header that is not one of ours but looks meant to be: an `x-svc-`
 * name we do not know, or a near miss of one of ours outside that prefix (`x_svc_fields`,
 * `x-svcfields`, `svc-fields`). Such a header is just as lost as `x-svc-field`, and would
 * fall back to the configuration's fields just the same.
 */
export function refuseUnknownSvcHeaders(headers: IncomingHttpHeaders): void {
  for (const name in headers) {
    // Most headers are none of ours and look nothing like them: no distance is computed.
    if (KNOWN.has(name) || (name[0] !== 'x' && !name.includes('svc'))) continue;
    // Some clients and proxies write `_` for `-` in header names.
    const dashed = name.replaceAll('_', '-');
    const suggestion = KNOWN.has(dashed) ? dashed : nearestName(dashed, SVC_REQUEST_HEADERS);
    if (!name.startsWith('x-svc-') && suggestion === undefined) continue;
    const shown = name.length > SHOWN ? `${name.slice(0, SHOWN)}…` : name;
    throw new BadRequestError(`Unknown header ${shown}.${suggestion === undefined ? '' : ` Did you mean ${suggestion}?`}`);
  }
}

/** A header of ours, however its separators are written (`x-svc-`, `x_svc_`): never forwarded. */
export function isOwnHeader(name: string): boolean {
  return name.length >= 6 && name.charCodeAt(0) === 0x78 && (name.startsWith('x-svc-') || /^x[-_]svc[-_]/.test(name));
}
