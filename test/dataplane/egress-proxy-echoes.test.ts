/**
 * Near misses of the echo guard through a running egress proxy (DESIGN §13, §15): a vendor
 * answer that repeats a decrypted value in a spelling an application's HTTP or JSON library
 * reads back as the value must be refused (502) like the plain echo, and nothing of it may
 * reach the application.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { deflateSync, gunzipSync, gzipSync } from 'node:zlib';
import { fetch as undiciFetch, ProxyAgent } from 'undici';
import { startProxy, startVendor, tokensFor } from '../support/egress-proxy.ts';

const CARD = '4242 4242 4242 4242';
const EMAIL = 'jenny.rosen@example.com';
const NAME = 'Jürgen Müller-Šťastný';

type Answer = (form: URLSearchParams, res: ServerResponse) => void;

/**
 * A vendor that answers each request with `answers` in turn, behind a proxy whose host rule
 * decrypts `card[number]` (`card`, CARD unless given), `email` and `name` (with `response`
 * as its response rule, if given); sends one decrypting request per answer and returns what the application got
 * for each.
 */
async function answersThroughProxy(t: TestContext, answers: readonly Answer[], { response = '', card = CARD }: { response?: string; card?: string } = {}): Promise<Array<{ status: number; body: Buffer; headers: Headers }>> {
  let next = 0;
  const vendor = await startVendor(t, (request, res) => answers[next++]!(new URLSearchParams(request.body), res));
  const proxy = await startProxy(t, `  hosts:
    - match: 127.0.0.1:${vendor.port}
      configuration: payments
      request: { decrypt: ["card[number]", email, name] }
${response === '' ? '' : `      response: ${response}\n`}`);
  const tokens = await tokensFor(proxy.url, { card: { number: card }, who: { email: EMAIL, name: NAME } }, 'card.number,who.email,who.name');
  const body = new URLSearchParams({ 'card[number]': tokens.card.number, email: tokens.who.email, name: tokens.who.name }).toString();
  const agent = new ProxyAgent({ uri: proxy.proxyUrl, requestTls: { ca: proxy.caPem } });
  t.after(() => agent.close());
  const got = [];
  for (let i = 0; i < answers.length; i++) {
    const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/customers`, { method: 'POST', dispatcher: agent, redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body });
    got.push({ status: res.status, body: Buffer.from(await res.arrayBuffer()), headers: res.headers });
  }
  assert.equal(vendor.received.length, answers.length);
  assert.ok(vendor.received.every((r) => new URLSearchParams(r.body).get('name') === NAME), 'the vendor got the plaintext each time');
  return got;
}

function assertRefused(got: { status: number; body: Buffer }, name: string): void {
  assert.equal(got.status, 502, name);
  assert.deepEqual(JSON.parse(got.body.toString()), { message: 'The upstream response could not be transformed.' }, name);
}

test('regression: a decrypted value repeated in a response header NAME is refused, as in a header value', async (t) => {
  const got = await answersThroughProxy(t, [
    (form, res) => {
      res.setHeader(`x-card-${form.get('card[number]')!.replaceAll(' ', '')}`, 'seen');
      res.setHeader('content-type', 'application/json');
      res.end('{}');
    },
    (form, res) => {
      res.setHeader(`x-${form.get('email')!.replace('@', '-at-')}`, '1');
      res.setHeader('content-type', 'application/json');
      res.end('{}');
    },
    (_form, res) => {
      res.setHeader('x-card-4242', 'seen');
      res.setHeader('content-type', 'application/json');
      res.end('{}');
    },
  ]);
  assertRefused(got[0]!, 'the card number as a header name');
  assert.equal(got[0]!.headers.get('x-card-4242424242424242'), null);
  // The e-mail with its "@" written otherwise is not the value: what is compared is the value's spelling.
  assert.equal(got[1]!.status, 200, 'a name that holds no decrypted value passes');
  assert.equal(got[2]!.status, 200, 'four digits of the number are no echo');
});

/** What PHP's htmlentities() writes: every character with a named reference as that name (HTML5 names). */
function htmlEntities(text: string): string {
  const names: Record<string, string> = { ü: '&uuml;', Š: '&Scaron;', ť: '&tcaron;', ý: '&yacute;' };
  return [...text].map((c) => names[c] ?? c).join('');
}

test('regression: a decrypted value with accented letters written as named HTML references (&uuml;, &Scaron;) is refused', async (t) => {
  const page = (body: string) => (res: ServerResponse) => {
    res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' });
    res.end(`<html><body><p>No customer named ${body}.</p></body></html>`);
  };
  const got = await answersThroughProxy(t, [
    (form, res) => page(htmlEntities(form.get('name')!))(res),
    // HTML 4 names, written in another case than their letter's: &UUML; is no reference.
    (form, res) => page(form.get('name')!.replace('ü', '&uuml;').replace('Š', '&Scaron;').replace('ť', '&#357;'))(res),
    (form, res) => page(form.get('name')!.replace('ü', '&UUML;'))(res),
    (form, res) => page(form.get('name')!.replace('ü', '&Uuml;'))(res),
  ]);
  assertRefused(got[0]!, 'HTML5 names (&uuml; &Scaron; &tcaron; &yacute;)');
  assertRefused(got[1]!, 'HTML 4 names and a numeric reference');
  for (const [i, what] of [[2, '&UUML;'], [3, '&Uuml; (Ü, another letter than ü)']] as const) {
    assert.equal(got[i]!.status, 400, `${what} is not the value`);
  }
});

/** `text` in windows-1252 (ISO-8859-1 for the characters they share), `?` for what it cannot write, as a legacy encoder does. */
function windows1252(text: string): Buffer {
  return Buffer.from([...text].map((c) => {
    const code = c.codePointAt(0)!;
    if (code < 0x80 || (code >= 0xa0 && code <= 0xff)) return code;
    return c === 'Š' ? 0x8a : 0x3f;
  }));
}

test('regression: a decrypted value with accented letters repeated in ISO-8859-1 / windows-1252 bytes, in an answer that names no charset, is refused', async (t) => {
  // Python's requests reads text/* without a charset as ISO-8859-1, browsers as windows-1252:
  // to them these bytes are the value.
  const got = await answersThroughProxy(t, [
    (form, res) => {
      res.writeHead(400, { 'content-type': 'text/html' });
      res.end(Buffer.concat([Buffer.from('<p>No customer named '), windows1252(form.get('name')!), Buffer.from('.</p>')]));
    },
    (form, res) => {
      res.writeHead(302, { location: `https://vendor.invalid/retry?name=${[...windows1252(form.get('name')!)].map((b) => `%${b.toString(16)}`).join('')}` });
      res.end();
    },
    (form, res) => {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(windows1252(`Dear ${form.get('name')!.slice(0, 6)}, try again`));
    },
  ]);
  assertRefused(got[0]!, 'raw windows-1252 bytes in a body');
  assertRefused(got[1]!, 'percent-escaped ISO-8859-1 bytes in a Location');
  assert.equal(got[1]!.headers.get('location'), null);
  assert.equal(got[2]!.status, 400, 'six letters of the name are no echo');
});

