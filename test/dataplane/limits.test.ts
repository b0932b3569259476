/**
 * Bounded values (DESIGN §13): one captured value or object key larger than
 * `limits.max_value` ends the request with 413 on every path that captures values, while
 * values nobody asked for stream through whatever their size.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { ValueTooLargeError } from '../../src/errors.ts';
import { compileFieldPaths, FieldMatcher } from '../../src/fields/paths.ts';
import { JsonTransformer } from '../../src/fields/transformer.ts';
import { NdjsonTransformer } from '../../src/fields/ndjson.ts';
import type { ValueHandler } from '../../src/fields/value.ts';
import { call, startApp } from '../support/app.ts';
import { startEcho } from '../support/destinations.ts';
import { startUpstream } from '../support/upstream.ts';

const keep: ValueHandler = { replace: () => null };
const LIMITS = { value: 100, capture: 102 };

function run(make: () => { push(c: Buffer, o: Buffer[]): void; end(o: Buffer[]): void }, chunks: string[]): string {
  const t = make();
  const out: Buffer[] = [];
  for (const c of chunks) t.push(Buffer.from(c), out);
  t.end(out);
  return Buffer.concat(out).toString();
}

test('transformer: a matched value or a read key past the limit is a 413, in one chunk or many', () => {
  const big = 'x'.repeat(101);
  const json = (paths: string) => () => new JsonTransformer(compileFieldPaths(paths)!, keep, LIMITS);
  assert.throws(() => run(json('a'), [`{"a":"${big}"}`]), ValueTooLargeError);
  assert.throws(() => run(json('a'), ['{"a":"', ...big.split(''), '"}']), ValueTooLargeError);
  assert.throws(() => run(json('a'), [`{"a":[${'1,'.repeat(60)}1]}`]), ValueTooLargeError, 'a container counts whole');
  assert.throws(() => run(json('a.b'), ['{"', ...'k'.repeat(200).split(''), '":1}']), ValueTooLargeError, 'a key the paths must read');
  assert.equal(run(json('a'), [`{"a":"${'x'.repeat(100)}"}`]), `{"a":"${'x'.repeat(100)}"}`, 'exactly at the limit');
  // Values and keys nobody asked for stream through, however long.
  const huge = 'y'.repeat(10_000);
  assert.equal(run(json('a'), ['{"b":"', huge, '","c":1}']), `{"b":"${huge}","c":1}`);
  assert.equal(run(json('a'), ['{"b":{"', huge, '":1}}']), `{"b":{"${huge}":1}}`);
});

test('transformer: decrypting without paths lets a long string through instead of refusing it', () => {
  const huge = 'z'.repeat(10_000);
  const out = run(() => new JsonTransformer(FieldMatcher.anyToken(), keep, LIMITS), ['{"note":"', huge.slice(0, 5000), huge.slice(5000), '","t":"svc:1:a:b:$"}']);
  assert.equal(out, `{"note":"${huge}","t":"svc:1:a:b:$"}`);
});

test('NDJSON: a line of blanks is passed on as it arrives, never held', () => {
  const blanks = ' '.repeat(50_000);
  const out = run(() => new NdjsonTransformer(compileFieldPaths('a')!, keep, LIMITS), [blanks, blanks, '\n{"a":1}\n']);
  assert.equal(out, `${blanks}${blanks}\n{"a":1}\n`);
});

test('encrypt, /proxy, decrypt and egress answer 413 for a value past limits.max_value, and nothing is sent on', async (t) => {
  const echo = await startEcho(t);
  const { url } = await startApp(
    t,
    `limits: { max_value: 1kb }
egress:
  - { name: vendor, destination: "${echo.url}", configuration: payments, request: { decrypt: [card.number] } }`,
    undefined,
  );
  const big = 'x'.repeat(1100);
  const body = JSON.stringify({ card: { number: big }, other: 'y'.repeat(50_000) });
  const message = 'A field value exceeds the limit of 1024 bytes.';
  const encrypt = await call(url, '/api/v3/encryption/payments/encrypt', { body, headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(encrypt.status, 413);
  assert.equal(encrypt.json.message, message);
  const proxied = await call(url, '/proxy/payments', { body, headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(proxied.status, 413);
  const decrypt = await call(url, '/api/v3/encryption/payments/decrypt', { body: JSON.stringify({ card: { number: `svc:1:${'A'.repeat(2000)}:B:$` } }), headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(decrypt.status, 413);
  const egress = await fetch(`${url}/egress/vendor/charges`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ card: { number: `svc:1:${'A'.repeat(2000)}:B:$` } }) });
  assert.equal(egress.status, 413, await egress.text());
  assert.equal(echo.received.length, 0);
  // Under the limit, and a long value nobody named: fine.
  const fine = await call(url, '/api/v3/encryption/payments/encrypt', { body: JSON.stringify({ card: { number: 'x'.repeat(1000) }, other: 'y'.repeat(50_000) }), headers: { 'x-svc-fields': 'card.number' } });
  assert.equal(fine.status, 200);
});

test('the relay answers 413 for a protected value past the limit, and the application gets nothing', async (t) => {
  const app = await startUpstream(t);
  const running = await startApp(
    t,
    `limits: { max_value: 4kb }
relay:
  listen: 127.0.0.1:0
  upstream: ${app.url}
  protect: { keys: [ssn], configuration: payments }`,
  );
  const relay = `http://127.0.0.1:${(running.app.relay!.server.address() as AddressInfo).port}`;
  const res = await fetch(`${relay}/p`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"ssn":"${'1'.repeat(100_000)}"}` });
  assert.equal(res.status, 413);
  // Longer than the limit but short enough to be a token: plaintext all the same, so 413.
  const between = await fetch(`${relay}/p`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"ssn":"${'1'.repeat(5000)}"}` });
  assert.equal(between.status, 413);
  assert.equal(((await res.json()) as { message: string }).message, 'A field value exceeds the limit of 4096 bytes.');
  const unprotected = await fetch(`${relay}/p`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"note":"${'1'.repeat(100_000)}"}` });
  assert.equal(unprotected.status, 200);
  assert.equal(app.seen.length, 1, 'only the unprotected body reached the application');
  assert.equal(app.seen[0]!.body.length, 100_011);
});
