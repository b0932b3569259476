import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { inspect, promisify } from 'node:util';
import Stripe from 'stripe';
import { fetch as undiciFetch, ProxyAgent } from 'undici';
import { call } from '../support/app.ts';
import { sha256, startProxy, startVendor, tokensFor, type ProxyRunning } from '../support/egress-proxy.ts';
import { createCertificateAuthority, issueLeafCertificate, readCertificateAuthority } from '../../src/crypto/certificates.ts';
import { CA_COMMON_NAME } from '../../src/dataplane/egress-ca.ts';
import { startEcho } from '../support/destinations.ts';

const run = promisify(execFile);
const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;

/** `127.0.0.1:<port>` listed with a rule that decrypts the card fields of POST /v1/payment_methods. */
function stripeHost(port: number, extra = ''): string {
  return `  hosts:
    - match: 127.0.0.1:${port}
      configuration: payments
      routes:
        - match: { method: POST, path: /v1/payment_methods }
          request: { decrypt: ["card[number]", "card[cvc]"] }
${extra}`;
}

function proxyAgent(proxy: ProxyRunning): ProxyAgent {
  return new ProxyAgent({ uri: proxy.proxyUrl, requestTls: { ca: proxy.caPem } });
}

/** A stand-in vendor behind the proxy with stripeHost's rules, card tokens, and the CA file a client trusts. */
async function stripeThroughProxy(t: TestContext) {
  const vendor = await startVendor(t);
  const proxy = await startProxy(t, stripeHost(vendor.port));
  return { vendor, proxy, card: await cardTokens(proxy), caFile: join(proxy.caDir, 'egress-ca.pem') };
}

async function cardTokens(proxy: ProxyRunning): Promise<{ number: string; cvc: string }> {
  const tokens = await tokensFor(proxy.url, { card: { number: '4242424242424242', cvc: '314' } }, 'card.number,card.cvc');
  assert.match(tokens.card.number, TOKEN);
  assert.match(tokens.card.cvc, TOKEN);
  return tokens.card;
}

