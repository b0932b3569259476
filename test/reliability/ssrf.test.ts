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
import { isPublicAddress } from '../../src/dataplane/address-policy.ts';
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

test('isPublicAddress judges the 128-bit value: every spelling of a non-public address, and every IPv4 an IPv6 carries, is refused; public near misses stay public', () => {
  const nonPublic: Array<[string, string]> = [
    // IPv4-mapped (::ffff:0:0/96), in every spelling.
    ['mapped, dotted', '::ffff:127.0.0.1'],
    ['mapped, hex', '::ffff:7f00:1'],
    ['mapped, expanded', '0:0:0:0:0:ffff:7f00:1'],
    ['mapped, leading zeros and upper case', '0000:0000:0000:0000:0000:FFFF:7F00:0001'],
    ['mapped, upper case dotted', '::FFFF:127.0.0.1'],
    ['mapped, bracketed', '[::ffff:127.0.0.1]'],
    ['mapped, metadata address', '::ffff:169.254.169.254'],
    ['mapped, zero', '::ffff:0.0.0.0'],
    ['mapped, broadcast', '::ffff:255.255.255.255'],
    ['mapped, carrier-grade NAT', '0::ffff:100.64.0.1'],
    // IPv4-compatible (::/96), with :: and ::1 in it.
    ['compatible, dotted', '::127.0.0.1'],
    ['compatible, hex', '::7f00:1'],
    ['compatible, leading group', '0::7f00:1'],
    ['compatible, private', '::10.0.0.1'],
    ['compatible, private hex', '::a00:1'],
    ['unspecified', '::'],
    ['loopback', '::1'],
    ['loopback, expanded', '0:0:0:0:0:0:0:1'],
    ['loopback, with a zone', '::1%lo'],
    ['compatible, 0.0.0.1', '::0.0.0.1'],
    // SIIT (::ffff:0:0:0/96).
    ['SIIT, dotted', '::ffff:0:127.0.0.1'],
    ['SIIT, hex', '::ffff:0:7f00:1'],
    ['SIIT, expanded metadata', '0:0:0:0:ffff:0:a9fe:a9fe'],
    ['SIIT, private', '::ffff:0:192.168.0.1'],
    // NAT64.
    ['NAT64, dotted', '64:ff9b::127.0.0.1'],
    ['NAT64, hex', '64:ff9b::7f00:1'],
    ['NAT64, metadata', '64:ff9b::a9fe:a9fe'],
    ['NAT64, expanded upper case', '64:FF9B:0:0:0:0:0A00:0001'],
    ['NAT64 local-use, public IPv4', '64:ff9b:1::8.8.8.8'],
    ['NAT64 local-use', '64:ff9b:1:ffff::1'],
    ['NAT64 /32 outside the /96', '64:ff9b::1:808:808'],
    // Site-local and other non-global space.
    ['site-local', 'fec0::1'],
    ['site-local, upper end', 'FEFF::1'],
    ['site-local with a dotted tail', 'fec0::8.8.8.8'],
    ['link-local with a zone', 'fe80::1%eth0'],
    ['reserved fe00::/9', 'fe00::1'],
    ['unique local', 'fd12:3456::1'],
    ['multicast', 'ff02::1'],
    ['discard', '100::1'],
    ['SRv6', '5f00::1'],
    ['unassigned', '4000::1'],
    ['documentation', '2001:db8::1'],
    ['documentation (3fff::/20)', '3fff::1'],
    ['benchmarking', '2001:2::1'],
    // Teredo (2001::/32): server in bits 32-63, client inverted in the last 32.
    ['Teredo, documentation client (RFC 4380 example)', '2001:0:4136:e378:8000:63bf:3fff:fdd2'],
    ['Teredo, loopback client', '2001:0:4136:e378:8000:63bf:80ff:fffe'],
    ['Teredo, private server', '2001:0:a00:1:8000:63bf:f7f7:f7f7'],
    ['Teredo, expanded upper case', '2001:0000:0A00:0001:8000:63BF:F7F7:F7F7'],
    // 6to4 (2002::/16): bits 16-47.
    ['6to4, loopback', '2002:7f00:1::1'],
    ['6to4, private', '2002:c0a8:101::'],
    ['6to4, zero', '2002::'],
    ['6to4, metadata, expanded', '2002:a9fe:a9fe:0:0:0:0:1'],
    // Not addresses: never public.
    ['leading zeros in dotted IPv4', '::ffff:127.000.000.001'],
    ['two ::', '1::2::3'],
    ['a five-digit group', '12345::1'],
    ['octet out of range', '::ffff:127.0.0.256'],
    ['trailing dot', '::ffff:127.0.0.1.'],
    ['empty', ''],
    ['a name', 'localhost'],
    ['short IPv4', '127.1'],
    ['hex IPv4', '0x7f.0.0.1'],
    ['decimal IPv4', '2130706433'],
    ['IPv4 with leading zero', '010.0.0.1'],
    ['IPv4 with a zone', '8.8.8.8%eth0'],
    ['not hex', 'g::1'],
    ['nine groups', '1:2:3:4:5:6:7:8:9'],
    ['seven groups', '2001:4860:4860:0:0:0:8888'],
  ];
  for (const [what, address] of nonPublic) assert.equal(isPublicAddress(address), false, `${what}: ${address}`);

  const pub: Array<[string, string]> = [
    ['IPv4', '8.8.8.8'],
    ['mapped, public', '::ffff:8.8.8.8'],
    ['mapped, public hex', '::ffff:808:808'],
    ['compatible, public', '::8.8.8.8'],
    ['SIIT, public', '::ffff:0:8.8.8.8'],
    ['NAT64, public', '64:ff9b::8.8.8.8'],
    ['NAT64, public hex', '64:ff9b::808:808'],
    ['6to4, public', '2002:808:808::1'],
    ['Teredo, public server and client', '2001:0:4136:e378:8000:63bf:f7f7:f7f7'],
    ['global unicast', '2001:4860:4860::8888'],
    ['global unicast, expanded', '2001:4860:4860:0:0:0:0:8888'],
    ['global unicast, upper case with leading zeros', '2001:4860:4860:0000:0000:0000:0000:8888'.toUpperCase()],
    ['global unicast with a zone', '2606:4700:4700::1111%eth0'],
    ['global unicast, bracketed', '[2a00:1450:4001:81b::200e]'],
    ['next to documentation', '2001:db9::1'],
    ['next to 3fff::/20', '3fff:1000::1'],
    ['IPv4 next to 172.16/12', '172.32.0.1'],
    ['IPv4 next to 100.64/10', '100.128.0.1'],
  ];
  for (const [what, address] of pub) assert.equal(isPublicAddress(address), true, `${what}: ${address}`);
});
