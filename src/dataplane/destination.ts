/**
 * `x-svc-destination` (DESIGN §8): an absolute http(s) URL that must fall under one of the
 * configuration's `destinations` prefixes. An entry may name its host exactly
 * (`https://api.vendor.com/v1/`) or by wildcard (`https://*.vendor.com/`); only an exact
 * name lets the destination reach a non-public address.
 */
import { isIP } from 'node:net';
import { BadRequestError, DestinationNotAllowedError, DestinationPathNotAllowedError } from '../errors.ts';
import { isPublicAddress } from './address-policy.ts';

export interface Destination {
  readonly url: URL;
  /** `protocol//host:port`, the connection pool key. */
  readonly origin: string;
  /** Path and query sent in the request line. */
  readonly path: string;
  /** `Basic ...` from `user:pass@` in the URL, if any. */
  readonly authorization: string | null;
  /** The allowlist names this host exactly, so non-public addresses are allowed. */
  readonly trusted: boolean;
  /** The allowlist entry that matched: a bounded label for metrics. */
  readonly entry: string;
}

const MAX_URL_LENGTH = 8192;
/** Parsed destinations kept per allowlist: a client sends the same few values again and again. */
const CACHED_PER_ALLOWLIST = 64;
const parsed = new WeakMap<readonly string[], Map<string, Destination>>();

/**
 * parseDestination, remembered per allowlist array. A configuration's array is replaced
 * whenever the configuration is read again after a change, so nothing outlives an edit
 * of its allowlist; refusals are not remembered and are checked every time.
 */
export function cachedDestination(value: string, allowlist: readonly string[]): Destination {
  let known = parsed.get(allowlist);
  if (known === undefined) {
    known = new Map();
    parsed.set(allowlist, known);
  }
  let destination = known.get(value);
  if (destination === undefined) {
    destination = parseDestination(value, allowlist);
    if (known.size >= CACHED_PER_ALLOWLIST) known.clear();
    known.set(value, destination);
  }
  return destination;
}

export function parseDestination(value: string, allowlist: readonly string[]): Destination {
  let url: URL;
  try {
    if (value.length > MAX_URL_LENGTH) throw new Error('too long');
    url = new URL(value);
  } catch {
    throw new BadRequestError('The x-svc-destination header must be an absolute http or https URL.');
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new BadRequestError('The x-svc-destination header must be an absolute http or https URL.');
  }
  const found = matchAllowlist(url, allowlist);
  if (found === 'path') throw new DestinationPathNotAllowedError();
  if (found === null) throw new DestinationNotAllowedError(url.host);
  const match = found.kind;
  const literal = literalAddress(url.hostname);
  // An IP literal is the address connected to: check it here, as no lookup will run.
  if (literal !== null && match !== 'exact' && !isPublicAddress(literal)) throw new DestinationNotAllowedError(url.host);
  const authorization = url.username !== '' || url.password !== '' ? basicAuthorization(url) : null;
  return {
    url,
    origin: `${url.protocol}//${url.host}`,
    path: `${url.pathname}${url.search}`,
    authorization,
    trusted: match === 'exact',
    entry: found.entry,
  };
}

/** `Basic ...` from the URL's credentials; 400 when their percent-encoding is malformed (`%zz`, `%E2%82`). */
function basicAuthorization(url: URL): string {
  let credentials: string;
  try {
    credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  } catch {
    throw new BadRequestError('The x-svc-destination header must be an absolute http or https URL.');
  }
  return `Basic ${Buffer.from(credentials).toString('base64')}`;
}

/**
 * `exact` when an entry names the host itself, `wildcard` for `*.domain` entries, else null;
 * `path` when the only entries that name the host allow a path prefix the URL's path could
 * leave once the destination's server reads it (`pathEscapes`).
 */
function matchAllowlist(url: URL, allowlist: readonly string[]): { kind: 'exact' | 'wildcard'; entry: string } | 'path' | null {
  let result: { kind: 'exact' | 'wildcard'; entry: string } | null = null;
  let escapes = false;
  for (const entry of allowlist) {
    const wildcard = /^(https?):\/\/\*\.([^/]+)(\/.*)?$/i.exec(entry);
    let pattern: URL;
    try {
      pattern = new URL(wildcard === null ? entry : `${wildcard[1]}://${wildcard[2]}${wildcard[3] ?? '/'}`);
    } catch {
      continue;
    }
    if (pattern.protocol !== url.protocol || pattern.port !== url.port) continue;
    if (!pathUnder(url.pathname, pattern.pathname)) continue;
    const hostMatches = wildcard === null ? pattern.hostname === url.hostname : url.hostname.endsWith(`.${pattern.hostname}`);
    if (!hostMatches) continue;
    if (pattern.pathname !== '/' && pathEscapes(url.pathname)) {
      escapes = true;
      continue;
    }
    if (wildcard === null) return { kind: 'exact', entry };
    result ??= { kind: 'wildcard', entry };
  }
  return result ?? (escapes ? 'path' : null);
}

/**
 * Whether a path (as WHATWG URL leaves it: raw `..` and `\` already resolved) holds what a
 * server could read as leaving its prefix: an escaped `/`, `\` or `;`, an escaped `%` (a
 * second round of decoding), or a dot segment in a spelling URL parsing keeps, such as
 * `..;` (Tomcat and Jetty drop a segment's `;` parameters before resolving dots) or `.%2E`,
 * or escapes that are not UTF-8 (lenient decoders read the overlong `%C0%AE` as `.`).
 */
function pathEscapes(path: string): boolean {
  if (/%2f|%5c|%3b|%25/i.test(path)) return true;
  if (!decodes(path)) return true;
  return path.split('/').some((segment) => {
    const plain = segment.split(';', 1)[0]!.replace(/%2e/gi, '.');
    return plain === '.' || plain === '..';
  });
}

/** Whether the path's escapes decode as UTF-8. */
function decodes(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

/** `/v1/` covers `/v1/x`; `/v1` covers `/v1` and `/v1/x` but not `/v1x`. */
function pathUnder(path: string, prefix: string): boolean {
  if (prefix === '/' || path === prefix) return true;
  return path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`);
}

function literalAddress(hostname: string): string | null {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return isIP(bare) === 0 ? null : bare;
}