test('the stripe SDK creates a payment method through the proxy: the vendor gets plaintext, the SDK gets tokens back', async (t) => {
  // Like Stripe, the stand-in answers JSON; unlike it, it echoes the card fields, so the
  // re-encryption of the answer can be seen.
  const vendor = await startVendor(t, (request, res) => {
    const form = new URLSearchParams(request.body);
    res.writeHead(200, { 'content-type': 'application/json', 'request-id': 'req_1' });
    res.end(JSON.stringify({ id: 'pm_1', object: 'payment_method', type: form.get('type'), card: { number: form.get('card[number]'), cvc: form.get('card[cvc]'), exp_year: Number(form.get('card[exp_year]')) } }));
  });
  const proxy = await startProxy(t, stripeHost(vendor.port));
  const card = await cardTokens(proxy);
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const stripe = new Stripe('sk_test_123', {
    host: '127.0.0.1',
    port: vendor.port,
    protocol: 'https',
    maxNetworkRetries: 0,
    telemetry: false,
    httpClient: Stripe.createFetchHttpClient(((url: string, init: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as typeof fetch),
  });
  const created = await stripe.paymentMethods.create({ type: 'card', card: { number: card.number, cvc: card.cvc, exp_month: 12, exp_year: 2030 } });

  assert.equal(vendor.received.length, 1);
  const got = vendor.received[0]!;
  assert.equal(got.method, 'POST');
  assert.equal(got.url, '/v1/payment_methods');
  assert.equal(got.headers['authorization'], 'Bearer sk_test_123', 'the application’s own vendor credential goes through');
  const form = new URLSearchParams(got.body);
  assert.equal(form.get('card[number]'), '4242424242424242');
  assert.equal(form.get('card[cvc]'), '314');
  assert.equal(form.get('card[exp_month]'), '12');
  assert.ok(!got.body.includes('svc:1:'), 'no token reaches the vendor');

  assert.equal(created.id, 'pm_1');
  const echoed = created.card as unknown as { number: string; cvc: string; exp_year: number };
  assert.match(echoed.number, TOKEN, 'the echoed card number is a token again');
  assert.match(echoed.cvc, TOKEN);
  assert.equal(echoed.exp_year, 2030);
  const back = await call(proxy.url, '/proxy/payments', { body: JSON.stringify({ card: echoed }), headers: { 'x-svc-mode': 'decrypt' } });
  assert.deepEqual(back.json.card, { number: '4242424242424242', cvc: '314', exp_year: 2030 });
});

test('curl --proxy with the installation CA: decrypts for a listed host; a tampered token is 422 and nothing is sent', async (t) => {
  const { vendor, proxy, card, caFile } = await stripeThroughProxy(t);
  const curl = (body: string) =>
    run('/usr/bin/curl', ['-sS', '--proxy', proxy.proxyUrl, '--cacert', caFile, '-w', '\n%{http_code}', '-d', body, `https://127.0.0.1:${vendor.port}/v1/payment_methods`]);

  const ok = await curl(`type=card&card[number]=${card.number}&card[cvc]=${card.cvc}`);
  const [answer, status] = ok.stdout.split('\n');
  assert.equal(status, '200');
  assert.equal(vendor.received.length, 1);
  assert.equal(vendor.received[0]!.body, 'type=card&card[number]=4242424242424242&card[cvc]=314');
  assert.equal(JSON.parse(answer!).sha256, sha256('type=card&card[number]=4242424242424242&card[cvc]=314'), 'the vendor read the plaintext');

  const tampered = card.number.slice(0, -3) + (card.number.at(-3) === 'A' ? 'B' : 'A') + card.number.slice(-2);
  const refused = await curl(`type=card&card[number]=${tampered}&card[cvc]=${card.cvc}`);
  const [body, code] = refused.stdout.split('\n');
  assert.equal(code, '422');
  assert.match(JSON.parse(body!).message, /token/i);
  assert.equal(vendor.received.length, 1, 'nothing was sent for the tampered token');
});

test('Node fetch through an undici ProxyAgent: a JSON request decrypts by the same rule, the echoed answer is a token again', async (t) => {
  const vendor = await startVendor(t, (request, res) => {
    res.writeHead(201, { 'content-type': 'application/json', 'x-vendor': 'yes' });
    res.end(request.body);
  });
  const proxy = await startProxy(t, stripeHost(vendor.port));
  const card = await cardTokens(proxy);
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/payment_methods`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', 'x-svc-request-id': 'ep-1' },
    body: JSON.stringify({ card: { number: card.number, cvc: card.cvc, brand: 'visa' } }),
  });
  const answered = (await res.json()) as { card: { number: string; cvc: string; brand: string } };
  assert.equal(res.status, 201);
  assert.equal(res.headers.get('x-vendor'), 'yes');
  assert.equal(res.headers.get('x-svc-request-id'), 'ep-1');
  assert.equal(vendor.received[0]!.body, '{"card":{"number":"4242424242424242","cvc":"314","brand":"visa"}}');
  assert.ok(!('x-svc-request-id' in vendor.received[0]!.headers), 'x-svc- headers stay with the proxy');
  assert.match(answered.card.number, TOKEN);
  assert.match(answered.card.cvc, TOKEN);
  assert.equal(answered.card.brand, 'visa');
});

test('a listed host with no matching route passes unchanged; the metric names the host rule', async (t) => {
  const vendor = await startVendor(t);
  const proxy = await startProxy(t, stripeHost(vendor.port), { admin: true });
  const card = await cardTokens(proxy);
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const body = `card[number]=${card.number}`;
  // Another path, then another method: no route matches, and the host has no rules of its own.
  for (const [method, path] of [['POST', '/v1/customers'], ['PUT', '/v1/payment_methods']] as const) {
    const res = await undiciFetch(`https://127.0.0.1:${vendor.port}${path}?expand=x`, { method, dispatcher: agent, headers: { 'content-type': 'application/x-www-form-urlencoded' }, body });
    assert.equal(res.status, 200);
    const echoed = (await res.json()) as { path: string; sha256: string };
    assert.equal(echoed.path, path);
    assert.equal(vendor.received.at(-1)!.url, `${path}?expand=x`);
    assert.equal(vendor.received.at(-1)!.body, body, 'the token passes as it was sent');
    assert.equal(echoed.sha256, sha256(body));
  }
  await proxy.app.services.logs.flush?.();
  const metrics = await (await fetch(`${proxy.adminUrl}/metrics`)).text();
  assert.match(metrics, new RegExp(`svc_egress_proxy_requests_total\\{host_rule="127\\.0\\.0\\.1:${vendor.port}",status="200"\\} 2`));
});

test('an unlisted host is refused with 403 and nothing is dialled, by CONNECT and by absolute-form http', async (t) => {
  const vendor = await startVendor(t);
  const proxy = await startProxy(t, stripeHost(vendor.port));
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  // The same vendor by another name is another host.
  await assert.rejects(undiciFetch(`https://localhost:${vendor.port}/v1/payment_methods`, { dispatcher: agent }), (err: Error) => /Proxy response \(403\)/.test(inspect(err)));
  const plain = await rawRequest(proxy.proxyPort, `GET http://localhost:${vendor.port}/v1/x HTTP/1.1\r\nhost: localhost\r\n\r\n`);
  assert.match(plain, /^HTTP\/1\.1 403 /);
  assert.match(plain, /The egress proxy does not serve the host localhost\./);
  const connectRaw = await rawRequest(proxy.proxyPort, `CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n`);
  assert.match(connectRaw, /^HTTP\/1\.1 403 Forbidden/);
  assert.equal(vendor.connections, 0, 'the vendor was never dialled');
  assert.equal(vendor.received.length, 0);
});

test('unknown_hosts: tunnel refuses non-public addresses (DESIGN §8): by address, by a name that resolves to one, IPv4-mapped', async (t) => {
  const vendor = await startVendor(t);
  // vendor.test resolves to 127.0.0.1, which is not public; no host rule lists it.
  const proxy = await startProxy(t, `  unknown_hosts: tunnel\n  hosts: []`, {
    resolve: (host, cb) => (host === 'vendor.test' ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(Object.assign(new Error('no such host'), { code: 'ENOTFOUND' }), [])),
  });
  for (const target of [`127.0.0.1:${vendor.port}`, `vendor.test:${vendor.port}`, `[::ffff:127.0.0.1]:${vendor.port}`]) {
    const answer = await rawRequest(proxy.proxyPort, `CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n`);
    assert.match(answer, /^HTTP\/1\.1 403 /, target);
  }
  const plain = await rawRequest(proxy.proxyPort, `GET http://127.0.0.1:${vendor.port}/x HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`);
  assert.match(plain, /^HTTP\/1\.1 403 /);
  assert.equal(vendor.connections, 0);
});

/**
 * Runs support/egress-tunnel-child.ts in a network namespace of its own where 8.8.4.4 sits
 * on the loopback interface: a public address that stays on this machine. Needs root and
 * unshare; without them the test is skipped (null).
 */
async function inNetworkNamespace(t: TestContext, ...args: string[]): Promise<{ stdout: string; stderr: string } | null> {
  if (spawnSync('unshare', ['--net', 'true']).status !== 0) {
    t.skip('needs unshare --net (root) for a public address that stays on this machine');
    return null;
  }
  const child = new URL('../support/egress-tunnel-child.ts', import.meta.url).pathname;
  const script = `ip link set lo up && ip addr add 8.8.4.4/32 dev lo && exec "$0" "$1" 8.8.4.4${args.map((a) => ` ${a}`).join('')}`;
  return run('unshare', ['--net', 'sh', '-c', script, process.execPath, child], { timeout: 60_000 });
}

test('unknown_hosts: tunnel relays bytes blind to a public address, by address and by name', async (t) => {
  const ran = await inNetworkNamespace(t);
  if (ran === null) return;
  const { stdout, stderr } = ran;
  const result = JSON.parse(stdout) as { byAddress: string; byName: string };
  assert.match(result.byAddress, /^HTTP\/1\.1 200 Connection Established\r\n\r\nhello over the tunnel$/, stderr);
  assert.match(result.byName, /^HTTP\/1\.1 200 Connection Established\r\n\r\nby name too$/, stderr);
});

test('unknown_hosts: tunnel closes a tunnel that stays idle for tunnel_idle_timeout, on both sides', async (t) => {
  const ran = await inNetworkNamespace(t, 'idle');
  if (ran === null) return;
  const { stdout, stderr } = ran;
  const result = JSON.parse(stdout) as { carried: string; closedByProxy: boolean; vendorSideClosed: boolean };
  assert.match(result.carried, /^HTTP\/1\.1 200 Connection Established\r\n\r\nthen silence$/, `the tunnel worked before it went quiet: ${stderr}`);
  assert.equal(result.closedByProxy, true, 'the proxy closed the idle tunnel');
  assert.equal(result.vendorSideClosed, true, 'and its connection to the vendor');
});

test('unknown_hosts: tunnel never tunnels blind another spelling of a listed public address (a number, hex, octal, a.b.c, a trailing dot, IPv4-mapped)', async (t) => {
  const ran = await inNetworkNamespace(t, 'spellings');
  if (ran === null) return;
  const { stdout, stderr } = ran;
  const result = JSON.parse(stdout) as { listed: Record<string, string>; unlisted: string };
  assert.equal(result.unlisted, 'tunnelled', `an unlisted port of the address is tunnelled, so the spellings below would be: ${stderr}`);
  assert.equal(Object.keys(result.listed).length, 7);
  for (const [spelling, outcome] of Object.entries(result.listed)) assert.equal(outcome, 'HTTP/1.1 200 Connection Established', `${spelling} is terminated by the proxy, not tunnelled`);
});

test('a vendor certificate that fails verification is 502 and nothing is sent', async (t) => {
  // A certificate from a CA the proxy does not trust.
  const stranger = await createCertificateAuthority('not trusted');
  const leaf = await issueLeafCertificate(readCertificateAuthority(stranger.cert, stranger.key), '127.0.0.1');
  const vendor = await startVendor(t, undefined, leaf);
  const proxy = await startProxy(t, stripeHost(vendor.port));
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/payment_methods`, { method: 'POST', dispatcher: agent, body: 'a=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  const answer = await res.text();
  assert.equal(res.status, 502, answer);
  assert.equal(JSON.parse(answer).message, 'The destination could not be reached.');
  assert.equal(vendor.received.length, 0);
});

test('the CA is created on first start (directory 0700, key 0600) and kept across restarts; leaves are P-256 for the CONNECT host', async (t) => {
  const vendor = await startVendor(t);
  const proxy = await startProxy(t, stripeHost(vendor.port));
  assert.equal(statSync(proxy.caDir).mode & 0o777, 0o700);
  assert.equal(statSync(join(proxy.caDir, 'egress-ca.key')).mode & 0o777, 0o600);
  const ca = new X509Certificate(proxy.caPem);
  assert.ok(ca.ca);
  const leafPem = await new Promise<string>((resolve, reject) => {
    const socket = connect(proxy.proxyPort, '127.0.0.1', () => socket.write(`CONNECT 127.0.0.1:${vendor.port} HTTP/1.1\r\n\r\n`));
    socket.once('data', async (chunk) => {
      if (!chunk.toString().startsWith('HTTP/1.1 200')) return reject(new Error(chunk.toString()));
      const { connect: tlsConnect } = await import('node:tls');
      const tls = tlsConnect({ socket, ca: proxy.caPem, host: '127.0.0.1' }, () => {
        const cert = tls.getPeerX509Certificate()!;
        tls.destroy();
        resolve(cert.toString());
      });
      tls.on('error', reject);
    });
    socket.on('error', reject);
  });
  const leaf = new X509Certificate(leafPem);
  assert.ok(leaf.checkIssued(ca) && leaf.verify(ca.publicKey));
  assert.equal(leaf.checkIP('127.0.0.1'), '127.0.0.1');
  assert.equal(leaf.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1');
  // Restart on the same files: the same CA.
  const again = await startProxy(t, stripeHost(vendor.port), { dir: join(proxy.caDir, '..') });
  assert.equal(again.caPem, proxy.caPem);
});

test('a start after a CA rotation that stopped between its renames finishes it and signs with the new CA; a key that belongs to no certificate stops the start', async (t) => {
  const vendor = await startVendor(t);
  const first = await startProxy(t, stripeHost(vendor.port));
  const dir = join(first.caDir, '..');
  const next = await createCertificateAuthority(CA_COMMON_NAME);
  // The new certificate is in place, its key still beside the old one.
  writeFileSync(join(first.caDir, 'egress-ca.pem'), next.cert);
  writeFileSync(join(first.caDir, 'egress-ca.key.new'), next.key, { mode: 0o600 });
  const again = await startProxy(t, stripeHost(vendor.port), { dir });
  assert.equal(again.caPem, next.cert);
  assert.match(again.logs(), /a CA rotation had stopped between writing the certificate and the key; it is finished/);
  const agent = proxyAgent(again);
  t.after(() => agent.close());
  const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/x`, { dispatcher: agent });
  assert.equal(res.status, 200, 'a client trusting the new certificate accepts the leaves');
  await res.text();

  writeFileSync(join(first.caDir, 'egress-ca.key'), (await createCertificateAuthority(CA_COMMON_NAME)).key);
  await assert.rejects(startProxy(t, stripeHost(vendor.port), { dir }), /cannot be used: the key does not belong to the certificate/);
});

