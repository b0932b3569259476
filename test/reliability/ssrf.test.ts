/**
 * Issue 7, part 5: server-side request forgery. Every spelling of a loopback or
 * unspecified address, a name that resolves to one, and a redirect to one are refused
 * unless an allowlist entry names that host — and a listener on the address proves that
 * a refusal means no connection at all. The check runs on the address actually
 * connected to (the lookup the socket uses), so no earlier answer can vouch for it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { LookupAddress } from 'node:dns';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import type { TestContext } from 'node:test';
import { call, KEYS, SEED, startApp } from '../support/app.ts';

/** A private listener that counts what reaches it. */
interface Target {
  readonly port: number;
  readonly connections: () => number;
  readonly requests: () => number;
}

/** Listens on `host` (port 0); null when the address is not available here (IPv6). */
async function startTarget(t: TestContext, host: string): Promise<Target | null> {
  let connections = 0;
  let requests = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"reached":true}');
    });
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => resolve());
    });
  } catch {
    return null;
  }
  t.after(() => new Promise<void>((r) => {
    for (const s of sockets) s.destroy();
    server.close(() => r());
  }));
  return { port: (server.address() as AddressInfo).port, connections: () => connections, requests: () => requests };
}

function seedWith(destinations: readonly string[]): string {
  const plain = '{ name: payments, proxy_slug: payments, fields: [card.number] }';
  assert.ok(SEED.includes(plain), 'the shared seed still declares payments as expected');
  return SEED.replace(plain, `{ name: payments, proxy_slug: payments, fields: [card.number], destinations: [${destinations.map((d) => JSON.stringify(d)).join(', ')}] }`);
}