function utf16be(text: string): Buffer {
  return Buffer.from(text, 'utf16le').swap16();
}

function utf32le(text: string): Buffer {
  const out = Buffer.alloc([...text].length * 4);
  [...text].forEach((c, i) => out.writeUInt32LE(c.codePointAt(0)!, i * 4));
  return out;
}

test('regression: a decrypted value repeated in UTF-16 or UTF-32 JSON that names no charset is refused', async (t) => {
  // JSON readers (Python's json and requests, Jackson) tell UTF-16 and UTF-32 from UTF-8 by
  // a byte-order mark or the zero bytes of the first characters (RFC 4627 §3), whatever the
  // content type says: to them these answers hold the e-mail.
  const error = (form: URLSearchParams) => JSON.stringify({ error: { message: `No such customer: ${form.get('email')}` } });
  const got = await answersThroughProxy(t, [
    (form, res) => {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end(Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(error(form), 'utf16le')]));
    },
    (form, res) => {
      res.writeHead(404);
      res.end(utf16be(error(form)));
    },
    (form, res) => {
      res.writeHead(404, { 'content-type': 'application/octet-stream' });
      res.end(utf32le(error(form)));
    },
    // A binary answer with zero bytes that holds no value passes.
    (_form, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(Buffer.concat([Buffer.from([0, 0, 0, 0x18]), utf16be('ftypisom jenny.rosen'), Buffer.alloc(64)]));
    },
  ]);
  assertRefused(got[0]!, 'UTF-16LE with a byte-order mark, as text/plain');
  assertRefused(got[1]!, 'UTF-16BE without a mark, no content type');
  assertRefused(got[2]!, 'UTF-32LE, as application/octet-stream');
  assert.equal(got[3]!.status, 200, 'zero bytes alone are no echo');
});