/**
 * Sends raw bytes to the proxy and returns its answer: until it closes the connection, or
 * with `established`, once a `200 Connection Established` has come (the tunnel is then left).
 */
function rawRequest(port: number, text: string, established = false): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let got = '';
    socket.on('data', (chunk) => {
      got += chunk.toString();
      if (established && /^HTTP\/1\.1 200 [^\r]*\r\n\r\n/.test(got)) {
        socket.destroy();
        resolve(got);
        return;
      }
      if (/\r\n\r\n/.test(got) && !/^HTTP\/1\.1 200/.test(got) && /content-length: (\d+)/i.test(got)) {
        const length = Number(/content-length: (\d+)/i.exec(got)![1]);
        if (got.length - got.indexOf('\r\n\r\n') - 4 >= length) {
          socket.destroy();
          resolve(got);
        }
      }
    });
    socket.on('end', () => resolve(got));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
  });
}


test('absolute-form http:// to a listed host applies the same rules, except that nothing is decrypted for plain http; the api log names the host rule; refused requests write none', async (t) => {
  const echo = await startEcho(t);
  const vendor = await startEcho(t);
  const proxy = await startProxy(t, `  hosts:
    - match: 127.0.0.1:${echo.port}
      configuration: payments
      request: { encrypt: [card.cvc] }
    - match: 127.0.0.1:${vendor.port}
      configuration: payments
      routes:
        - { match: { method: POST, path: /v1/** }, request: { decrypt: [card.cvc] } }
      response: { encrypt: [] }
`);
  const card = await cardTokens(proxy);
  const agent = new ProxyAgent({ uri: proxy.proxyUrl });
  t.after(() => agent.close());
  const res = await undiciFetch(`http://127.0.0.1:${echo.port}/charges?x=1`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', 'x-svc-request-id': 'ep-log-1' },
    body: JSON.stringify({ card: { cvc: '314' } }),
  });
  const answered = (await res.json()) as { card: { cvc: string } };
  assert.equal(res.status, 201);
  assert.equal(echo.received[0]!.url, '/charges?x=1');
  assert.match(JSON.parse(echo.received[0]!.body.toString()).card.cvc, TOKEN, 'encrypting rules apply over http://');
  assert.match(answered.card.cvc, TOKEN);

  // A rule that would decrypt: refused before anything is dialled, whatever the port.
  const plain = await undiciFetch(`http://127.0.0.1:${vendor.port}/v1/charges`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { cvc: card.cvc } }) });
  assert.equal(plain.status, 403);
  assert.deepEqual(await plain.json(), { message: 'Tokens are decrypted only for https: send this request to an https:// URL.' });
  const other = await undiciFetch(`http://127.0.0.1:${vendor.port}/status`, { dispatcher: agent });
  assert.equal(other.status, 201, 'a request no decrypting rule covers still passes over http:// (the echo answers 201)');
  await other.text();
  assert.equal(vendor.received.length, 1);
  assert.equal(vendor.received[0]!.url, '/status');
  const denied = await rawRequest(proxy.proxyPort, `GET http://localhost:${echo.port}/x HTTP/1.1\r\nhost: localhost\r\n\r\n`);
  assert.match(denied, /^HTTP\/1\.1 403 /);

  const logs = proxy.app.services;
  let entries: Awaited<ReturnType<typeof logs.store.logs.listApi>> = [];
  for (let i = 0; i < 100 && !entries.some((e) => e.requestId === 'ep-log-1'); i++) {
    logs.logs.flush();
    await new Promise((r) => setTimeout(r, 20));
    entries = await logs.store.logs.listApi({ limit: 100, offset: 0 });
  }
  const entry = entries.find((e) => e.requestId === 'ep-log-1');
  assert.ok(entry, JSON.stringify(entries.map((e) => e.path)));
  assert.equal(entry.path, `egress-proxy:127.0.0.1:${echo.port} POST /charges`);
  assert.equal(entry.statusCode, 201);
  assert.equal(entry.configurationId, (await logs.store.configurations.findByName('payments'))!.id);
  assert.equal(entry.destination, `http://127.0.0.1:${echo.port}`);
  assert.ok(!entries.some((e) => e.path.includes('localhost')), 'the refused request left no api log entry');
});

