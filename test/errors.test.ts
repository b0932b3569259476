import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as catalogue from '../src/errors.ts';

const doc = readFileSync(new URL('../docs/errors.md', import.meta.url), 'utf8');

/** Arguments that build any error class of the catalogue; the first that works is used. */
const CANDIDATE_ARGS: unknown[][] = [[], [1], ['x'], [['GET']], [{ field: ['message'] }], ['x', 'y', new Error('z')]];

/** Every exported error class, built once: its code and status are read off the instance. */
function definedErrors(): Array<{ name: string; code: string; status: number | null; answered: boolean }> {
  const found: Array<{ name: string; code: string; status: number | null; answered: boolean }> = [];
  for (const [name, value] of Object.entries(catalogue)) {
    if (typeof value !== 'function' || !(value.prototype instanceof Error) || name === 'SvcError') continue;
    let instance: Error | undefined;
    for (const args of CANDIDATE_ARGS) {
      try {
        instance = new (value as new (...a: unknown[]) => Error)(...args);
        break;
      } catch {
        // try the next arguments
      }
    }
    assert.ok(instance, `${name} could not be built`);
    const code = (instance as { code?: unknown }).code;
    assert.equal(typeof code, 'string', `${name} has no code`);
    assert.match(code as string, /^SVC_ERR_[A-Z_]+$/, `${name}'s code`);
    const answered = instance instanceof catalogue.SvcError;
    found.push({ name, code: code as string, status: answered ? (instance as catalogue.SvcError).status : null, answered });
  }
  return found;
}

test('every error class the catalogue exports has an SVC_ERR_ code, documented in docs/errors.md with its status', () => {
  const defined = definedErrors();
  assert.ok(defined.length >= 25, `found ${defined.length} error classes`);
  for (const { name, code, status } of defined) {
    const row = doc.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
    assert.ok(row, `${code} (${name}) is not documented`);
    if (status !== null) assert.ok(row.includes(`| ${status} |`), `${code} is documented with another status than ${status}`);
  }
  const documented = [...doc.matchAll(/^\| `(SVC_ERR_[A-Z_]+)` \|/gm)].map((m) => m[1]);
  for (const code of documented) assert.ok(defined.some((d) => d.code === code), `${code} is documented but not defined`);
});

test('codes are unique: no two classes share one', () => {
  const codes = definedErrors().map((d) => d.code);
  assert.equal(new Set(codes).size, codes.length, codes.filter((c, i) => codes.indexOf(c) !== i).join(', '));
});

test('an answered error\'s body is its message only, plus errors on 422', () => {
  const plain = new catalogue.NotFoundError();
  assert.deepEqual(plain.body(), { message: 'Not found.' });
  const invalid = new catalogue.ValidationError({ a: ['one'], b: ['two', 'three'] });
  assert.deepEqual(invalid.body(), { message: 'one (and 2 more errors)', errors: { a: ['one'], b: ['two', 'three'] } });
});