test('regression: a rule with its own response encrypt list still refuses an answer that repeats a decrypted value elsewhere', async (t) => {
  // `response: { encrypt: [...] }` names what else to encrypt in the answer; it is no opt-out
  // of the echo guard (`passthrough` is).
  const got = await answersThroughProxy(
    t,
    [
      (form, res) => {
        res.writeHead(402, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'cus_1', error: { message: `Your card number ${form.get('card[number]')} is incorrect.` } }));
      },
      (form, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'cus_1', email: form.get('email') }));
      },
      (_form, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'cus_1', phone: '+1 555 0100' }));
      },
    ],
    { response: '{ encrypt: [email, phone] }' },
  );
  assertRefused(got[0]!, 'the card number in an error message');
  const reEncrypted = JSON.parse(got[1]!.body.toString()) as { id: string; email: string };
  assert.equal(got[1]!.status, 200, 'the e-mail at a path the rule encrypts is a token');
  assert.match(reEncrypted.email, /^svc:1:/);
  const clean = JSON.parse(got[2]!.body.toString()) as { phone: string };
  assert.equal(got[2]!.status, 200);
  assert.match(clean.phone, /^svc:1:/, 'the rule\'s own field is encrypted as before');
});

test('regression: a token of an object or array is guarded leaf by leaf: a vendor that repeats one of its strings or numbers is refused', async (t) => {
  let answer: (card: { number: string; holder: { name: string }; exp: number[] }, res: ServerResponse) => void = () => {};
  const vendor = await startVendor(t, (request, res) => answer((JSON.parse(request.body) as { card: never }).card, res));
  const proxy = await startProxy(t, `  hosts:
    - { match: "127.0.0.1:${vendor.port}", configuration: payments, request: { decrypt: [card] } }
`);
  // The whole card is one token: it decrypts to the object.
  const card = { number: '4242424242424242', cvc: '314', holder: { name: 'Jenny Rosen-Smith' }, exp: [12, 2034] };
  const token = (await tokensFor(proxy.url, { card } as never, 'card')).card as string;
  assert.match(token, /^svc:1:/);
  const agent = new ProxyAgent({ uri: proxy.proxyUrl, requestTls: { ca: proxy.caPem } });
  t.after(() => agent.close());
  const send = async () => {
    const res = await undiciFetch(`https://127.0.0.1:${vendor.port}/v1/payment_methods`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: token }) });
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()), headers: res.headers };
  };
  answer = (c, res) => res.writeHead(402, { 'content-type': 'application/json' }).end(JSON.stringify({ error: `card ${c.number} declined` }));
  assertRefused(await send(), 'a string of the object');
  answer = (c, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<p>Thanks, ${c.holder.name}</p>`);
  assertRefused(await send(), 'a nested string');
  answer = (_c, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'pm_1', last4: '4242', exp_year: 2034, name_on_file: 'Jenny' }));
  const ok = await send();
  assert.equal(ok.status, 200, 'parts shorter than 8 characters are no echo');
  assert.equal(vendor.received[0]!.body, JSON.stringify({ card }), 'the vendor got the object');
});

/** CONNECT to `target`, TLS with the installation CA, then `request` as written; what came back. */
function rawInTunnel(proxyPort: number, target: string, ca: string, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(proxyPort, '127.0.0.1', () => socket.write(`CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n\r\n`));
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (!head.startsWith('HTTP/1.1 200')) {
        socket.destroy();
        resolve(head);
        return;
      }
      const tls = tlsConnect({ socket, ca, host: target.slice(0, target.lastIndexOf(':')) }, () => tls.write(request));
      let got = '';
      tls.on('data', (d: Buffer) => (got += d.toString('latin1')));
      tls.on('error', reject);
      tls.on('close', () => resolve(got));
    };
    socket.on('data', onData);
    socket.on('error', reject);
  });
}

test('regression: a request whose rules decrypt is refused (403) when its path could reach another endpoint than the route it matched', async (t) => {
  const vendor = await startVendor(t);
  const proxy = await startProxy(t, `  hosts:
    - match: 127.0.0.1:${vendor.port}
      configuration: payments
      routes:
        - match: { method: POST, path: /v1/payment_methods }
          request: { decrypt: ["card[number]"] }
`);
  const token = (await tokensFor(proxy.url, { card: { number: CARD } }, 'card.number')).card.number as string;
  const body = `card%5Bnumber%5D=${token}`;
  const post = (path: string) =>
    rawInTunnel(proxy.proxyPort, `127.0.0.1:${vendor.port}`, proxy.caPem, `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1:${vendor.port}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
  // Each reads as /v1/payment_methods to the proxy, and as another path to a vendor that
  // does not resolve dot segments, decodes once more, or splits at an escaped "/".
  for (const path of ['/v1/customers/%2e%2e/payment_methods', '/v1/customers/../payment_methods', '/v1/x/.%2E/payment_methods', '/v1/x/..;/payment_methods', '/v1/./payment_methods', '/v1/x%2F..%2Fpayment_methods']) {
    const answer = await post(path);
    assert.match(answer, /^HTTP\/1\.1 (403|400) /, path);
  }
  assert.equal(vendor.received.length, 0, 'no plaintext was sent for a path the vendor could read otherwise');
  // The route's own path, and a query with what would be unsafe in a path, are sent.
  assert.match(await post('/v1/payment_methods'), /^HTTP\/1\.1 200 /);
  assert.match(await post('/v1/payment_methods?next=%2e%2e%2Fx'), /^HTTP\/1\.1 200 /);
  assert.equal(vendor.received.length, 2);
  assert.equal(new URLSearchParams(vendor.received[0]!.body).get('card[number]'), CARD);
  // A request that decrypts nothing is passed as it is written, tokens and all: with
  // nothing decrypted, no reading of its path can hand a vendor endpoint a plaintext.
  for (const path of ['/v1/files/a%2Fb', '/v1/%252e%252e/payment_methods']) {
    assert.match(await post(path), /^HTTP\/1\.1 200 /, path);
    assert.equal(vendor.received.at(-1)!.url, path);
    assert.equal(new URLSearchParams(vendor.received.at(-1)!.body).get('card[number]'), token, path);
  }
});