test('an unchanged Node application: NODE_USE_ENV_PROXY=1, HTTPS_PROXY and NODE_EXTRA_CA_CERTS, with fetch and https.request', async (t) => {
  const { vendor, proxy, card, caFile } = await stripeThroughProxy(t);
  const url = `https://127.0.0.1:${vendor.port}/v1/payment_methods`;
  const body = `card[number]=${card.number}`;
  // What an application does, knowing nothing of the sidecar.
  const app = `
    const https = require('node:https');
    const viaFetch = await (await fetch(${JSON.stringify(url)}, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: ${JSON.stringify(body)} })).json();
    const viaHttps = await new Promise((resolve, reject) => {
      const req = https.request(${JSON.stringify(url)}, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' } }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve(JSON.parse(text)));
      });
      req.on('error', reject);
      req.end(${JSON.stringify(body)});
    });
    console.log(JSON.stringify([viaFetch, viaHttps]));
  `;
  const env = { PATH: process.env['PATH'] ?? '', NODE_USE_ENV_PROXY: '1', HTTPS_PROXY: proxy.proxyUrl, NODE_EXTRA_CA_CERTS: caFile };
  const { stdout } = await run(process.execPath, ['--input-type=commonjs', '-e', `(async () => { ${app} })().catch((e) => { console.error(e); process.exit(1); })`], { env, timeout: 30_000 });
  const answers = JSON.parse(stdout) as Array<{ sha256: string }>;
  assert.deepEqual(answers.map((a) => a.sha256), [sha256('card[number]=4242424242424242'), sha256('card[number]=4242424242424242')]);
  assert.equal(vendor.received.length, 2);
});

