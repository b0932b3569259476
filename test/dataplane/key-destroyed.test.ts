/**
 * DESIGN §13, "Key destruction is never a data-loss race": a request that took a key
 * version as current when it started, and whose version is then rotated away and destroyed
 * (forced) before it finishes, must not hand out tokens of that version — nobody could
 * ever decrypt them. It answers 409, or, when the body is being streamed on, aborts the
 * stream instead of completing it.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Keyring } from '../../src/crypto/keyring.ts';
import { TokenCodec } from '../../src/crypto/token.ts';
import { KeyInUse } from '../../src/dataplane/field-handlers.ts';
import { KeyDestroyedDuringRequestError } from '../../src/errors.ts';
import { openStore } from '../../src/store/db.ts';
import { call, KEYS, SEED, startApp, type Running } from '../support/app.ts';

const DESTROYED = { message: 'The key version was destroyed during the request.' };

async function paymentsId(running: Running): Promise<string> {
  const list = await call(running.url, '/api/v3/configurations', { method: 'GET' });
  return list.json.data.find((c: { name: string }) => c.name === 'payments').id;
}

/** Rotates payments and destroys `version` at once, as an operator forcing it would. */
async function rotateAndDestroy(running: Running, version: number): Promise<void> {
  const id = await paymentsId(running);
  assert.equal((await call(running.url, `/api/v3/configurations/${id}/rotate`)).status, 200);
  const destroyed = await call(running.url, `/api/v3/configurations/${id}/keys/${version}/destroy`, {
    body: JSON.stringify({ confirm: `payments/v${version}`, force: true }),
  });
  assert.equal(destroyed.status, 200, destroyed.text);
}

interface Pending {
  /** Sends the rest of the body. */
  finish(rest: string): void;
  readonly response: Promise<{ status: number; body: string }>;
}

/**
 * Starts a request and sends the first part of its body. Resolves once the service has
 * begun handling it: its request handler has run (resolving the configuration and the key
 * version it will write with) and the part sent has had time to be transformed.
 */
async function startRequest(running: Running, path: string, headers: Record<string, string>, first: string): Promise<Pending> {
  const handled = once(running.app.server, 'request');
  const req = request(`${running.url}${path}`, {
    method: 'POST',
    headers: { 'x-svc-authorization': KEYS.owner, 'content-type': 'application/json', ...headers },
  });
  const response = (async () => {
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of res) chunks.push(chunk as Buffer);
    } catch {
      // A cut answer: what arrived is what counts.
    }
    return { status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() };
  })();
  req.on('error', () => {});
  req.flushHeaders();
  req.write(first);
  await handled;
  await sleep(100);
  return {
    finish: (rest) => req.end(rest),
    response,
  };
}

test('an encrypt whose key version is rotated and destroyed before it finishes answers 409 and returns no token', async (t) => {
  const running = await startApp(t);
  const pending = await startRequest(running, '/api/v3/encryption/payments/encrypt', { 'x-svc-fields': 'card.number,ssn' }, '{"card":{"number":"4111 1111 1111 1111"},');
  await rotateAndDestroy(running, 1);
  pending.finish('"ssn":"123-45-6789"}');
  const res = await pending.response;
  assert.equal(res.status, 409, res.body);
  assert.deepEqual(JSON.parse(res.body), DESTROYED);
  assert.ok(!res.body.includes('svc:'), 'no token left');

  // The next request writes with the new current version.
  const next = await call(running.url, '/api/v3/encryption/payments/encrypt', { body: '{"card":{"number":"4111"}}' });
  assert.equal(next.status, 200);
  assert.match(next.json.card.number, /^svc:2:/);
});

test('a rewrap whose target version is rotated and destroyed before it finishes answers 409 and returns no token', async (t) => {
  const running = await startApp(t);
  const v1 = await call(running.url, '/api/v3/encryption/payments/encrypt', { body: '{"a":"x","b":"y"}', headers: { 'x-svc-fields': 'a,b' } });
  const id = await paymentsId(running);
  assert.equal((await call(running.url, `/api/v3/configurations/${id}/rotate`)).status, 200);
  const pending = await startRequest(running, '/api/v3/encryption/payments/rewrap', {}, `{"a":"${v1.json.a}",`);
  // Version 2 is what the rewrap writes; it is superseded by 3 and destroyed meanwhile.
  await rotateAndDestroy(running, 2);
  pending.finish(`"b":"${v1.json.b}"}`);
  const res = await pending.response;
  assert.equal(res.status, 409, res.body);
  assert.deepEqual(JSON.parse(res.body), DESTROYED);
});

test('an encrypt that matched nothing wrote no token: it is not refused when its key version goes', async (t) => {
  const running = await startApp(t);
  const pending = await startRequest(running, '/api/v3/encryption/payments/encrypt', { 'x-svc-fields': 'card.number' }, '{"other":');
  await rotateAndDestroy(running, 1);
  pending.finish('1}');
  const res = await pending.response;
  assert.equal(res.status, 200, res.body);
  assert.equal(res.body, '{"other":1}');
});

