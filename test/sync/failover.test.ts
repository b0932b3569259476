/**
 * Failover between control-plane instances (DESIGN §16): a replica given several URLs
 * moves to the next at once when one fails, and backs off only when every one failed in a
 * row. The instances are real services on one SQLite file (so they serve one state, as
 * instances on one database do); the first is a child process killed with SIGKILL where
 * the test is about a crash.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { openStore } from '../../src/store/db.ts';
import { LogShipper } from '../../src/sync/log-shipper.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { startChild, type Child } from '../support/child.ts';
import { call, KEYS } from '../support/app.ts';
import { counter, FLEET_KEY, get, json, MASTER_KEY, ready, startControlPlane, startReplica, SYNC_SEED, tempDir, waitFor, waitReady, type Node } from './nodes.ts';

const ENC = '/api/v3/encryption/payments/encrypt';
const BODY = '{"card":{"number":"4111 1111 1111 1111"}}';
/** Longer than any test runs: a replica that waited for its backoff would never get there. */
const HOUR_MS = 3_600_000;

/** A control plane as its own process on `dir`/svc.db, with the master key the in-process nodes use. */
function startControlPlaneProcess(t: TestContext, dir: string): Promise<Child> {
  return startChild(t, `keys: { master_key_file: /nonexistent/never-used.key }\n${SYNC_SEED}`, { SVC_MASTER_KEY: MASTER_KEY }, [], { dir });
}

async function kill(child: Child): Promise<void> {
  const exited = once(child.process, 'exit');
  child.process.kill('SIGKILL');
  await exited;
}

/** The log lines a node wrote with this message, parsed. */
function logLines(node: Node, msg: string): Array<Record<string, any>> {
  return node
    .logs()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, any>)
    .filter((line) => line['msg'] === msg);
}

/** How many snapshot requests a node (in-process) has answered. */
async function snapshotRequests(node: Node): Promise<number> {
  const metric = node.app.services.metrics.registry.getSingleMetric('svc_http_requests_total');
  const values = (await metric?.get())?.values ?? [];
  return values.filter((v) => v.labels['route'] === '/api/v3/sync/snapshot').reduce((sum, v) => sum + v.value, 0);
}

async function urlGauge(node: Node): Promise<number> {
  return (await node.app.services.metrics.controlPlaneUrl.get()).values[0]?.value ?? Number.NaN;
}

/** The replication of a replica node. */
function replication(node: Node) {
  const r = node.app.replication;
  assert.ok(r !== null, 'a replica');
  return r;
}

/** Encrypts once on `replica` per request id, each with its own id. */
async function traffic(replica: Node, prefix: string, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, i) => `${prefix}-${i}-${randomBytes(4).toString('hex')}`);
  for (const id of ids) assert.equal((await call(replica.url, ENC, { body: BODY, headers: { 'x-svc-request-id': id } })).status, 200);
  return ids;
}

/** Waits until every id's api and usage rows are on `cp`, then checks each is there once. */
async function assertShippedOnce(cp: Node, ids: readonly string[]): Promise<void> {
  for (const id of ids) {
    const rows = await waitFor(`the rows of ${id} on ${cp.url}`, async () => {
      const api = (await get(cp, `/api/v3/logs/api?request_id=${id}`)).json.data as Array<Record<string, unknown>>;
      const usage = (await get(cp, `/api/v3/logs/usage?request_id=${id}`)).json.data as Array<Record<string, unknown>>;
      return api.length > 0 && usage.length > 0 ? { api, usage } : undefined;
    });
    assert.equal(rows.api.filter((row) => row['path'] === ENC).length, 1, `one api row for ${id}`);
    assert.equal(rows.usage.length, 1, `one usage row for ${id}`);
  }
}

async function classificationNames(node: Node): Promise<string[]> {
  return ((await get(node, '/api/v3/classifications?per_page=100')).json.data as Array<{ name: string }>).map((c) => c.name);
}