type Resolver = (host: string, cb: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

/** A resolver for test names that records every lookup it answers. */
function fakeDns(names: Record<string, LookupAddress[]>): { resolve: Resolver; lookups: string[] } {
  const lookups: string[] = [];
  const resolve: Resolver = (host, cb) => {
    lookups.push(host);
    const addresses = names[host];
    if (addresses === undefined) cb(Object.assign(new Error(`${host} not found`), { code: 'ENOTFOUND' }), []);
    else cb(null, addresses);
  };
  return { resolve, lookups };
}

const BODY = '{"card":{"number":"4111"}}';
// Public-looking (it is never connected to: a name that also has a private address is refused whole).
const PUBLIC = { address: '93.184.216.34', family: 4 } as const;

test('loopback and unspecified addresses in every spelling, and names that resolve to them, are refused with 403 and never connected to', async (t) => {
  const v4 = (await startTarget(t, '127.0.0.1'))!;
  const v6 = await startTarget(t, '::1');
  if (v6 === null) t.diagnostic('IPv6 loopback is not available here: the [::1] cases are skipped');
  const dns = fakeDns({
    'internal.vendor.test': [{ address: '127.0.0.1', family: 4 }],
    'zero.vendor.test': [{ address: '0.0.0.0', family: 4 }],
    'mapped.vendor.test': [{ address: '::ffff:127.0.0.1', family: 6 }],
    'loopback6.vendor.test': [{ address: '::1', family: 6 }],
    // A resolver answering both: the private address must not be reachable through the name.
    'both.vendor.test': [PUBLIC, { address: '127.0.0.1', family: 4 }],
    'both-private-first.vendor.test': [{ address: '127.0.0.1', family: 4 }, PUBLIC],
  });
  // Wildcard entries let the names through the allowlist: only the address check stands
  // between them and the listeners. No entry names a loopback host.
  const allow = [`http://*.vendor.test:${v4.port}/`, ...(v6 === null ? [] : [`http://*.vendor.test:${v6.port}/`]), 'https://api.vendor.example/v1/'];
  const { url } = await startApp(t, '', seedWith(allow), { resolve: dns.resolve });

  const literals = [
    `http://localhost:${v4.port}/`,
    `http://127.1:${v4.port}/`,
    `http://2130706433:${v4.port}/`,
    `http://0x7f000001:${v4.port}/`,
    `http://[::ffff:127.0.0.1]:${v4.port}/`,
    `http://0.0.0.0:${v4.port}/`,
    `http://127.0.0.1:${v4.port}/`,
    ...(v6 === null ? [] : [`http://[::1]:${v6.port}/`]),
  ];
  const names = [
    `http://internal.vendor.test:${v4.port}/`,
    `http://zero.vendor.test:${v4.port}/`,
    `http://mapped.vendor.test:${v4.port}/`,
    `http://both.vendor.test:${v4.port}/`,
    `http://both-private-first.vendor.test:${v4.port}/`,
    ...(v6 === null ? [] : [`http://loopback6.vendor.test:${v6.port}/`]),
  ];
  let refused = 0;
  for (const destination of [...literals, ...names]) {
    for (const path of ['/proxy/payments', '/api/v3/encryption/payments/encrypt']) {
      const res = await call(url, path, { body: BODY, headers: { 'x-svc-destination': destination } });
      assert.equal(res.status, 403, `${path} → ${destination}: ${res.text}`);
      assert.deepEqual(res.json, { message: `The destination host ${new URL(destination).host} is not allowed for this configuration.` }, destination);
      refused++;
    }
  }
  assert.equal(v4.connections(), 0, 'nothing connected to 127.0.0.1');
  assert.equal(v6?.connections() ?? 0, 0, 'nothing connected to ::1');
  // One lookup per attempt, made by the connecting socket itself: there is no separate
  // validation lookup whose answer a rebinding name could change before the connect.
  const nameLookups = dns.lookups.filter((h) => h.endsWith('.vendor.test'));
  assert.equal(nameLookups.length, names.length * 2, `lookups: ${nameLookups.join(', ')}`);
  // Asking again looks up again: a verdict is never cached past the connection it was for.
  await call(url, '/proxy/payments', { body: BODY, headers: { 'x-svc-destination': names[0]! } });
  assert.equal(dns.lookups.filter((h) => h === 'internal.vendor.test').length, 3);
  console.log(`RELIABILITY ${JSON.stringify({ part: 'ssrf-refused', destinations: literals.length + names.length, requests: refused, connectionsReached: v4.connections() + (v6?.connections() ?? 0), ipv6: v6 !== null })}`);
});

test('a rebinding name, whose answers change from one lookup to the next, is checked on each lookup that connects', async (t) => {
  const v4 = (await startTarget(t, '127.0.0.1'))!;
  // DNS rebinding: whatever an earlier lookup said, the connecting socket's own lookup
  // decides. (A first answer that is public alone would be dialled, sending traffic off
  // this machine, so the public address only ever comes with a private one.)
  const answers: LookupAddress[][] = [[PUBLIC, { address: '127.0.0.1', family: 4 }], [{ address: '127.0.0.1', family: 4 }], [{ address: '::ffff:7f00:1', family: 6 }]];
  let calls = 0;
  const resolve: Resolver = (host, cb) => {
    if (host !== 'rebind.vendor.test') return cb(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }), []);
    cb(null, answers[Math.min(calls++, answers.length - 1)]!);
  };
  const { url } = await startApp(t, '', seedWith([`http://*.vendor.test:${v4.port}/`]), { resolve });
  for (let i = 0; i < 3; i++) {
    const res = await call(url, '/proxy/payments', { body: BODY, headers: { 'x-svc-destination': `http://rebind.vendor.test:${v4.port}/x` } });
    assert.equal(res.status, 403, res.text);
  }
  assert.equal(calls, 3, 'each attempt was checked on its own lookup');
  assert.equal(v4.connections(), 0);
});