test('Python requests with HTTPS_PROXY and REQUESTS_CA_BUNDLE, and Java HttpClient with proxy properties and a truststore', async (t) => {
  const { vendor, proxy, card, caFile } = await stripeThroughProxy(t);
  const url = `https://127.0.0.1:${vendor.port}/v1/payment_methods`;

  await t.test('python requests', async (t) => {
    if (spawnSync('python3', ['-c', 'import requests']).status !== 0) return t.skip('python3 with requests is not installed');
    const script = `import requests, sys\nr = requests.post(sys.argv[1], data={"card[number]": sys.argv[2]})\nprint(r.status_code, r.json()["sha256"])`;
    const { stdout } = await run('python3', ['-c', script, url, card.number], { env: { PATH: process.env['PATH'] ?? '', HTTPS_PROXY: proxy.proxyUrl, REQUESTS_CA_BUNDLE: caFile }, timeout: 30_000 });
    assert.equal(stdout.trim(), `200 ${sha256('card%5Bnumber%5D=4242424242424242')}`);
  });

  await t.test('java', async (t) => {
    if (spawnSync('java', ['-version']).status !== 0 || spawnSync('keytool', ['-help']).status !== 0) return t.skip('java and keytool are not installed');
    const store = join(proxy.caDir, 'truststore.p12');
    await run('keytool', ['-importcert', '-noprompt', '-alias', 'svc-egress', '-file', caFile, '-keystore', store, '-storetype', 'PKCS12', '-storepass', 'changeit']);
    const source = join(proxy.caDir, 'Vendor.java');
    writeFileSync(
      source,
      `import java.net.URI; import java.net.http.*;
public class Vendor { public static void main(String[] a) throws Exception {
  var client = HttpClient.newBuilder().proxy(java.net.ProxySelector.getDefault()).build();
  var req = HttpRequest.newBuilder(URI.create(a[0])).header("content-type", "application/x-www-form-urlencoded").POST(HttpRequest.BodyPublishers.ofString("card[number]=" + a[1])).build();
  var res = client.send(req, HttpResponse.BodyHandlers.ofString());
  System.out.println(res.statusCode() + " " + res.body());
} }`,
    );
    // Java skips the proxy for localhost and 127.* unless http.nonProxyHosts (for https too) is set empty.
    const { stdout } = await run(
      'java',
      [`-Dhttps.proxyHost=127.0.0.1`, `-Dhttps.proxyPort=${proxy.proxyPort}`, `-Djavax.net.ssl.trustStore=${store}`, '-Djavax.net.ssl.trustStorePassword=changeit', '-Dhttp.nonProxyHosts=', source, url, card.number],
      { timeout: 120_000 },
    ).catch((err: Error & { stderr?: string }) => {
      throw new Error(`java failed; vendor TLS connections so far: ${vendor.connections}; ${String(err.stderr).split('\n').filter((l) => /subject|issuer|SunCertPathBuilder|Proxy|CONNECT|anchor/i.test(l)).slice(0, 30).join('\n')}`);
    });
    assert.match(stdout.trim(), new RegExp(`^200 \\{.*"sha256":"${sha256('card[number]=4242424242424242')}"\\}$`));
  });
  assert.ok(vendor.received.every((r) => !r.body.includes('svc:1:')), 'no token reached the vendor');
});

