import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compileFieldPaths, FieldMatcher } from '../../src/fields/paths.ts';
import { JsonTransformer, transformBuffer, type FieldValue, type ValueHandler } from '../../src/fields/transformer.ts';
import { DepthExceededError, InvalidJsonError } from '../../src/errors.ts';
import { rng, spell, split, type Json } from '../support/json-gen.ts';

const json = fc.jsonValue({ stringUnit: 'grapheme', maxDepth: 6 }) as fc.Arbitrary<Json>;
const container = fc.oneof(fc.array(json, { maxLength: 6 }), fc.dictionary(fc.string({ unit: 'grapheme', maxLength: 6 }), json, { maxKeys: 6 })) as fc.Arbitrary<Json>;

/** A handler that records what it saw and replaces each value by a label. */
class Labeller implements ValueHandler {
  seen: Array<{ path: string; kind: string; value: unknown }> = [];
  replace(v: FieldValue): Buffer | null {
    this.seen.push({ path: v.path(), kind: v.kind, value: JSON.parse(v.raw.toString('utf8')) });
    if (v.kind === 'z') return null;
    return Buffer.from(JSON.stringify(`#${v.kind}`));
  }
}

const keep: ValueHandler = { replace: () => null };

function run(chunks: readonly Buffer[], matcher: FieldMatcher, handler: ValueHandler): Buffer {
  const t = new JsonTransformer(matcher, handler);
  const out: Buffer[] = [];
  for (const c of chunks) t.push(c, out);
  t.end(out);
  return Buffer.concat(out);
}

type Seg = string | null; // null is the wildcard
function kindOf(v: Json): string {
  if (v === null) return 'z';
  if (typeof v === 'string') return 's';
  if (typeof v === 'number') return 'n';
  if (typeof v === 'boolean') return 'b';
  return 'j';
}

