import { isIPv4, isIPv6 } from 'node:net';

export interface ListenAddress {
  /** As `server.listen()` wants it: IPv6 without brackets. */
  host: string;
  port: number;
}

const LISTEN_HINT = 'expected host:port (e.g. 0.0.0.0:8080, localhost:8080 or [::1]:8080)';
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
  const colon = input.lastIndexOf(':');
  if (colon <= 0) throw new Error(`${LISTEN_HINT}, got ${JSON.stringify(input)}`);
  const host = input.slice(0, colon);
  const port = input.slice(colon + 1);
  if (host.includes(':')) throw new Error(`${LISTEN_HINT}; put IPv6 addresses in brackets`);
  if (!/^\d+$/.test(port)) throw new Error(`${LISTEN_HINT}, got ${JSON.stringify(input)}`);
  if (!isIPv4(host) && !HOSTNAME.test(host)) throw new Error(`${LISTEN_HINT}; "${host}" is not a valid host`);
  return { host, port: parsePort(port) };
}

function parsePort(digits: string): number {
  const port = Number(digits);
  if (port > 65535) throw new Error(`port ${digits} is out of range (0-65535)`);
  return port;
}