test('query rules decrypt named query parameters before anything is sent; a tampered one is 422 with nothing sent; an echo at another path is refused (502)', async (t) => {
  const vendor = await startVendor(t, (request, res) => {
    const email = new URL(request.url, 'https://vendor.invalid').searchParams.get('email');
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ data: [{ email }] }));
  });
  const proxy = await startProxy(t, `  hosts:
    - match: 127.0.0.1:${vendor.port}
      configuration: payments
      routes:
        - match: { method: GET, path: /v1/customers }
          query: { decrypt: [email] }
`);
  const tokens = await tokensFor(proxy.url, { who: { email: 'jenny@example.com' } }, 'who.email');
  const token = tokens.who.email as string;
  assert.match(token, TOKEN);
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/customers?limit=3&email=${token}`, { dispatcher: agent });
  assert.equal(res.status, 502, 'the vendor echoes the email at data.0.email, a path the request did not decrypt: the answer is refused');
  assert.ok(!(await res.text()).includes('jenny'));
  assert.equal(vendor.received[0]!.url, '/v1/customers?limit=3&email=jenny%40example.com');

  const tampered = token.slice(0, -3) + (token.at(-3) === 'A' ? 'B' : 'A') + token.slice(-2);
  const refused = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/customers?email=${tampered}`, { dispatcher: agent });
  assert.equal(refused.status, 422);
  await refused.text();
  assert.equal(vendor.received.length, 1, 'nothing was sent for the tampered query');

  // Another path: the route does not match and the host has no rules: the token passes as it is.
  const other = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/charges?email=${token}`, { dispatcher: agent });
  await other.text();
  assert.equal(vendor.received[1]!.url, `/v1/charges?email=${token}`);
});

test('a query rule re-encrypts the value a vendor echoes at the same path', async (t) => {
  const vendor = await startVendor(t, (request, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ email: new URL(request.url, 'https://vendor.invalid').searchParams.get('email') }));
  });
  const proxy = await startProxy(t, `  hosts:
    - { match: "127.0.0.1:${vendor.port}", configuration: payments, query: { decrypt: [email] } }
