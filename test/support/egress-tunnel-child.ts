/**
 * Run inside a network namespace of its own (test/dataplane/egress-proxy.test.ts), where
 * the public address PUBLIC is on the loopback interface and nothing leaves the
 * namespace: a TCP echo server listens on PUBLIC, the service starts with an egress proxy
 * in `unknown_hosts: tunnel` mode, and blind tunnels are opened to PUBLIC by address and
 * by name. Prints one JSON line with what each tunnel carried.
 *
 * With `idle` after the address, the proxy has a short `tunnel_idle_timeout` instead: one
 * tunnel carries a message, then stays quiet, and the line says which sides were closed.
 *
 * With `spellings`, PUBLIC:port is a listed host instead, names resolve through the
 * system (as in production: `inet_aton` reads 134743044 as an address), and CONNECTs to
 * other spellings of PUBLIC say whether each was tunnelled blind or not.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp, type AppOptions } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';

const PUBLIC = process.argv[2]!;
const IDLE = process.argv[3] === 'idle';
const SPELLINGS = process.argv[3] === 'spellings';
/** How long the idle case waits for the proxy to close a quiet tunnel before it says it did not. */
const GIVE_UP_MS = 15_000;
const dir = mkdtempSync(join(tmpdir(), 'svc-tunnel-'));
let vendorSideClosed = false;
const echo = createServer((socket) => {
  socket.pipe(socket);
  socket.on('close', () => (vendorSideClosed = true));
});
await new Promise<void>((resolve) => echo.listen(0, PUBLIC, resolve));
const port = (echo.address() as AddressInfo).port;

const config = loadConfig({
  text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ":memory:" }
${SPELLINGS ? 'seed: { configurations: [{ name: payments }] }' : ''}
egress_proxy:
  listen: 127.0.0.1:0
  unknown_hosts: tunnel
${IDLE ? '  tunnel_idle_timeout: 300ms' : ''}
${SPELLINGS ? `  hosts: [{ match: "${PUBLIC}:${port}", configuration: payments }]` : ''}
  ca: { cert_file: ${join(dir, 'ca.pem')}, key_file: ${join(dir, 'ca.key')} }
`,
  env: {},
});
const app = await createApp(config, {
  logger: createLogger('silent'),
  env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') },
  ...(SPELLINGS
    ? {}
    : { resolve: (host: string, callback: Parameters<NonNullable<AppOptions['resolve']>>[1]) => (host === 'vendor.test' ? callback(null, [{ address: PUBLIC, family: 4 }]) : callback(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }), [])) }),
});
const { egressProxy } = await app.listen();

/** CONNECT, then send `payload` in the same packet as the request (a client's early bytes) and more after the answer. */
function tunnel(target: string, payload: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(egressProxy!.port, '127.0.0.1', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n${payload.slice(0, 3)}`));
    let got = '';
    socket.on('data', (chunk) => {
      const before = got;
      got += chunk.toString();
      if (!before.includes('\r\n\r\n') && got.includes('\r\n\r\n')) socket.write(payload.slice(3));
      if (got.endsWith(payload)) socket.end();
    });
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
  });
}

/** CONNECT, one message through, then nothing: resolves when the proxy closes the tunnel, or after GIVE_UP_MS. */
function quietTunnel(target: string, payload: string): Promise<{ carried: string; closedByProxy: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect(egressProxy!.port, '127.0.0.1', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n`));
    let got = '';
    const giveUp = setTimeout(() => {
      socket.destroy();
      resolve({ carried: got, closedByProxy: false });
    }, GIVE_UP_MS);
    socket.on('data', (chunk) => {
      const before = got;
      got += chunk.toString();
      if (!before.includes('\r\n\r\n') && got.includes('\r\n\r\n')) socket.write(payload);
    });
    socket.on('close', () => {
      clearTimeout(giveUp);
      resolve({ carried: got, closedByProxy: true });
    });
    socket.on('error', reject);
  });
}

/**
 * CONNECT, then plain bytes where a TLS client hello would go: `tunnelled` when they come
 * back from the echo server, else the proxy's status line (a terminated CONNECT answers
 * 200 and then drops bytes that are not TLS).
 */
function spelling(target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(egressProxy!.port, '127.0.0.1', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n`));
    let got = '';
    socket.on('data', (chunk) => {
      const before = got;
      got += chunk.toString('latin1');
      if (!before.includes('\r\n\r\n') && got.includes('\r\n\r\n')) socket.write('not tls\n');
      if (got.endsWith('not tls\n')) socket.destroy();
    });
    socket.on('close', () => resolve(got.endsWith('not tls\n') ? 'tunnelled' : got.slice(0, got.indexOf('\r\n'))));
    socket.on('error', reject);
  });
}

/** A second echo server on PUBLIC, that no rule lists. */
async function otherEchoPort(): Promise<number> {
  const other = createServer((socket) => socket.pipe(socket));
  await new Promise<void>((resolve) => other.listen(0, PUBLIC, resolve));
  other.unref();
  return (other.address() as AddressInfo).port;
}

/** PUBLIC written as one 32-bit number, in hex, as a.b.c-style, and IPv4-mapped. */
function spellingsOf(address: string): string[] {
  const [a, b, c, d] = address.split('.').map(Number) as [number, number, number, number];
  const value = ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
  return [`${value}`, `0x${value.toString(16)}`, `${a}.${b}.${(c << 8) | d}`, `0${a.toString(8)}.${b}.${c}.${d}`, `${address}.`, `[::ffff:${address}]`, `[::FFFF:${address}]`];
}

const result = IDLE
  ? { ...(await quietTunnel(`${PUBLIC}:${port}`, 'then silence')), vendorSideClosed: await settled(() => vendorSideClosed) }
  : SPELLINGS
    ? {
        listed: Object.fromEntries(await Promise.all(spellingsOf(PUBLIC).map(async (host) => [host, await spelling(`${host}:${port}`)] as const))),
        // The same spelling to an unlisted port of the same address: tunnelled, as it should be.
        unlisted: await spelling(`${spellingsOf(PUBLIC)[0]}:${await otherEchoPort()}`),
      }
    : { byAddress: await tunnel(`${PUBLIC}:${port}`, 'hello over the tunnel'), byName: await tunnel(`vendor.test:${port}`, 'by name too') };
process.stdout.write(`${JSON.stringify(result)}\n`);
/** `check()` once it holds, or false after a few seconds (the close reaches the echo server a moment later). */
async function settled(check: () => boolean): Promise<boolean> {
  for (let i = 0; i < 100 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 50));
  return check();
}

await app.close();
echo.close();
rmSync(dir, { recursive: true, force: true });