async function createClassification(cp: Node, name: string): Promise<void> {
  const created = await call(cp.url, '/api/v3/classifications', { body: json({ name, bg_color: '#111111', fg_color: '#eeeeee' }) });
  assert.equal(created.status, 201);
}

/**
 * A control plane that is there and never answers: it accepts connections and reads them,
 * then writes nothing (`stall: 'headers'`), or writes the headers of a large 200 answer and
 * never its body (`stall: 'body'`). Returns its base URL and how many connections it took.
 */
async function startHung(t: TestContext, stall: 'headers' | 'body'): Promise<{ url: string; connections: () => number }> {
  const sockets = new Set<Socket>();
  let connections = 0;
  const server = createNetServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.once('data', () => {
      if (stall === 'body') socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{"version":');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(async () => {
    for (const socket of sockets) socket.destroy();
    server.close();
    await once(server, 'close');
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, connections: () => connections };
}

// ---------------------------------------------------------------------------------------

test('two control-plane URLs: the replica serves from the first; when that process is killed it polls and ships to the second and picks up state written there', async (t) => {
  const dir = tempDir(t);
  const first = await startControlPlaneProcess(t, dir);
  const second = await startControlPlane(t, join(dir, 'svc.db'));
  const replica = await startReplica(t, join(dir, 'r1.db'), [first.url, second.url], 'r1', { captureLogs: true });
  const { replica: poller, shipper } = replication(replica);

  // (a) Ready, from the first: the second was never asked for a snapshot.
  await waitReady(replica);
  assert.equal(poller.servingIndex, 0);
  assert.equal(await urlGauge(replica), 0);
  assert.equal(await snapshotRequests(second), 0, 'the second instance is not polled while the first answers');
  const before = await traffic(replica, 'before', 3);
  await assertShippedOnce(second, before);
  assert.equal(shipper.servingIndex, 0, 'the rows went to the first (the second shows them: one store)');

  // (b) The first dies, with rows written just before that may be in a batch it took
  // without answering. State written through the second reaches the replica, from the second.
  const during = await traffic(replica, 'during', 3);
  await kill(first);
  await createClassification(second, 'After failover');
  await waitFor('the new classification on the replica', async () => ((await classificationNames(replica)).includes('After failover') ? true : undefined));
  assert.equal(poller.servingIndex, 1);
  assert.equal(await urlGauge(replica), 1);
  assert.ok((await snapshotRequests(second)) > 0);
  assert.equal(await ready(replica), true);
  assert.equal((await call(replica.url, ENC, { body: BODY })).status, 200, 'still serving');
  const switches = logLines(replica, 'now polling this control-plane URL').map((line) => [line['controlPlane'], line['index']]);
  assert.deepEqual(switches, [
    [`${first.url}/`, 0],
    [`${second.url}/`, 1],
  ]);

  // (c) Log shipment fails over too: rows written after the kill reach the second, and no
  // row, shipped before the kill, around it or after it, is stored twice.
  const after = await traffic(replica, 'after', 3);
  await assertShippedOnce(second, after);
  assert.equal(shipper.servingIndex, 1);
  await assertShippedOnce(second, during);
  await assertShippedOnce(second, before);
  assert.equal(logLines(replica, 'now shipping logs to this control-plane URL').at(-1)?.['controlPlane'], `${second.url}/`);
  assert.ok(!replica.logs().includes(FLEET_KEY), 'the key is never logged');
});

test('a failed poll goes to the next URL at once, not after the backoff', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  // The first URL refuses connections from the start; the poll interval (and so any
  // backoff) is an hour: only an immediate retry on the second makes the replica ready.
  // Its credentials (which undici would not even send) must not reach the log.
  const replica = await startReplica(t, join(dir, 'r1.db'), ['http://svc:s3cret@127.0.0.1:1/?token=t0k3n', cp.url], 'r1', { pollMs: HOUR_MS, captureLogs: true });
  await waitReady(replica);
  assert.equal(replication(replica).replica.servingIndex, 1);
  assert.equal(await counter(replica, 'reloadFailures'), 1, 'one failed poll, on the first URL');
  const failed = logLines(replica, 'could not reach the control plane; keeping the last good state');
  assert.deepEqual(
    failed.map((line) => [line['controlPlane'], line['next']]),
    [['http://127.0.0.1:1/', `${cp.url}/`]],
  );
  assert.match(failed[0]!['err'].message, /^GET http:\/\/127\.0\.0\.1:1\/api\/v3\/sync\/snapshot failed/);
  assert.ok(!replica.logs().includes('s3cret') && !replica.logs().includes('t0k3n'), 'no credentials or query in the log');
});

test('every URL down: the replica keeps serving and backs off after each round; it resumes, polling and shipping, when one comes back', async (t) => {
  const dir = tempDir(t);
  const store = join(dir, 'cp.db');
  const a = await startControlPlane(t, store);
  const b = await startControlPlane(t, store);
  const bPort = b.port;
  const replica = await startReplica(t, join(dir, 'r1.db'), [a.url, b.url], 'r1', { captureLogs: true });
  await waitReady(replica);
  const names = await classificationNames(replica);

  await Promise.all([a.close(), b.close()]);
  const failures = await waitFor('three rounds of failed polls', () => {
    const lines = logLines(replica, 'could not reach the control plane; keeping the last good state');
    return lines.length >= 6 ? lines.slice(0, 6) : undefined;
  });
  // A, then B at once; B's failure ends the round (next: null) and the backoff applies,
  // its count growing by one per round; the next round starts over at A.
  assert.deepEqual(
    failures.map((line) => [line['controlPlane'], line['next']]),
    [
      [`${a.url}/`, `${b.url}/`],
      [`${b.url}/`, null],
      [`${a.url}/`, `${b.url}/`],
      [`${b.url}/`, null],
      [`${a.url}/`, `${b.url}/`],
      [`${b.url}/`, null],
    ],
  );
  assert.deepEqual(
    failures.filter((line) => line['next'] === null).map((line) => line['failures']),
    [1, 2, 3],
  );
  assert.equal(await ready(replica), true, 'a replica with a state stays ready');
  assert.deepEqual(await classificationNames(replica), names, 'and serves the last good state');
  const outage = await traffic(replica, 'outage', 3);
  await waitFor('a failed log shipment round', () => (logLines(replica, 'shipping logs to the control plane failed; keeping them and retrying').length > 0 ? true : undefined));

  // The second instance returns on its port; the first stays down.
  const back = await startControlPlane(t, store, bPort);
  await createClassification(back, 'After the outage');
  await waitFor('the new classification on the replica', async () => ((await classificationNames(replica)).includes('After the outage') ? true : undefined));
  assert.equal(replication(replica).replica.servingIndex, 1);
  await assertShippedOnce(back, outage);
  assert.equal(replication(replica).shipper.servingIndex, 1);
});

test('one URL, as before lists: every failed poll is a round, so each one backs off', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const replica = await startReplica(t, join(dir, 'r1.db'), cp.url, 'r1', { captureLogs: true });
  await waitReady(replica);
  await cp.close();
  const failures = await waitFor('two failed polls', () => {
    const lines = logLines(replica, 'could not reach the control plane; keeping the last good state');
    return lines.length >= 2 ? lines.slice(0, 2) : undefined;
  });
  assert.deepEqual(
    failures.map((line) => [line['next'], line['failures']]),
    [
      [null, 1],
      [null, 2],
    ],
  );
  assert.equal(await ready(replica), true);
  assert.equal((await get(replica, '/api/v3/classifications', KEYS.owner)).status, 200);
});