`);
  const token = (await tokensFor(proxy.url, { who: { email: 'jenny@example.com' } }, 'who.email')).who.email as string;
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/customers/search?email=${token}`, { dispatcher: agent });
  const answer = (await res.json()) as { email: string };
  assert.equal(vendor.received[0]!.url, '/v1/customers/search?email=jenny%40example.com');
  assert.match(answer.email, TOKEN, 'the echoed email is a token again');
});

test('near misses of a listed host through CONNECT: case and a trailing dot match; another port, name or spelling of the address does not', async (t) => {
  const vendor = await startVendor(t);
  const proxy = await startProxy(t, `  hosts:\n    - { match: "localhost:${vendor.port}", configuration: payments }\n`);
  const cases: Array<[target: string, listed: boolean]> = [
    [`localhost:${vendor.port}`, true],
    [`LOCALHOST:${vendor.port}`, true],
    [`localhost.:${vendor.port}`, true],
    [`localhost:${vendor.port + 1}`, false],
    [`localhost:443`, false],
    [`xlocalhost:${vendor.port}`, false],
    [`localhost.evil.test:${vendor.port}`, false],
    [`127.0.0.1:${vendor.port}`, false],
    [`[::1]:${vendor.port}`, false],
    [`localhost`, false],
  ];
  for (const [target, listed] of cases) {
    const answer = await rawRequest(proxy.proxyPort, `CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n`, listed);
    if (listed) assert.match(answer, /^HTTP\/1\.1 200 Connection Established\r\n\r\n$/, target);
    else assert.match(answer, /^HTTP\/1\.1 (403|400) /, target);
  }
  assert.equal(vendor.connections, 0, 'a CONNECT alone dials nothing, listed or not');
});

