/**
 * Which addresses a destination may connect to (DESIGN §8, §13): loopback, private,
 * link-local, unspecified, multicast and other special-purpose ranges are refused unless
 * the allowlist names the host explicitly, and so is an IPv6 address that carries such an
 * IPv4 address (IPv4-compatible, -mapped, SIIT, NAT64, 6to4, Teredo). The check runs on
 * the address actually connected to — inside the socket's DNS lookup — so a name cannot
 * resolve to a public address when checked and a private one when used.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { AddressNotAllowedError } from '../errors.ts';
import type { LookupFunction } from 'node:net';

/** IPv4 ranges that are not public unicast, as [first address, prefix length]. */
const IPV4_BLOCKED = [
  ['0.0.0.0', 8], // "this network", includes 0.0.0.0
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata endpoints
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24], // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
].map(([net, prefix]) => ({ net: parseIpv4(net as string)!, mask: prefixMask(prefix as number) }));

/**
 * Public IPv6 is global unicast, 2000::/3 (RFC 4291 §2.4): everything outside it is
 * loopback, unspecified, unique local (fc00::/7), link-local (fe80::/10), site-local
 * (fec0::/10), multicast (ff00::/8), discard (100::/64), SRv6 (5f00::/16), NAT64 (the
 * 64:ff9b::/96 prefix is decided by its IPv4; 64:ff9b:1::/48 is local-use) or unassigned.
 * Inside it, these ranges are not public either:
 */
const GLOBAL_UNICAST = { net: parseIpv6('2000::')!, prefix: 3 };
const IPV6_BLOCKED = [
  ['2001:2::', 48], // benchmarking
  ['2001:10::', 28], // ORCHID (deprecated)
  ['2001:db8::', 32], // documentation
  ['3fff::', 20], // documentation
].map(([net, prefix]) => ({ net: parseIpv6(net as string)!, prefix: prefix as number }));

/**
 * True when `address` (an IP literal) is a public unicast address. IPv6 is judged on its
 * parsed 128-bit value, never its spelling (compressed, expanded, dotted tail, leading
 * zeros, case, zone id), and an IPv4 address carried inside it must pass as one. Anything
 * that does not parse is not public.
 */
export function isPublicAddress(address: string): boolean {
  const v4 = parseIpv4(address);
  if (v4 !== null) return isPublicIpv4(v4);
  const v6 = parseIpv6(address);
  return v6 !== null && isPublicIpv6(v6);
}

function isPublicIpv4(address: number): boolean {
  for (const { net, mask } of IPV4_BLOCKED) if (((address & mask) >>> 0) === net) return false;
  return true;
}

function isPublicIpv6(g: Uint16Array): boolean {
  const embedded = embeddedIpv4(g);
  if (embedded !== null) return embedded.every(isPublicIpv4);
  if (!inPrefix(g, GLOBAL_UNICAST.net, GLOBAL_UNICAST.prefix)) return false;
  for (const { net, prefix } of IPV6_BLOCKED) if (inPrefix(g, net, prefix)) return false;
  return true;
}

/**
 * The IPv4 addresses an IPv6 address stands for, or null when it carries none:
 * - IPv4-compatible `::a.b.c.d` (::/96, with :: and ::1 in it as 0.0.0.0 and 0.0.0.1),
 *   IPv4-mapped `::ffff:a.b.c.d` (::ffff:0:0/96), SIIT `::ffff:0:a.b.c.d` (::ffff:0:0:0/96)
 *   and NAT64 `64:ff9b::a.b.c.d` (64:ff9b::/96): the last 32 bits;
 * - 6to4 `2002:AABB:CCDD::/48`: bits 16-47;
 * - Teredo `2001:0::/32`: the server in bits 32-63 and the client, bit-inverted, in the
 *   last 32: both must be public, as either can be where the packets end up.
 */
