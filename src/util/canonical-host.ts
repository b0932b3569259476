/**
 * One spelling per host (DESIGN §15): the egress proxy's host rules and the hosts clients
 * ask it for are both brought to this form before they are compared, so a host cannot be
 * written in a way that misses its rule (and is tunnelled blind) while still reaching the
 * same machine.
 *
 * - A name: the WHATWG URL host parser's result (the one Node's `URL` and `fetch` use):
 *   lower case, full-width and other compatibility forms folded, ignorable code points
 *   dropped, Unicode labels as `xn--` A-labels; then one trailing dot removed. It must
 *   then be an LDH host name (RFC 1123 §2.1: labels of letters, digits and hyphens, not
 *   starting or ending with a hyphen, at most 63 bytes each, 253 in all).
 * - An IPv4 address, in every form `inet_aton` reads (`127.1`, `2130706433`,
 *   `0x7f.0.0.1`, `0177.0.0.1`): dotted decimal, as the URL parser writes it.
 * - An IPv6 address (with or without brackets): the URL parser's compressed form, without
 *   brackets; an IPv4-mapped one (`::ffff:a.b.c.d`) is the IPv4 address it maps, since a
 *   socket connected to it reaches that address.
 *
 * Refused (null): an empty host; any `%` (no client escapes a host, and a zone id names an
 * interface, not a host); white space, control bytes and URL delimiters; `_` and other
 * bytes a host name may not hold; a wildcard `*`; empty labels (`a..b`, a leading dot,
 * two trailing dots); a name whose last label is numeric but that is no IPv4 address
 * (`1.2.3.4.5`, `999.1.1.1`, `api.1`).
 */
import { isIP } from 'node:net';

/** Longest host text read at all: a 253-byte name, or a bracketed IPv6 with an IPv4 tail. */
const MAX_INPUT = 300;
/** What the URL parser would treat as the end of a host, or refuse, or decode. */
const NOT_IN_A_HOST = /[\u0000-\u0020%/\\?#@:[\]<>^|*"'`{}\u007f]/;
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_NAME = 253;
const MAPPED_V4 = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/;

/**
 * The canonical form of `host` (a name, an IPv4 address, or an IPv6 address with or
 * without brackets, never a port), or null when it is none of these.
 */
export function canonicalHost(host: string): string | null {
  if (host.length === 0 || host.length > MAX_INPUT || host.includes('%')) return null;
  if (host.startsWith('[') || host.includes(':')) return canonicalIpv6(host);
  if (NOT_IN_A_HOST.test(host)) return null;
  const parsed = URL.parse(`http://${host}/`);
  if (parsed === null) return null;
  let name = parsed.hostname;
  // The IPv4 parser has taken its one trailing dot already; a name keeps it until here.
  if (isIP(name) === 4) return name;
  if (name.startsWith('[')) return null;
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (name.length === 0 || name.length > MAX_NAME) return null;
  for (const label of name.split('.')) if (!LABEL.test(label)) return null;
  return name;
}

function canonicalIpv6(host: string): string | null {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (isIP(bare) !== 6) return null;
  const parsed = URL.parse(`http://[${bare}]/`);
  if (parsed === null) return null;
  const address = parsed.hostname.slice(1, -1);
  const mapped = MAPPED_V4.exec(address);
  if (mapped === null) return address;
  const high = parseInt(mapped[1]!, 16);
  const low = parseInt(mapped[2]!, 16);
  return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
}

/** `host` as it is written in a URL or an authority: IPv6 in brackets. */
export function hostForUrl(host: string): string {
  return isIP(host) === 6 ? `[${host}]` : host;
}

/** An egress proxy host rule's `match`, read: `host`, `*.domain` or `[v6]`, and an optional `:port`. */
export interface HostMatch {
  /** `*.domain`: the subdomains of `host`, never `host` itself. */
  readonly wildcard: boolean;
  /** Canonical (canonicalHost); for a wildcard, a name, never an address. */
  readonly host: string;
  /** Null: the scheme's default port. */
  readonly port: number | null;
  /** The match written back in canonical form: how it is named in metrics and logs. */
  readonly text: string;
}

/** `match` read and made canonical, or null when it is not a host, a wildcard over a name, or has a port outside 1-65535. */
export function parseHostMatch(match: string): HostMatch | null {
  const written = /^(\*\.)?(\[[^\]]*\]|[^:]*)(?::([0-9]{1,5}))?$/.exec(match);
  if (written === null) return null;
  const wildcard = written[1] !== undefined;
  const host = canonicalHost(written[2]!);
  // `*.0.0.1` would read as the IPv4 address 0.0.0.1: a wildcard covers names only.
  if (host === null || (wildcard && isIP(host) !== 0)) return null;
  const port = written[3] === undefined ? null : Number(written[3]);
  if (port !== null && (port < 1 || port > 65535)) return null;
  return { wildcard, host, port, text: `${wildcard ? '*.' : ''}${hostForUrl(host)}${port === null ? '' : `:${port}`}` };
}

/**
 * An authority as a request writes it, `host[:port]` (`[v6]` in brackets), printable
 * ASCII only, with its host canonical; the port is required when `defaultPort` is null.
 * Null when the host is not a host name or IP address, or the port is not 1-65535.
 */
export function canonicalAuthority(authority: string, defaultPort: number | null): { host: string; port: number } | null {
  // A request line is ASCII: Node reads other bytes as Latin-1, which is not what the
  // client meant, so a Unicode name is refused here rather than read as another name.
  if (!/^[\x21-\x7e]+$/.test(authority)) return null;
  const found = /^(\[[^\]]*\]|[^:[\]]*)(?::([0-9]{1,5}))?$/.exec(authority);
  if (found === null) return null;
  const port = found[2] === undefined ? defaultPort : Number(found[2]);
  if (port === null || port < 1 || port > 65535) return null;
  const host = canonicalHost(found[1]!);
  return host === null ? null : { host, port };
}