test('a redirect from a permitted destination to a private one is relayed to the client, never followed', async (t) => {
  const v4 = (await startTarget(t, '127.0.0.1'))!;
  const v6 = await startTarget(t, '::1');
  const locations = [`http://127.0.0.1:${v4.port}/private`, `http://localhost:${v4.port}/`, 'http://169.254.169.254/latest/meta-data/', ...(v6 === null ? [] : [`http://[::1]:${v6.port}/`])];
  let served = 0;
  const sockets = new Set<Socket>();
  // The permitted destination answers with the redirect its query asks for: `?s=302&l=0`.
  const redirector = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.on('data', (d: Buffer) => {
      const line = /^[A-Z]+ \S*\?(\S*) HTTP\/1\.1\r\n/.exec(d.toString('latin1'));
      if (line === null) return; // the rest of a request already answered
      served++;
      const query = new URLSearchParams(line[1]);
      const status = query.get('s') === '307' ? '307 Temporary Redirect' : '302 Found';
      socket.write(`HTTP/1.1 ${status}\r\nlocation: ${locations[Number(query.get('l'))] ?? '/'}\r\ncontent-length: 0\r\n\r\n`);
    });
  });
  await new Promise<void>((r) => redirector.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => {
    for (const s of sockets) s.destroy();
    redirector.close(() => r());
  }));
  const origin = `http://127.0.0.1:${(redirector.address() as AddressInfo).port}`;
  const { url } = await startApp(t, `egress:\n  - { name: vendor, destination: "${origin}/v1", configuration: payments }\n`, seedWith([`${origin}/`]));
  let relayed = 0;
  for (const [l, location] of locations.entries()) {
    for (const status of [302, 307]) {
      const query = `?s=${status}&l=${l}`;
      for (const [path, headers] of [
        ['/proxy/payments', { 'x-svc-authorization': KEYS.owner, 'x-svc-destination': `${origin}/start${query}` }],
        [`/egress/vendor/start${query}`, {}],
      ] as const) {
        // This test's own client must not follow the redirect either.
        const res = await fetch(`${url}${path}`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/json', ...headers }, body: BODY });
        await res.arrayBuffer();
        assert.equal(res.status, status, `${path} → ${location}`);
        assert.equal(res.headers.get('location'), location);
        assert.ok(res.headers.get('x-svc-request-id'));
        relayed++;
      }
    }
  }
  assert.equal(served, relayed, 'each request reached the permitted destination once');
  assert.equal(v4.connections(), 0, 'the private target was never connected to');
  assert.equal(v6?.connections() ?? 0, 0);
  console.log(`RELIABILITY ${JSON.stringify({ part: 'ssrf-redirect', redirectsRelayed: relayed, privateConnections: v4.connections() + (v6?.connections() ?? 0) })}`);
});

test('positive control: the same private destinations are reachable when an allowlist entry names the host exactly', async (t) => {
  const v4 = (await startTarget(t, '127.0.0.1'))!;
  const v6 = await startTarget(t, '::1');
  const destinations = [
    `http://localhost:${v4.port}/`,
    `http://2130706433:${v4.port}/`, // parsed as 127.0.0.1, which 127.1 also names
    `http://[::ffff:127.0.0.1]:${v4.port}/`,
    `http://0.0.0.0:${v4.port}/`,
    ...(v6 === null ? [] : [`http://[::1]:${v6.port}/`]),
  ];
  const { url } = await startApp(t, '', seedWith(destinations));
  const tried = [...destinations, `http://127.1:${v4.port}/`, `http://127.0.0.1:${v4.port}/`];
  for (const destination of tried) {
    const before = v4.requests() + (v6?.requests() ?? 0);
    const res = await call(url, '/proxy/payments', { body: BODY, headers: { 'x-svc-destination': `${destination}x` } });
    assert.equal(res.status, 200, `${destination}: ${res.text}`);
    assert.equal(res.text, '{"reached":true}');
    assert.equal(v4.requests() + (v6?.requests() ?? 0), before + 1, destination);
  }
  // Named exactly on one port, the host is still refused on another.
  const other = (await startTarget(t, '127.0.0.1'))!;
  const res = await call(url, '/proxy/payments', { body: BODY, headers: { 'x-svc-destination': `http://localhost:${other.port}/` } });
  assert.equal(res.status, 403);
  assert.equal(other.connections(), 0);
});