function embeddedIpv4(g: Uint16Array): number[] | null {
  const last = pair(g[6]!, g[7]!);
  const zeroTo3 = g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0;
  if (zeroTo3 && g[4] === 0 && (g[5] === 0 || g[5] === 0xffff)) return [last];
  if (zeroTo3 && g[4] === 0xffff && g[5] === 0) return [last];
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0) return [last];
  if (g[0] === 0x2002) return [pair(g[1]!, g[2]!)];
  if (g[0] === 0x2001 && g[1] === 0) return [pair(g[2]!, g[3]!), pair(g[6]! ^ 0xffff, g[7]! ^ 0xffff)];
  return null;
}

function pair(high: number, low: number): number {
  return ((high << 16) | low) >>> 0;
}

function prefixMask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

function inPrefix(g: Uint16Array, net: Uint16Array, prefix: number): boolean {
  for (let i = 0, bits = prefix; bits > 0; i++, bits -= 16) {
    const mask = bits >= 16 ? 0xffff : (0xffff << (16 - bits)) & 0xffff;
    if ((g[i]! & mask) !== (net[i]! & mask)) return false;
  }
  return true;
}

/** Dotted-quad IPv4, four decimal numbers 0-255 without leading zeros; null otherwise. */
function parseIpv4(text: string): number | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  let value = 0;
  for (const part of parts) {
    // No leading zeros: `010` reads as octal in some parsers and decimal in others.
    if (!/^(?:0|[1-9][0-9]{0,2})$/.test(part)) return null;
    const n = Number(part);
    if (n > 255) return null;
    value = value * 256 + n;
  }
  return value;
}

/**
 * IPv6 text (RFC 4291 §2.2, optionally in brackets, with a `%zone` dropped) as eight
 * 16-bit groups; null when it is not one.
 */
function parseIpv6(input: string): Uint16Array | null {
  let text = input.startsWith('[') && input.endsWith(']') ? input.slice(1, -1) : input;
  const zone = text.indexOf('%');
  if (zone !== -1) text = text.slice(0, zone);
  const double = text.indexOf('::');
  if (double !== -1 && text.indexOf('::', double + 1) !== -1) return null;
  const head = double === -1 ? text : text.slice(0, double);
  const tail = double === -1 ? '' : text.slice(double + 2);
  const before = groupsOf(head, tail === '' && double === -1);
  const after = double === -1 ? [] : groupsOf(tail, true);
  if (before === null || after === null) return null;
  const count = before.length + after.length;
  if (double === -1 ? count !== 8 : count > 7) return null;
  const out = new Uint16Array(8);
  out.set(before, 0);
  out.set(after, 8 - after.length);
  return out;
}

/** The groups of one side of `::`; a dotted IPv4 may end the address (two groups). */
function groupsOf(text: string, mayEndWithIpv4: boolean): number[] | null {
  if (text === '') return [];
  const parts = text.split(':');
  const groups: number[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (i === parts.length - 1 && mayEndWithIpv4 && part.includes('.')) {
      const v4 = parseIpv4(part);
      if (v4 === null) return null;
      groups.push(v4 >>> 16, v4 & 0xffff);
    } else if (/^[0-9A-Fa-f]{1,4}$/.test(part)) {
      groups.push(parseInt(part, 16));
    } else {
      return null;
    }
  }
  return groups;
}

/** The resolver under the policy: the system's, or another one (split-horizon DNS, tests). */
export type Resolver = (hostname: string, callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

const systemResolver: Resolver = (hostname, callback) => dnsLookup(hostname, { all: true }, callback);

/**
 * A `lookup` for sockets that may reach public addresses only. Every resolved address
 * must be public: a name with one private record is refused whole, so the connection
 * cannot fall back to it.
 */
export function publicOnlyLookup(resolve: Resolver = systemResolver): LookupFunction {
  return (hostname, options, callback) => resolve(hostname, (err, addresses) => {
    if (err) {
      (callback as (e: Error) => void)(err);
      return;
    }
    if (addresses.length === 0 || !addresses.every((a) => isPublicAddress(a.address))) {
      (callback as (e: Error) => void)(new AddressNotAllowedError(hostname));
      return;
    }
    if (options.all) (callback as (e: null, a: LookupAddress[]) => void)(null, addresses);
    else (callback as (e: null, a: string, f: number) => void)(null, addresses[0]!.address, addresses[0]!.family);
  });
}
