/**
 * Run as a child process (test/ops/loaded-modules.test.ts, test/crypto/certificates.test.ts):
 * records every module the service resolves, starts it with the configuration in argv[2]
 * (YAML, where `${DESTINATION}` is the destination below), sends one `/proxy/payments` request through it to a destination of its own (plain
 * `node:net`, so the child itself loads no HTTP module the service would not), then prints
 * one JSON line saying which of the modules the service must not load for nothing were
 * loaded. argv[3] is the API key.
 */
import { randomBytes } from 'node:crypto';
import { createRequire, registerHooks } from 'node:module';
import { createServer, type AddressInfo } from 'node:net';

const loaded: string[] = [];
registerHooks({
  resolve(specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context);
    loaded.push(resolved.url);
    return resolved;
  },
});

// A destination that answers every request with an empty 200 and keeps the connection.
const destination = createServer((socket) => {
  socket.on('data', () => socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}'));
  socket.on('error', () => {});
});
await new Promise<void>((resolve) => destination.listen(0, '127.0.0.1', resolve));
const destinationUrl = `http://127.0.0.1:${(destination.address() as AddressInfo).port}/`;

const { createApp } = await import('../../src/app.ts');
const { loadConfig } = await import('../../src/config/load.ts');
const { createLogger } = await import('../../src/telemetry/logger.ts');

const app = await createApp(loadConfig({ text: process.argv[2]!, env: { DESTINATION: destinationUrl } }), { logger: createLogger('silent'), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
const { port } = (await app.listen()).main;

// One proxied request, through the same `node:http` the service holds (by require).
const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');
const status = await new Promise<number>((resolve, reject) => {
  const body = JSON.stringify({ card: { number: '4242424242424242' } });
  const req = http.request(
    {
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/proxy/payments',
      headers: { 'content-type': 'application/json', 'x-svc-authorization': process.argv[3] ?? '', 'x-svc-destination': destinationUrl, 'x-svc-fields': 'card.number' },
    },
    (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    },
  );
  req.on('error', reject);
  req.end(body);
});

const required = Object.keys(createRequire(import.meta.url).cache);
const report = {
  modules: loaded.length,
  proxied: status,
  x509: loaded.some((url) => url.includes('/node_modules/@peculiar/x509/')),
  // undici's index (fetch, WebSocket, mocks, cache stores) rather than the parts we use.
  undiciIndex: required.some((file) => file.endsWith('/node_modules/undici/index.js')),
  // Node's own copy of undici, which an ES import of node:http loads (src/http/node-http.ts).
  // `process.moduleLoadList` is Node's list of its own modules loaded so far (not in @types/node).
  nodeUndici: (process as unknown as { moduleLoadList: string[] }).moduleLoadList.includes('NativeModule internal/deps/undici/undici'),
  // prom-client's index (summary, push gateway, cluster aggregator) rather than its classes.
  promClientIndex: required.some((file) => file.endsWith('/node_modules/prom-client/index.js')),
  // What prom-client's CPU counters would load, for exemplars (src/telemetry/default-metrics.ts).
  openTelemetry: loaded.some((url) => url.includes('/node_modules/@opentelemetry/')),
  // Loaded on the first login, access token or relay end-user token (src/auth/jose.ts).
  jose: loaded.some((url) => url.includes('/node_modules/jose/')),
  // The relay's modules, loaded where `relay:` is configured (src/app.ts).
  relay: loaded.some((url) => url.includes('/node_modules/http-proxy-3/') || url.endsWith('/src/dataplane/relay.ts')),
  // The management API's handlers, loaded on the first request to one of their routes (src/api/routes.ts).
  managementApi: loaded.some((url) => /\/src\/api\/(?:api-keys|auth|classifications|configurations|keys|logs|sync|users)\.ts$/.test(url)),
};
await app.close();
destination.close();
process.stdout.write(`${JSON.stringify(report)}\n`);
