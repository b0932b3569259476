/**
 * A control plane on PostgreSQL whose database goes away and comes back: the network
 * between them is a real TCP relay this test cuts and restores. While it is cut, requests
 * answer 503 "not ready" (never a 500), liveness stays up and readiness goes down; once it
 * is back, requests are served again without a restart.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { createApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call, SEED } from '../support/app.ts';
import { postgresPerFile } from '../support/postgres.ts';

const postgres = postgresPerFile();

/** A TCP relay to `port` on loopback that can be cut (every connection closed, new ones refused) and restored on its port. */
class Relay {
  #server: Server | null = null;
  readonly #sockets = new Set<Socket>();
  readonly #target: number;
  port = 0;

  constructor(target: number) {
    this.#target = target;
  }

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.#target, '127.0.0.1');
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on('close', () => this.#sockets.delete(socket));
        socket.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as { port: number }).port;
    this.#server = server;
  }

  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => server?.close(() => resolve()) ?? resolve());
  }
}

test('the database away: 503 not ready (never a 500), liveness up, readiness down; back: served again', { skip: postgres.skip }, async (t) => {
  const { name, url } = await postgres.database('svc_outage');
  const listening = async () => Number(await postgres.server.psql('postgres', `SELECT count(*) FROM pg_stat_activity WHERE datname = '${name}' AND query = 'LISTEN svc_state'`));
  const relay = new Relay(Number(new URL(url).port));
  await relay.open();
  t.after(() => relay.cut());
  const through = new URL(url);
  through.port = String(relay.port);
  const config = loadConfig({
    text: `
server: { listen: 127.0.0.1:0, admin_listen: "off" }
store: { url: ${JSON.stringify(through.toString())} }
keys: { master_key_file: /nonexistent/never-used.key }
logging: { level: silent }
${SEED}`,
    env: {},
  });
  const app = await createApp(config, { logger: createLogger('silent'), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  const { main } = await app.listen();
  t.after(() => app.close());
  const base = `http://127.0.0.1:${main.port}`;
  const list = () => call(base, '/api/v3/classifications', { method: 'GET' });
  const create = (name: string) => call(base, '/api/v3/classifications', { body: JSON.stringify({ name, bg_color: '#111111', fg_color: '#eeeeee' }) });

  assert.equal((await list()).status, 200);
  assert.equal((await create('Before')).status, 201);
  assert.equal(await listening(), 1, 'one connection listens for the state version');

  await relay.cut();
  for (const res of [await list(), await create('During')]) {
    assert.equal(res.status, 503, res.text);
    assert.deepEqual(res.json, { message: 'The service is not ready.' });
  }
  assert.equal((await call(base, '/healthz', { method: 'GET', key: null })).status, 200);
  assert.equal((await call(base, '/readyz', { method: 'GET', key: null })).status, 503);

  await relay.open();
  // The pool makes new connections as requests need them.
  let back = await list();
  for (let i = 0; i < 50 && back.status !== 200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    back = await list();
  }
  assert.equal(back.status, 200, back.text);
  assert.deepEqual(
    (back.json.data as Array<{ name: string }>).map((c) => c.name).filter((name) => name === 'Before' || name === 'During'),
    ['Before'],
    'the write refused during the outage did not happen',
  );
  assert.equal((await create('After')).status, 201);
  assert.equal((await call(base, '/readyz', { method: 'GET', key: null })).status, 200);
  // The listening connection the cut ended is made again (after a second or so).
  for (let i = 0; i < 100 && (await listening()) !== 1; i++) await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(await listening(), 1, 'listening again');
});
