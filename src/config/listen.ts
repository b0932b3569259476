import { isIPv4, isIPv6 } from 'node:net';

export interface ListenAddress {
  /** As `server.listen()` wants it: IPv6 without brackets. */
  host: string;
  port: number;
}

/** 127.0.0.0/8, ::1 and `localhost`: reachable from this host (or pod) only. */
export function isLoopback(host: string): boolean {
  const lower = host.toLowerCase();
  return lower === 'localhost' || lower === '::1' || (isIPv4(lower) && lower.startsWith('127.'));
}

export const LISTEN_HINT = 'expected host:port such as 127.0.0.1:8080';
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/**
 * Parses `host:port`. IPv6 hosts must be bracketed (`[::1]:8080`): an unbracketed `::1:8080`
 * cannot be told apart from the address `::1:8080`. Port 0 is allowed so tests can ask the
 * OS for a free port. Throws an Error whose message starts with "expected host:port" when the
 * shape is wrong.
 */
export function parseListen(input: string): ListenAddress {
  const bracketed = /^\[([^\]]*)\]:(\d+)$/.exec(input);
  if (bracketed !== null) {
    const [, host = '', port = ''] = bracketed;
    if (!isIPv6(host)) throw new Error(`${LISTEN_HINT}; "${host}" is not an IPv6 address`);
    return { host, port: parsePort(port) };
  }
  // A port alone (`8080`, `:8080`) does not say which interfaces to listen on; guessing
  // 0.0.0.0 would expose a listener the operator may have meant for loopback only.
  if (/^:?\d+$/.test(input)) throw new Error(portAloneMessage(input.replace(':', '')));
  const colon = input.lastIndexOf(':');
  if (colon <= 0) throw new Error(`${LISTEN_HINT} or [::1]:8080, got ${JSON.stringify(input)}`);
  const host = input.slice(0, colon);
  const port = input.slice(colon + 1);
  if (host.includes(':')) throw new Error(`${LISTEN_HINT}; put IPv6 addresses in brackets ([::1]:8080)`);
  if (!/^\d+$/.test(port)) throw new Error(`${LISTEN_HINT} or [::1]:8080, got ${JSON.stringify(input)}`);
  if (!isIPv4(host) && !HOSTNAME.test(host)) throw new Error(`${LISTEN_HINT}; "${host}" is not a valid host`);
  return { host, port: parsePort(port) };
}

/** The message for a port given without a host: `listen: 8080` (a number) or `"8080"`. */
export function portAloneMessage(port: string | number): string {
  return `expected host:port such as 127.0.0.1:${port}, got a port alone (0.0.0.0:${port} listens on every interface)`;
}

function parsePort(digits: string): number {
  const port = Number(digits);
  if (port > 65535) throw new Error(`port ${digits} is out of range (0-65535)`);
  return port;
}
