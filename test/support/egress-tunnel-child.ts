/**
 * Run inside a network namespace of its own (test/dataplane/egress-proxy.test.ts), where
 * the public address PUBLIC is on the loopback interface and nothing leaves the
 * namespace: a TCP echo server listens on PUBLIC, the service starts with an egress proxy
 * in `unknown_hosts: tunnel` mode, and blind tunnels are opened to PUBLIC by address and
 * by name. Prints one JSON line with what each tunnel carried.
 *
 * With `idle` after the address, the proxy has a short `tunnel_idle_timeout` instead: one
 * tunnel carries a message, then stays quiet, and the line says which sides were closed.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';

const PUBLIC = process.argv[2]!;
const IDLE = process.argv[3] === 'idle';
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
egress_proxy:
  listen: 127.0.0.1:0
  unknown_hosts: tunnel
${IDLE ? '  tunnel_idle_timeout: 300ms' : ''}
  ca: { cert_file: ${join(dir, 'ca.pem')}, key_file: ${join(dir, 'ca.key')} }
`,
  env: {},
});
const app = createApp(config, {
  logger: createLogger('silent'),
  env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') },
  resolve: (host, callback) => (host === 'vendor.test' ? callback(null, [{ address: PUBLIC, family: 4 }]) : callback(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }), [])),
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

const result = IDLE
  ? { ...(await quietTunnel(`${PUBLIC}:${port}`, 'then silence')), vendorSideClosed: await settled(() => vendorSideClosed) }
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