test('regression: a number decrypted with or without separators is refused when the vendor repeats it grouped otherwise (4242 4242…, 4242-4242…, 123-45-6789)', async (t) => {
  const receipt = (text: string) => (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<p>${text}</p><p>2026-11-28 10:03:02, order 1234 5678</p>`);
  const group = (digits: string, size: number, sep: string) => digits.match(new RegExp(`.{1,${size}}`, 'g'))!.join(sep);
  const sentPlain = await answersThroughProxy(
    t,
    [
      (form, res) => receipt(`Card ${group(form.get('card[number]')!, 4, ' ')}`)(res),
      (form, res) => receipt(`Card ${group(form.get('card[number]')!, 4, '-')}`)(res),
      (form, res) => receipt(`Card ${group(form.get('card[number]')!, 4, ' - ')}`)(res),
      (form, res) => receipt(`Card ending ${form.get('card[number]')!.slice(-4)}, ${form.get('card[number]')!.slice(0, 4)} ${form.get('card[number]')!.slice(4, 8)}`)(res),
    ],
    { card: '4242424242424242' },
  );
  assertRefused(sentPlain[0]!, 'sent without separators, echoed with spaces');
  assertRefused(sentPlain[1]!, 'echoed with dashes');
  assertRefused(sentPlain[2]!, 'echoed with runs of separators');
  assert.equal(sentPlain[3]!.status, 200, 'eight of its digits and dates beside other numbers are no echo');
  const ssn = await answersThroughProxy(t, [(form, res) => receipt(`SSN on file: ${form.get('card[number]')!.replace(/^(\d{3})(\d{2})(\d{4})$/, '$1-$2-$3')}`)(res)], { card: '123456789' });
  assertRefused(ssn[0]!, '123456789 echoed as 123-45-6789');
  const sentSpaced = await answersThroughProxy(t, [(form, res) => receipt(`Card ${form.get('card[number]')!.replaceAll(' ', '.')}`)(res)]);
  assertRefused(sentSpaced[0]!, 'sent with spaces, echoed with dots');
  const phone = await answersThroughProxy(t, [(_form, res) => receipt('We will call +14155550100')(res), (_form, res) => receipt('We will call +1-415-555-0100')(res), (_form, res) => receipt('We will call 555-0100')(res)], { card: '+1 (415) 555-0100' });
  assertRefused(phone[0]!, 'a phone number sent grouped, echoed as its digits');
  assertRefused(phone[1]!, 'echoed grouped otherwise');
  assert.equal(phone[2]!.status, 200, 'its last seven digits are no echo');
});

test('regression: a decrypted value repeated base64-encoded (a JWT the vendor issues, a Basic credential, a data: URL) is refused', async (t) => {
  const b64url = (text: string) => Buffer.from(text).toString('base64url');
  const got = await answersThroughProxy(t, [
    (form, res) => {
      const token = [b64url('{"alg":"HS256","typ":"JWT"}'), b64url(JSON.stringify({ sub: 'cus_1', email: form.get('email'), iat: 1764324000 })), b64url('signature')].join('.');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id_token: token }));
    },
    (form, res) => res.writeHead(401, { 'www-authenticate': 'Basic realm="x"', 'x-tried': `Basic ${Buffer.from(`${form.get('email')}:hunter2`).toString('base64')}` }).end(),
    (form, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<a href="data:text/plain;base64,${Buffer.from(`Card: ${form.get('card[number]')}\n`).toString('base64')}">receipt</a>`),
    (_form, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id_token: [b64url('{"alg":"HS256"}'), b64url(JSON.stringify({ sub: 'cus_1', email: 'someone.else@example.com' })), b64url('sig')].join('.') })),
  ]);
  assertRefused(got[0]!, 'base64url inside a JWT');
  assertRefused(got[1]!, 'base64 in a header');
  assertRefused(got[2]!, 'base64 in a data: URL');
  assert.equal(got[3]!.status, 200, 'base64 of other values passes');
});

