/**
 * Every spelling of a listed host reaches its rule through the egress proxy (DESIGN §15):
 * the host a client names in a CONNECT or an absolute-form request is brought to one
 * canonical form before the rules are searched, so that no spelling of a listed address
 * or name is tunnelled blind, and what is not a host at all is refused.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { fetch as undiciFetch, ProxyAgent } from 'undici';
import { startProxy, startVendor } from '../support/egress-proxy.ts';
import { startEcho } from '../support/destinations.ts';
import { CA_COMMON_NAME } from '../../src/dataplane/egress-ca.ts';
import { EgressHosts } from '../../src/dataplane/egress-hosts.ts';
import { parseAuthority } from '../../src/dataplane/egress-proxy.ts';

const TOKEN = /^svc:1:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+:\$$/;

/**
 * What the proxy did with `CONNECT <target>`: `intercepted <name>` when it answered 200
 * and then presented a leaf of its own CA (for `name`), `tunnelled` when the TLS peer was
 * someone else, or the status it refused with.
 */
function connectDecision(proxyPort: number, target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(proxyPort, '127.0.0.1', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nhost: proxy.test\r\n\r\n`));
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1] ?? `unreadable: ${head}`;
      if (status !== '200') {
        socket.destroy();
        resolve(status);
        return;
      }
      const tls = tlsConnect({ socket, rejectUnauthorized: false }, () => {
        const leaf = tls.getPeerX509Certificate()!;
        tls.destroy();
        resolve(leaf.issuer.includes(`CN=${CA_COMMON_NAME}`) ? `intercepted ${leaf.subjectAltName}` : 'tunnelled');
      });
      tls.on('error', reject);
    };
    socket.on('data', onData);
    socket.on('error', reject);
    socket.on('close', () => resolve(head === '' ? 'closed' : head.slice(0, 12)));
  });
}

test('CONNECT: every spelling of a listed address or name is intercepted, other hosts are not, and what is no host is refused with 400', async (t) => {
  const vendor = await startVendor(t);
  const P = vendor.port;
  // unknown_hosts: tunnel — a spelling that missed its rule would be tunnelled, not refused.
  const proxy = await startProxy(
    t,
    `  unknown_hosts: tunnel
  hosts:
    - { match: "127.0.0.1:${P}", configuration: payments }
    - { match: "[0::1]:${P}", configuration: payments }
    - { match: "API.Vendor.TEST.:${P}", configuration: payments }
`,
    { resolve: (host, cb) => cb(Object.assign(new Error(`no such host ${host}`), { code: 'ENOTFOUND' }), []) },
  );
  const v4 = 'intercepted IP Address:127.0.0.1';
  const v6 = 'intercepted IP Address:0:0:0:0:0:0:0:1';
  const name = 'intercepted DNS:api.vendor.test';
  const table: Array<[target: string, decision: string]> = [
    // IPv4 in every form inet_aton reads, and IPv4-mapped IPv6.
    [`127.0.0.1:${P}`, v4],
    [`127.1:${P}`, v4],
    [`127.0.1:${P}`, v4],
    [`2130706433:${P}`, v4],
    [`0x7f000001:${P}`, v4],
    [`0x7f.0.0.1:${P}`, v4],
    [`0177.0.0.1:${P}`, v4],
    [`0177.0.0.01:${P}`, v4],
    [`127.0.0.1.:${P}`, v4],
    [`[::ffff:127.0.0.1]:${P}`, v4],
    [`[::FFFF:7F00:1]:${P}`, v4],
    [`[0:0:0:0:0:ffff:7f00:0001]:${P}`, v4],
    // IPv6, compressed or not, any case.
    [`[::1]:${P}`, v6],
    [`[0:0::1]:${P}`, v6],
    [`[0000:0000:0000:0000:0000:0000:0000:0001]:${P}`, v6],
    // A name: any case, one trailing dot.
    [`api.vendor.test:${P}`, name],
    [`API.VENDOR.test:${P}`, name],
    [`api.vendor.test.:${P}`, name],
    // Near misses that are other hosts: not listed, so tunnelled — and refused there as
    // non-public (DESIGN §8) or unresolvable; none is intercepted under another's rule.
    [`127.0.0.2:${P}`, '403'],
    [`127.1:${P + 1}`, '403'],
    [`[::2]:${P}`, '403'],
    [`[::ffff:0:127.0.0.1]:${P}`, '403'],
    [`[::127.0.0.1]:${P}`, '403'],
    [`api.vendor.test.evil:${P}`, '502'],
    [`xapi.vendor.test:${P}`, '502'],
    [`127.0.0.1x:${P}`, '502'],
    // Not a host: refused before any rule is read or anything is dialled.
    [`api.vendor.test..:${P}`, '400'],
    [`.api.vendor.test:${P}`, '400'],
    [`%61pi.vendor.test:${P}`, '400'],
    [`api.vendor.test%2e:${P}`, '400'],
    [`%31%32%37.0.0.1:${P}`, '400'],
    [`[::1%25lo]:${P}`, '400'],
    [`[fe80::1%lo]:${P}`, '400'],
    [`api_vendor.test:${P}`, '400'],
    [`-api.vendor.test:${P}`, '400'],
    [`1.2.3.4.5:${P}`, '400'],
    [`999.0.0.1:${P}`, '400'],
    [`api.1:${P}`, '400'],
    [`[127.0.0.1]:${P}`, '400'],
    [`*.vendor.test:${P}`, '400'],
    [`:${P}`, '400'],
    [`[::1]:0`, '400'],
    [`api.vendor.test:${P}:${P}`, '400'],
    [`\u00e1pi.vendor.test:${P}`, '400'],
  ];
  const got: Array<[string, string]> = [];
  for (const [target] of table) got.push([target, await connectDecision(proxy.proxyPort, target)]);
  assert.deepEqual(got, table);
  assert.equal(vendor.connections, 0, 'a CONNECT alone dials nothing');
});

test('absolute-form http://: spellings of a listed address get its rules; an escaped or impossible host is 400', async (t) => {
  const echo = await startEcho(t);
  const E = echo.port;
  const proxy = await startProxy(
    t,
    `  unknown_hosts: tunnel
  hosts:
    - { match: "127.0.0.1:${E}", configuration: payments, request: { encrypt: [card.cvc] } }
`,
  );
  const agent = new ProxyAgent({ uri: proxy.proxyUrl });
  t.after(() => agent.close());
  for (const host of ['127.0.0.1', '127.1', '2130706433', '0x7f.0.0.1', '[::ffff:127.0.0.1]', '127.0.0.1.']) {
    const raw = await rawExchange(proxy.proxyPort, `POST http://${host}:${E}/charges HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 22\r\nconnection: close\r\n\r\n{"card":{"cvc":"314"}}`);
    assert.match(raw, /^HTTP\/1\.1 201 /, `${host}: ${raw}`);
    assert.match(JSON.parse(echo.received.at(-1)!.body.toString()).card.cvc, TOKEN, `${host}: the rule applied`);
  }
  const sent = echo.received.length;
  for (const host of ['%31%32%37.0.0.1', '127.0.0.1%2e', '[::1%25lo]', 'a_b.test', '1.2.3.4.5']) {
    const raw = await rawExchange(proxy.proxyPort, `GET http://${host}:${E}/x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
    assert.match(raw, /^HTTP\/1\.1 400 /, `${host}: ${raw}`);
  }
  assert.equal(echo.received.length, sent, 'nothing was sent for a host that is no host');
  // The same through a client: undici writes 127.1 as the URL parser does.
  const res = await undiciFetch(`http://127.1:${E}/charges`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body: '{"card":{"cvc":"314"}}' });
  assert.equal(res.status, 201);
  assert.match(((await res.json()) as { card: { cvc: string } }).card.cvc, TOKEN);
});

test('CONNECT targets are read as canonical hosts: the same host whatever its spelling, null for what is no host', () => {
  assert.deepEqual(parseAuthority('API.Stripe.com.:443'), { host: 'api.stripe.com', port: 443 });
  assert.deepEqual(parseAuthority('[0:0::1]:8443'), { host: '::1', port: 8443 });
  assert.deepEqual(parseAuthority('[::ffff:10.0.0.7]:443'), { host: '10.0.0.7', port: 443 });
  assert.deepEqual(parseAuthority('0x0a.0.0.7:443'), { host: '10.0.0.7', port: 443 });
  assert.deepEqual(parseAuthority('167772167:443'), { host: '10.0.0.7', port: 443 });
  assert.deepEqual(parseAuthority('xn--bcher-kva.example:443'), { host: 'xn--bcher-kva.example', port: 443 });
  for (const target of ['b\u00fccher.example:443', 'api.stripe.com:443\u0000', 'a%2eb:443', 'a b:443', '[::1]', '[]:443', 'x'.repeat(64) + '.com:443', `${'a.'.repeat(127)}a:443`]) {
    assert.equal(parseAuthority(target), null, JSON.stringify(target));
  }
});

test('host rules: exact before wildcard, the longest wildcard first, the default port per scheme, never the bare domain', () => {
  const rule = (match: string) => ({ match, configuration: 'payments', routes: [] });
  const hosts = new EgressHosts([rule('*.example.com'), rule('*.api.example.com'), rule('pay.api.example.com'), rule('plain.example.org:8080'), rule('[::1]:8443')]);
  const found = (host: string, port: number, scheme: 'https' | 'http') => hosts.find(host, port, scheme)?.match ?? null;
  assert.equal(found('pay.api.example.com', 443, 'https'), 'pay.api.example.com');
  assert.equal(found('other.api.example.com', 443, 'https'), '*.api.example.com');
  assert.equal(found('a.b.example.com', 443, 'https'), '*.example.com');
  assert.equal(found('example.com', 443, 'https'), null, 'a wildcard does not name the domain itself');
  assert.equal(found('evilexample.com', 443, 'https'), null);
  assert.equal(found('a.example.com', 80, 'http'), '*.example.com');
  assert.equal(found('a.example.com', 80, 'https'), null, 'no port: 443 for CONNECT');
  assert.equal(found('a.example.com', 8443, 'https'), null);
  assert.equal(found('plain.example.org', 8080, 'http'), 'plain.example.org:8080');
  assert.equal(found('plain.example.org', 80, 'http'), null);
  assert.equal(found('::1', 8443, 'https'), '[::1]:8443');
});

test('host rules: an exact port is preferred to the default port whatever their order; rules are compared in canonical form even when given unchecked', () => {
  const rule = (match: string) => ({ match, configuration: 'payments', routes: [] });
  const hosts = new EgressHosts([rule('api.example.net'), rule('api.example.net:443'), rule('API.Example.ORG.'), rule('[0:0::1]'), rule('2130706433:8080')]);
  const found = (host: string, port: number, scheme: 'https' | 'http') => hosts.find(host, port, scheme)?.match ?? null;
  assert.equal(found('api.example.net', 443, 'https'), 'api.example.net:443', 'the rule naming the port');
  assert.equal(found('api.example.net', 80, 'http'), 'api.example.net');
  assert.equal(found('api.example.net', 443, 'http'), 'api.example.net:443');
  assert.equal(found('api.example.org', 443, 'https'), 'api.example.org');
  assert.equal(found('::1', 443, 'https'), '[::1]');
  assert.equal(found('127.0.0.1', 8080, 'http'), '127.0.0.1:8080');
  assert.equal(found('2130706433', 8080, 'http'), null, 'find takes canonical hosts only');
  assert.throws(() => new EgressHosts([rule('api_x.example.net')]), /not a host name/);
});

test('CONNECT targets are read strictly: host:port only, lower-cased, no trailing dot', () => {
  assert.deepEqual(parseAuthority('API.Stripe.com:443'), { host: 'api.stripe.com', port: 443 });
  assert.deepEqual(parseAuthority('api.stripe.com.:443'), { host: 'api.stripe.com', port: 443 });
  assert.deepEqual(parseAuthority('[::1]:8443'), { host: '::1', port: 8443 });
  assert.deepEqual(parseAuthority('127.0.0.1:1'), { host: '127.0.0.1', port: 1 });
  for (const target of ['api.stripe.com', 'api.stripe.com:', 'api.stripe.com:0', 'api.stripe.com:65536', 'https://api.stripe.com:443', 'user@api.stripe.com:443', 'api.stripe.com:443/x', '[::1:443', '[zz]:443', 'api..stripe.com:443', ' api.stripe.com:443', 'api.stripe.com:443 ', '-x.com:443', '']) {
    assert.equal(parseAuthority(target), null, target);
  }
});

function rawExchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let got = '';
    socket.on('data', (chunk) => (got += chunk.toString()));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
  });
}
