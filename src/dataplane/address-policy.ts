/**
 * Which addresses a destination may connect to (DESIGN §8): loopback, private,
 * link-local, unspecified, multicast and other special-purpose ranges are refused unless
 * the allowlist names the host explicitly. The check runs on the address actually
 * connected to — inside the socket's DNS lookup — so a name cannot resolve to a public
 * address when checked and a private one when used.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

const blocked = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network", includes 0.0.0.0
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata endpoints
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  blocked.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96], // NAT64: embeds an IPv4 address
  ['100::', 64], // discard
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
] as const) {
  blocked.addSubnet(net, prefix, 'ipv6');
}

/** True when `address` (an IP literal) is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !blocked.check(address, 'ipv4');
  if (family !== 6) return false;
  const lower = address.toLowerCase();
  // IPv4-mapped and -compatible forms carry an IPv4 address that must pass as one.
  const mapped = /^(?:0*:)*(?:ffff:)?(\d+\.\d+\.\d+\.\d+)$/.exec(lower) ?? /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (mapped !== null) {
    const v4 = mapped.length === 2 ? mapped[1]! : hexPairToIpv4(mapped[1]!, mapped[2]!);
    return isIP(v4) === 4 && !blocked.check(v4, 'ipv4');
  }
  if (lower.startsWith('2002:')) {
    // 6to4: the next 32 bits are an IPv4 address.
    const parts = lower.split(':');
    const v4 = hexPairToIpv4(parts[1] ?? '0', parts[2] ?? '0');
    if (blocked.check(v4, 'ipv4')) return false;
  }
  return !blocked.check(address, 'ipv6');
}

function hexPairToIpv4(high: string, low: string): string {
  const h = parseInt(high, 16);
  const l = parseInt(low, 16);
  return `${h >> 8}.${h & 0xff}.${l >> 8}.${l & 0xff}`;
}

export class AddressNotAllowedError extends Error {
  readonly code = 'SVC_ADDRESS_NOT_ALLOWED';
  constructor(host: string) {
    super(`${host} resolves to an address that is not public`);
  }
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