/** A destination that records what reaches it and whether the body ever completed. */
async function startDestination(t: TestContext) {
  const seen = { bytes: '', completed: false };
  const first = Promise.withResolvers<string>();
  const closed = Promise.withResolvers<void>();
  const server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => {
      seen.bytes += chunk.toString();
      first.resolve(seen.bytes);
    });
    req.on('end', () => {
      seen.completed = true;
      res.writeHead(201, { 'content-type': 'application/json' }).end('{"stored":true}');
    });
    req.on('error', () => {});
    req.on('close', () => closed.resolve());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}`, first: first.promise, closed: closed.promise, seen };
}

test('a streamed encrypt-and-forward whose key version is destroyed mid-stream is aborted, never completed', async (t) => {
  const destination = await startDestination(t);
  const seed = SEED.replace(
    '{ name: payments, proxy_slug: payments, fields: [card.number] }',
    `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: ["${destination.url}/"] }`,
  );
  const running = await startApp(t, '', seed);
  const record = (i: number) => `{"id":${i},"card":{"number":"4111 1111 1111 ${String(i).padStart(4, '0')}"}}`;
  // No content-length: the body is streamed to the destination as it is transformed.
  const pending = await startRequest(
    running,
    '/proxy/payments',
    { 'x-svc-fields': '*.card.number', 'x-svc-destination': `${destination.url}/import`, 'transfer-encoding': 'chunked' },
    `[${record(0)}`,
  );
  // The destination is already receiving tokens of version 1.
  assert.match(await destination.first, /"number":"svc:1:/);
  await rotateAndDestroy(running, 1);
  pending.finish(`,${record(1)}]`);
  const res = await pending.response;
  await destination.closed;
  assert.equal(destination.seen.completed, false, 'the destination got a complete body of tokens nobody can decrypt');
  assert.ok(!destination.seen.bytes.endsWith(']'));
  assert.equal(res.status, 409, res.body);
  assert.deepEqual(JSON.parse(res.body), DESTROYED);
});

test('an egress route encrypting on the way out aborts the stream when its key version is destroyed meanwhile', async (t) => {
  const destination = await startDestination(t);
  const egress = `
egress:
  - name: outbox
    destination: ${destination.url}
    configuration: payments
    request: { encrypt: ["*.card.number"] }
`;
  const running = await startApp(t, egress);
  const record = (i: number) => `{"id":${i},"card":{"number":"4111 1111 1111 ${String(i).padStart(4, '0')}"}}`;
  const pending = await startRequest(running, '/egress/outbox/import', { 'transfer-encoding': 'chunked' }, `[${record(0)}`);
  assert.match(await destination.first, /"number":"svc:1:/);
  await rotateAndDestroy(running, 1);
  pending.finish(`,${record(1)}]`);
  const res = await pending.response;
  await destination.closed;
  assert.equal(destination.seen.completed, false, 'the vendor got a complete body of tokens nobody can decrypt');
  assert.equal(res.status, 409, res.body);
  assert.deepEqual(JSON.parse(res.body), DESTROYED);
});

test('regression: a version destroyed by another connection (the CLI, another instance) fails the very next check, whatever earlier requests were told', async (t) => {
  const path = join(mkdtempSync(join(tmpdir(), 'svc-key-in-use-')), 'svc.db');
  const service = openStore(path);
  const cli = openStore(path);
  t.after(() => {
    service.close();
    cli.close();
  });
  const keyringId = randomBytes(16);
  const configuration = await service.configurations.create({ name: 'payments', type: 'encryption', proxySlug: 'payments', keyringId, firstWrappedKey: randomBytes(60), fields: ['card'], destinations: ['https://vendor.example/'] });
  // The codec a request took before the rotation: version 1 is its current one.
  const codec = new TokenCodec(new Keyring(keyringId, [{ version: 1, key: randomBytes(32) }]), { deterministic: false });
  assert.equal(new KeyInUse(service, configuration.id, codec).failure(5), null, 'an earlier request: version 1 is alive');
  // The service has just looked at other connections' commits, so its change stamp alone
  // would not see the CLI's for a while.
  service.changeStamp();
  await cli.configurations.addKey(configuration.id, 2, randomBytes(60));
  assert.equal(await cli.configurations.destroyKey(configuration.id, 1), 'destroyed');
  assert.ok(new KeyInUse(service, configuration.id, codec).failure(5) instanceof KeyDestroyedDuringRequestError, 'the next request that wrote version 1 tokens fails');
  assert.equal(new KeyInUse(service, configuration.id, codec).failure(0), null, 'no token written, nothing lost');
});
