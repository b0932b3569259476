/**
 * Run inside a network namespace of its own (test/dataplane/egress-proxy.test.ts), where
 * the public address PUBLIC is on the loopback interface and nothing leaves the
 * namespace: a TCP echo server listens on PUBLIC, the service starts with an egress proxy
 * in `unknown_hosts: tunnel` mode, and blind tunnels are opened to PUBLIC by address and
 * by name. Prints one JSON line with what each tunnel carried.
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
const dir = mkdtempSync(join(tmpdir(), 'svc-tunnel-'));
const echo = createServer((socket) => socket.pipe(socket));
await new Promise<void>((resolve) => echo.listen(0, PUBLIC, resolve));
const port = (echo.address() as AddressInfo).port;

const config = loadConfig({
  text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { path: ":memory:" }
egress_proxy:
  listen: 127.0.0.1:0
  unknown_hosts: tunnel
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

const result = { byAddress: await tunnel(`${PUBLIC}:${port}`, 'hello over the tunnel'), byName: await tunnel(`vendor.test:${port}`, 'by name too') };
process.stdout.write(`${JSON.stringify(result)}\n`);
await app.close();
echo.close();
rmSync(dir, { recursive: true, force: true });