test('regression: a decrypted value inside a gzip or zlib file the vendor answers with (application/gzip, no content-encoding) is refused', async (t) => {
  const csv = (form: URLSearchParams) => `id,email\ncus_1,${form.get('email')}\n`;
  const got = await answersThroughProxy(t, [
    (form, res) => res.writeHead(200, { 'content-type': 'application/gzip', 'content-disposition': 'attachment; filename=export.csv.gz' }).end(gzipSync(csv(form))),
    (form, res) => res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(deflateSync(csv(form))),
    (_form, res) => res.writeHead(200, { 'content-type': 'application/gzip' }).end(gzipSync('id,email\ncus_2,someone.else@example.com\n')),
  ]);
  assertRefused(got[0]!, 'a .csv.gz export');
  assertRefused(got[1]!, 'a zlib stream');
  assert.equal(got[2]!.status, 200, 'a compressed file without the value passes');
  assert.equal(gunzipSync(got[2]!.body).toString(), 'id,email\ncus_2,someone.else@example.com\n');
});

test('regression: a decrypted value written with JavaScript escape() (%uXXXX beside %XX) is refused', async (t) => {
  const got = await answersThroughProxy(t, [
    (form, res) => res.writeHead(302, { location: `/retry?name=${escape(form.get('name')!)}` }).end(),
    (form, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<script>var who = unescape("${escape(form.get('name')!)}");</script>`),
    (form, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<script>var who = unescape("${escape(form.get('name')!.slice(0, 6))}");</script>`),
  ]);
  assertRefused(got[0]!, 'in a Location');
  assertRefused(got[1]!, 'in a script');
  assert.equal(got[2]!.status, 200, 'six letters of the name are no echo');
});

test('regression: a code of letters and digits (an IBAN) is refused when the vendor repeats it grouped otherwise or without its spaces', async (t) => {
  const text = (body: string) => (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/plain' }).end(body);
  const got = await answersThroughProxy(
    t,
    [
      (form, res) => text(`Mandate for ${form.get('card[number]')!.replaceAll(' ', '')} created`)(res),
      (form, res) => text(`IBAN: ${form.get('card[number]')!.toLowerCase().replaceAll(' ', '-')}`)(res),
      (form, res) => text(`IBAN ending ${form.get('card[number]')!.slice(-7)}, bank DE89 3704`)(res),
    ],
    { card: 'DE89 3704 0044 0532 0130 00' },
  );
  assertRefused(got[0]!, 'without its spaces');
  assertRefused(got[1]!, 'in lower case, grouped with dashes');
  assert.equal(got[2]!.status, 200, 'parts of it are no echo');
});