/** Reference semantics of DESIGN §6 on a parsed value: returns the transformed copy. */
function reference(v: Json, paths: Seg[][], seen: Array<{ path: string; kind: string; value: unknown }>, at: string[] = []): Json {
  if (at.length > 0 && paths.some((p) => p.length === 0)) {
    seen.push({ path: at.join('.'), kind: kindOf(v), value: v });
    return v === null ? null : `#${kindOf(v)}`;
  }
  if (v === null || typeof v !== 'object') return v;
  const step = (key: string): Seg[][] => paths.filter((p) => p.length > 0 && (p[0] === null || p[0] === key)).map((p) => p.slice(1));
  if (Array.isArray(v)) return v.map((x, i) => reference(x, step(String(i)), seen, [...at, String(i)]));
  const out: { [k: string]: Json } = {};
  for (const [k, x] of Object.entries(v)) {
    const value = reference(x, step(k), seen, [...at, k.replace(/[\\.*[\]]/g, (c) => `\\${c}`)]);
    Object.defineProperty(out, k, { value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** Path sets drawn from the document's own keys, so they hit often. */
function pathsFor(doc: Json, r: () => number): Seg[][] {
  const keys: string[] = [];
  const walk = (v: Json) => {
    if (v && typeof v === 'object') {
      if (Array.isArray(v)) v.forEach((x, i) => { keys.push(String(i)); walk(x); });
      else for (const [k, x] of Object.entries(v)) { keys.push(k); walk(x); }
    }
  };
  walk(doc);
  const paths: Seg[][] = [];
  const count = 1 + Math.floor(r() * 4);
  for (let i = 0; i < count; i++) {
    const len = 1 + Math.floor(r() * 3);
    const p: Seg[] = [];
    for (let j = 0; j < len; j++) p.push(r() < 0.25 || keys.length === 0 ? null : keys[Math.floor(r() * keys.length)]!);
    paths.push(p);
  }
  return paths;
}

function header(paths: Seg[][]): string {
  return paths.map((p) => p.map((s) => (s === null ? '*' : s.replace(/[\\.*[\]]/g, (c) => `\\${c}`))).join('.')).join(',');
}

test('with nothing matched the output is byte-identical, however it is chunked', () => {
  fc.assert(fc.property(container, fc.integer(), (doc, seed) => {
    const r = rng(seed);
    const bytes = Buffer.from(spell(doc, r));
    const matcher = compileFieldPaths('no.such.path')!;
    assert.deepEqual(run([bytes], matcher, keep), bytes);
    assert.deepEqual(run(split(bytes, r), matcher, keep), bytes);
  }), { numRuns: 400 });
});

test('matched values are exactly those the path rules select, and nothing else changes', () => {
  fc.assert(fc.property(container, fc.integer(), (doc, seed) => {
    const r = rng(seed);
    const paths = pathsFor(doc, r);
    // Commas and whitespace cannot be written in a path; skip such keys.
    fc.pre(paths.every((p) => p.every((s) => s === null || (s !== '' && !/[,\s]/.test(s)))));
    const bytes = Buffer.from(spell(doc, r));
    const matcher = compileFieldPaths(header(paths))!;
    const want: Array<{ path: string; kind: string; value: unknown }> = [];
    const expected = reference(doc, paths, want);
    const whole = new Labeller();
    const out = run([bytes], matcher, whole);
    assert.deepEqual(JSON.parse(out.toString('utf8')), expected);
    assert.deepEqual(whole.seen, want);
    const chunked = new Labeller();
    assert.deepEqual(run(split(bytes, r), matcher, chunked), out, 'chunking changes nothing');
    assert.deepEqual(chunked.seen, want);
  }), { numRuns: 400 });
});

test('bytes outside matched values are preserved exactly', () => {
  const doc = '{ "big": 12345678901234567890, "f":1.10,"nz":-0.0, "e":"\\u00e9\\/\\"", "emoji":"😀\\ud83d\\ude00",\n\t"secret" : "x", "k":[1 ,2] }';
  const out = transformBuffer(Buffer.from(doc), compileFieldPaths('secret')!, new Labeller()).toString();
  assert.equal(out, doc.replace('"x"', '"#s"'));
});

test('the raw bytes of a matched value are handed over exactly', () => {
  const seen: string[] = [];
  const h: ValueHandler = { replace: (v) => (seen.push(`${v.kind}${v.escaped ? '!' : ''}:${v.raw.toString()}`), null) };
  transformBuffer(Buffer.from('{"a":1.10,"b":"q\\n","c":{ "x" : [ 1 ] },"d":false,"e":null,"f":"plain"}'), compileFieldPaths('a,b,c,d,e,f')!, h);
  assert.deepEqual(seen, ['n:1.10', 's!:"q\\n"', 'j:{ "x" : [ 1 ] }', 'b:false', 'z:null', 's:"plain"']);
});

test('a path naming an array encrypts it whole; tags.* reaches each element', () => {
  const body = Buffer.from('{"tags":["a","b"]}');
  const whole = new Labeller();
  assert.equal(transformBuffer(body, compileFieldPaths('tags')!, whole).toString(), '{"tags":"#j"}');
  const each = new Labeller();
  assert.equal(transformBuffer(body, compileFieldPaths('tags.*')!, each).toString(), '{"tags":["#s","#s"]}');
  const index = new Labeller();
  assert.equal(transformBuffer(body, compileFieldPaths('tags.1')!, index).toString(), '{"tags":["a","#s"]}');
  assert.deepEqual(index.seen.map((s) => s.path), ['tags.1']);
});

test('the any-token matcher offers every string value, at any depth, and no keys', () => {
  const seen: string[] = [];
  const h: ValueHandler = { replace: (v) => (seen.push(`${v.path()}=${v.raw.toString()}`), null) };
  transformBuffer(Buffer.from('[{"svc:k":"svc:1:a:b:$","n":1,"in":{"x.y":["t"]}}]'), FieldMatcher.anyToken(), h);
  assert.deepEqual(seen, ['0.svc:k="svc:1:a:b:$"', '0.in.x\\.y.0="t"']);
});

function nest(depth: number): string {
  return '['.repeat(depth - 1) + '{"a":1}' + ']'.repeat(depth - 1);
}

test('depth 32 is accepted and 33 is refused, also while a value is being captured', () => {
  const m = compileFieldPaths('a')!;
  assert.equal(run([Buffer.from(nest(32))], m, keep).toString(), nest(32));
  assert.throws(() => run([Buffer.from(nest(33))], m, keep), (e) => e instanceof DepthExceededError && e.message === 'The request body exceeds the maximum depth of 32.');
  const captured = `{"a":${'['.repeat(31)}${']'.repeat(31)}}`;
  assert.doesNotThrow(() => run([Buffer.from(captured)], m, new Labeller()));
  assert.throws(() => run([Buffer.from(`{"a":${'['.repeat(32)}${']'.repeat(32)}}`)], m, new Labeller()), DepthExceededError);
});

test('accepts exactly what JSON.parse accepts (object or array roots)', () => {
  const mutate = fc.tuple(container, fc.integer(), fc.array(fc.tuple(fc.nat(), fc.constantFrom('"', ',', ':', '}', ']', '{', '[', '\\', '0', '-', '.', 'e', 'x', ' ', '\u0001', '\u00e9'), fc.boolean()), { maxLength: 3 }));
  fc.assert(fc.property(mutate, ([doc, seed, edits]) => {
    const r = rng(seed);
    let text = spell(doc, r);
    for (const [pos, ch, insert] of edits) {
      const p = pos % (text.length + 1);
      text = text.slice(0, p) + ch + text.slice(insert ? p : p + 1);
    }
    let parsed: unknown;
    let ok = true;
    try { parsed = JSON.parse(text); } catch { ok = false; }
    if (ok && (parsed === null || typeof parsed !== 'object')) ok = false;
    let mine = true;
    try { run(split(Buffer.from(text), r), compileFieldPaths('x')!, keep); } catch (e) {
      if (!(e instanceof InvalidJsonError)) throw e;
      mine = false;
    }
    assert.equal(mine, ok, text);
  }), { numRuns: 2000 });
});

test('invalid UTF-8 is refused, including across chunk boundaries', () => {
  const m = compileFieldPaths('a')!;
  const good = Buffer.from('{"a":"é€😀"}');
  for (let cut = 1; cut < good.length; cut++) {
    assert.deepEqual(run([good.subarray(0, cut), good.subarray(cut)], m, keep), good);
  }
  for (const bad of [[0xc3, 0x28], [0xed, 0xa0, 0x80], [0xf0, 0x9f, 0x98], [0xc0, 0xaf], [0xff]]) {
    const body = Buffer.concat([Buffer.from('{"a":"'), Buffer.from(bad), Buffer.from('"}')]);
    assert.throws(() => run([body], m, keep), InvalidJsonError);
    assert.throws(() => run([...body].map((b) => Buffer.from([b])), m, keep), InvalidJsonError);
  }
});

test('a captured value split over many chunks is handed over whole', () => {
  const value = JSON.stringify({ deep: 'x'.repeat(5000), n: [1, 2, 3] });
  const body = Buffer.from(`{"pre":1,"a":${value},"post":"y"}`);
  const seen: string[] = [];
  const h: ValueHandler = { replace: (v) => (seen.push(v.raw.toString()), Buffer.from('0')) };
  const out = run(split(body, rng(7)), compileFieldPaths('a')!, h);
  assert.deepEqual(seen, [value]);
  assert.equal(out.toString(), '{"pre":1,"a":0,"post":"y"}');
});