test('a log shipment answered 503 moves to the next URL; the error names the URL without its credentials', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const unavailable = createServer((req, res) => {
    req.resume();
    res.writeHead(503).end('unavailable');
  });
  unavailable.listen(0, '127.0.0.1');
  await once(unavailable, 'listening');
  t.after(() => unavailable.close());
  const port = (unavailable.address() as AddressInfo).port;
  const store = openStore(join(dir, 'r1.db'));
  t.after(() => store.close());
  await store.logs.insertApi(['ship-1', 'ship-2'].map((requestId) => ({ requestId, method: 'POST', path: ENC, statusCode: 200, durationMs: 2, ip: '127.0.0.1', createdAt: new Date().toISOString() })));
  const shipper = new LogShipper({
    store,
    logger: createLogger('silent'),
    urls: [`http://svc:s3cret@127.0.0.1:${port}`, cp.url],
    apiKey: FLEET_KEY,
    replica: 'r1',
    instance: await store.shippedLogs.instanceId(),
    interval: HOUR_MS,
  });
  t.after(() => shipper.stop());

  await assert.rejects(shipper.shipOnce(), (err: Error) => {
    assert.equal(err.message, `POST http://127.0.0.1:${port}/api/v3/sync/logs answered 503: unavailable`);
    return true;
  });
  assert.equal(shipper.servingIndex, null);
  assert.equal(await shipper.shipOnce(), 2, 'the next round goes to the second URL');
  assert.equal(shipper.servingIndex, 1);
  for (const id of ['ship-1', 'ship-2']) assert.equal((await get(cp, `/api/v3/logs/api?request_id=${id}`)).json.data.length, 1);
  assert.equal(await shipper.shipOnce(), 0, 'nothing is sent twice');
});