test('an answer that repeats a decrypted value anywhere it cannot be encrypted again is refused with 502, and nothing of it reaches the application', async (t) => {
  type Answer = (form: URLSearchParams, res: import('node:http').ServerResponse) => void;
  const answers = new Map<string, Answer>([
    ['error message at another path', (form, res) => json(res, 402, { error: { message: `Your card number ${form.get('card[number]')} is incorrect.`, param: 'card[number]' } })],
    ['redirect with the value percent-encoded', (form, res) => {
      res.writeHead(301, { location: `https://vendor.invalid/v1/x?n=${encodeURIComponent(form.get('card[number]')!)}&e=${encodeURIComponent(form.get('email')!)}` });
      res.end();
    }],
    ['cookie', (form, res) => {
      res.writeHead(200, { 'set-cookie': `last=${form.get('card[number]')}`, 'content-type': 'application/json' });
      res.end('{}');
    }],
    ['text/html page', (form, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<html><body>you sent ${form.get('card[number]')}</body></html>`);
    }],
    ['the number without its spaces', (form, res) => json(res, 200, { fingerprint: form.get('card[number]')!.replaceAll(' ', '') })],
    ['an email in upper case, JSON-escaped', (form, res) => json(res, 200, { note: `contact <${form.get('email')!.toUpperCase()}>` })],
  ]);
  let current: Answer = () => {};
  const vendor = await startVendor(t, (request, res) => current(new URLSearchParams(request.body), res));
  const proxy = await startProxy(t, `  hosts:
    - match: 127.0.0.1:${vendor.port}
      configuration: payments
      request: { decrypt: ["card[number]", "card[cvc]", email] }
`);
  const tokens = await tokensFor(proxy.url, { card: { number: '4242 4242 4242 4242', cvc: '314' }, who: { email: 'jenny.rosen@example.com' } }, 'card.number,card.cvc,who.email');
  const body = new URLSearchParams({ 'card[number]': tokens.card.number, 'card[cvc]': tokens.card.cvc, email: tokens.who.email }).toString();
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const send = () => undiciFetch(`https://127.0.0.1:${vendor.port}/v1/payment_methods`, { method: 'POST', dispatcher: agent, redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body });
  for (const [name, answer] of answers) {
    current = answer;
    const res = await send();
    const text = await res.text();
    assert.equal(res.status, 502, name);
    assert.deepEqual(JSON.parse(text), { message: 'The upstream response could not be transformed.' }, name);
    for (const header of ['location', 'set-cookie']) assert.equal(res.headers.get(header), null, `${name}: ${header}`);
  }
  assert.equal(vendor.received.length, answers.size);
  assert.ok(vendor.received.every((r) => r.body.includes('card%5Bnumber%5D=4242+4242+4242+4242') || r.body.includes('4242 4242')), 'the vendor got the plaintext each time');

  // The same values where the request decrypted them are encrypted again, and values
  // shorter than 8 characters are not searched: a CVC's digits occur by chance in ids and
  // timestamps, and refusing those answers would refuse good ones.
  current = (form, res) => json(res, 200, { id: 'pm_1', card: { number: form.get('card[number]') }, created: 1_731_456_314, cvc_check: form.get('card[cvc]') === '314' ? 'pass' : 'fail' });
  const ok = await send();
  const answered = (await ok.json()) as { card: { number: string }; created: number; cvc_check: string };
  assert.equal(ok.status, 200);
  assert.match(answered.card.number, TOKEN);
  assert.equal(answered.created, 1_731_456_314);
  assert.equal(answered.cvc_check, 'pass');
});

function json(res: import('node:http').ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

test('the names a wildcard rule covers are dialled at public addresses only (DESIGN §8)', async (t) => {
  const vendor = await startVendor(t);
  const proxy = await startProxy(
    t,
    `  hosts:
    - { match: "*.vendor.test:${vendor.port}", configuration: payments }
`,
    // Every name under vendor.test resolves to the loopback address the stand-in listens on.
    { resolve: (host, cb) => (host.endsWith('.vendor.test') ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(Object.assign(new Error('no such host'), { code: 'ENOTFOUND' }), [])) },
  );
  const agent = proxyAgent(proxy);
  t.after(() => agent.close());
  const res = await undiciFetch(`https://api.vendor.test:${vendor.port}/v1/customers`, { dispatcher: agent });
  const text = await res.text();
  assert.equal(res.status, 403, text);
  assert.ok(!text.includes('127.0.0.1'), `the answer does not say where the name resolved: ${text}`);
  assert.equal(vendor.received.length, 0, 'nothing reached the loopback address');
});

test('an egress proxy listening beyond loopback is warned about at start: it asks no credentials', async (t) => {
  const vendor = await startVendor(t);
  const wide = await startProxy(t, stripeHost(vendor.port), { listen: '0.0.0.0:0' });
  assert.match(wide.logs(), /the egress proxy listens beyond loopback and asks no credentials/);
  const local = await startProxy(t, stripeHost(vendor.port));
  assert.doesNotMatch(local.logs(), /listens beyond loopback/);
});
