import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { FormTransformer, decodeFormBytes, dottedSegments, encodeFormBytes, nameSegments } from '../../src/fields/form.ts';
import { compileFieldPaths, FieldMatcher } from '../../src/fields/paths.ts';
import type { FieldValue, ValueHandler } from '../../src/fields/value.ts';
import { InvalidFormError, ValueTooLargeError } from '../../src/errors.ts';

/** Replaces each matched value with `<path|plaintext>` encoded back as form text. */
const labeller: ValueHandler = {
  replace: (v: FieldValue) => v.encodePlain(Buffer.from(`<${v.path()}|${v.plaintext()!.toString()}>`), 's'),
};

function run(chunks: readonly Buffer[], matcher: FieldMatcher, handler: ValueHandler = labeller, capture = Number.MAX_SAFE_INTEGER): string {
  const t = new FormTransformer(matcher, handler, { value: capture, capture });
  const out: Buffer[] = [];
  for (const c of chunks) t.push(c, out);
  t.end(out);
  return Buffer.concat(out).toString();
}

test('only the values of named parameters change; names, order and other values are copied byte for byte', () => {
  const body = 'amount=1000&card%5Bnumber%5D=4242+4242&card[cvc]=123&note=a%26b&flag&&x=';
  const out = run([Buffer.from(body)], compileFieldPaths('card.number, card.cvc')!);
  assert.equal(out, 'amount=1000&card%5Bnumber%5D=%3Ccard.number%7C4242+4242%3E&card[cvc]=%3Ccard.cvc%7C123%3E&note=a%26b&flag&&x=');
  const params = new URLSearchParams(out);
  assert.equal(params.get('card[number]'), '<card.number|4242 4242>');
  assert.equal(params.get('amount'), '1000');
});

test('a path names the parameter and everything under it: ssn matches ssn[] and ssn[0][x]; * matches one segment', () => {
  const body = 'ssn[]=1&ssn[0][x]=2&other[ssn]=3&items[0][sku]=4&items[1][sku]=5';
  const out = new URLSearchParams(run([Buffer.from(body)], compileFieldPaths('ssn, items.*.sku')!));
  assert.deepEqual(out.getAll('ssn[]'), ['<ssn.|1>']);
  assert.equal(out.get('ssn[0][x]'), '<ssn.0.x|2>');
  assert.equal(out.get('other[ssn]'), '3');
  assert.equal(out.get('items[0][sku]'), '<items.0.sku|4>');
  assert.equal(out.get('items[1][sku]'), '<items.1.sku|5>');
});

test('any chunking gives the same output', () => {
  const body = Buffer.from('a=1&card%5Bnumber%5D=4242%204242&b=%E2%82%AC&card[number]=x+y&z');
  const matcher = compileFieldPaths('card.number')!;
  const whole = run([body], matcher);
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: body.length }), { maxLength: 6 }), (cuts) => {
      const points = [...new Set(cuts)].sort((a, b) => a - b);
      const chunks: Buffer[] = [];
      let at = 0;
      for (const p of points) {
        chunks.push(body.subarray(at, p));
        at = p;
      }
      chunks.push(body.subarray(at));
      assert.equal(run(chunks, matcher), whole);
    }),
  );
});

test('tokens are recognised whether or not the form encoder escaped their ":" and "$"', () => {
  const seen: Array<string | null> = [];
  const collect: ValueHandler = { replace: (v) => (seen.push(v.token()), null) };
  run([Buffer.from('a=svc:1:AQ:Zg:$&b=svc%3A1%3AAQ%3AZg%3A%24&c=svc:1:AQ:Zg:&d=svc%3A1%3A%20%3A%24')], compileFieldPaths('a,b,c,d')!, collect);
  assert.deepEqual(seen, ['svc:1:AQ:Zg:$', 'svc:1:AQ:Zg:$', null, null]);
});

test('regression: names that `;` ends before any `=` are held together within the capture limit, not without end', () => {
  const names = Array.from({ length: 40 }, (_, i) => `n${i}`).join(';');
  const t = new FormTransformer(compileFieldPaths('ssn')!, labeller, { value: 50, capture: 50 }, { semicolons: true });
  assert.throws(() => t.push(Buffer.from(`${names}=1`), []), ValueTooLargeError);
  const short = new FormTransformer(compileFieldPaths('ssn')!, labeller, { value: 50, capture: 50 }, { semicolons: true });
  const out: Buffer[] = [];
  short.push(Buffer.from('a;b;ssn=1'), out);
  short.end(out);
  assert.match(Buffer.concat(out).toString(), /^a;b;ssn=(?!1$)/, 'a few names still pass, and the value they lead to is still read');
});