test('instances that accept and never answer (no headers; headers, then a stalled body) are left within a poll interval each: the replica is ready from the third, polls and ships there', async (t) => {
  const dir = tempDir(t);
  const cp = await startControlPlane(t, join(dir, 'cp.db'));
  const silent = await startHung(t, 'headers');
  const stalled = await startHung(t, 'body');
  // Poll every second, ship every 100 ms (so each request's timeouts are one second). With
  // the former fixed timeouts (30 s for the headers, 30 s for a pause in the body) the
  // replica would need a minute to get past the two; the deadlines below allow ten seconds.
  const replica = await startReplica(t, join(dir, 'r1.db'), [silent.url, stalled.url, cp.url], 'r1', { pollMs: 1_000, captureLogs: true });
  await waitFor('the replica ready from the third URL', async () => ((await ready(replica)) ? true : undefined), 10_000, 20);
  const { replica: poller, shipper } = replication(replica);
  assert.equal(poller.servingIndex, 2);
  assert.ok(silent.connections() > 0 && stalled.connections() > 0, 'both hung instances were asked');

  // The log says why each was left: the timeout of the kind that applied.
  const failed = logLines(replica, 'could not reach the control plane; keeping the last good state');
  const first = failed.find((line) => line['controlPlane'] === `${silent.url}/`);
  const second = failed.find((line) => line['controlPlane'] === `${stalled.url}/`);
  assert.ok(first !== undefined && second !== undefined, 'a failed poll logged for each hung instance');
  assert.equal(first['next'], `${stalled.url}/`);
  assert.match(first['err'].message, /^GET http:\/\/127\.0\.0\.1:\d+\/api\/v3\/sync\/snapshot failed: .*Headers Timeout Error/);
  assert.equal(second['next'], `${cp.url}/`);
  assert.match(second['err'].message, /^reading the snapshot failed: .*Body Timeout Error/);

  // New state reaches the replica from the instance that answers, and logs reach it too
  // (the shipper started on the silent instance as well).
  await createClassification(cp, 'Past the hung ones');
  await waitFor('the new classification on the replica', async () => ((await classificationNames(replica)).includes('Past the hung ones') ? true : undefined), 10_000, 20);
  const ids = await traffic(replica, 'hung', 2);
  await waitFor('the rows shipped to the third URL', async () => (shipper.servingIndex === 2 ? true : undefined), 10_000, 20);
  await assertShippedOnce(cp, ids);
  assert.ok(!replica.logs().includes(FLEET_KEY), 'the key is never logged');
});