test('a name or matched value past the capture limit is a 413; an unmatched value streams whatever its size', () => {
  const big = 'x'.repeat(100);
  assert.throws(() => run([Buffer.from(`ssn=${big}`)], compileFieldPaths('ssn')!, labeller, 50), ValueTooLargeError);
  assert.throws(() => run([Buffer.from(`${big}=1`)], compileFieldPaths('ssn')!, labeller, 50), ValueTooLargeError);
  const chunks = Array.from({ length: 20 }, () => Buffer.from(big));
  assert.equal(run([Buffer.from('other='), ...chunks, Buffer.from('&ssn=1')], compileFieldPaths('ssn')!, labeller, 50), `other=${big.repeat(20)}&ssn=%3Cssn%7C1%3E`);
});

test('malformed percent-encoding or non-UTF-8 in a name or matched value is a 400', () => {
  assert.throws(() => run([Buffer.from('ss%zzn=1')], compileFieldPaths('ssn')!), InvalidFormError);
  assert.throws(() => run([Buffer.from('ssn=%E2%82')], compileFieldPaths('ssn')!), InvalidFormError);
  assert.throws(() => run([Buffer.from('ssn=1%')], compileFieldPaths('ssn')!), InvalidFormError);
});

test('name segments follow the bracket form, anything else is one segment', () => {
  assert.deepEqual(nameSegments('card[number]'), ['card', 'number']);
  assert.deepEqual(nameSegments('a[0][b]'), ['a', '0', 'b']);
  assert.deepEqual(nameSegments('tags[]'), ['tags', '']);
  assert.deepEqual(nameSegments('[x]'), ['[x]']);
  assert.deepEqual(nameSegments('a[b]c'), ['a[b]c']);
  assert.deepEqual(nameSegments('a.b'), ['a.b']);
});

test('form encoding round-trips every byte string', () => {
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme' }), (text) => {
      const bytes = Buffer.from(text);
      const encoded = encodeFormBytes(bytes);
      assert.match(encoded.toString('latin1'), /^[A-Za-z0-9*\-._+%]*$/);
      assert.deepEqual(decodeFormBytes(encoded), bytes);
      assert.equal(new URLSearchParams(`k=${encoded.toString()}`).get('k'), text);
    }),
  );
});

test('a name with a dot is read both ways: a dotted path names card.number, an escaped one the name as written', () => {
  assert.deepEqual(dottedSegments('card.number'), ['card', 'number']);
  assert.deepEqual(dottedSegments('a.b[c][d]'), ['a', 'b', 'c', 'd']);
  assert.equal(dottedSegments('card[a.b]'), null, 'a dot inside brackets is part of its segment');
  assert.equal(run([Buffer.from('card.number=1&card[number]=2&a.b=3')], compileFieldPaths('card.number')!), 'card.number=%3Ccard.number%7C1%3E&card[number]=%3Ccard.number%7C2%3E&a.b=3');
  assert.equal(run([Buffer.from('a.b=3&a[b]=4')], compileFieldPaths('a\\.b')!), 'a.b=%3Ca%5C.b%7C3%3E&a[b]=4');
});

test('bracket paths and dotted paths name the same parameters', () => {
  const body = Buffer.from('card[number]=1&items[0][sku]=2&items[1][sku]=3&tags[]=4&meta[x]=5&meta[y][z]=6');
  const dotted = run([body], compileFieldPaths('card.number, items.*.sku, tags.*, meta.*')!);
  assert.equal(run([body], compileFieldPaths('card[number], items[*][sku], tags[], meta[*]')!), dotted);
  assert.equal(run([body], compileFieldPaths('card[number], items[0][sku], items.1[sku]')!), run([body], compileFieldPaths('card.number, items.0.sku, items.1.sku')!));
  assert.equal(new URLSearchParams(dotted).get('meta[y][z]'), '<meta.y.z|6>');
});

test('decrypting without paths hands every value over, and a value too long to be a token streams on as it is', () => {
  const seen: string[] = [];
  const collect: ValueHandler = { replace: (v) => (seen.push(v.raw.toString()), null) };
  const big = 'x'.repeat(100);
  const chunks = [Buffer.from('a=svc:1:AQ:Zg:$&b='), ...Array.from({ length: 5 }, () => Buffer.from(big)), Buffer.from('&c=1')];
  assert.equal(run(chunks, FieldMatcher.anyToken(), collect, 50), `a=svc:1:AQ:Zg:$&b=${big.repeat(5)}&c=1`);
  assert.deepEqual(seen, ['svc:1:AQ:Zg:$', '1']);
  assert.equal(run([Buffer.from(`b=${big}&c=2`)], FieldMatcher.anyToken(), collect, 50), `b=${big}&c=2`);
  assert.throws(() => run([Buffer.from(`${big}=1`)], FieldMatcher.anyToken(), collect, 50), ValueTooLargeError, 'a name is still bounded');
});
