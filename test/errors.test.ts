import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const source = readFileSync(new URL('../src/errors.ts', import.meta.url), 'utf8');
const doc = readFileSync(new URL('../docs/errors.md', import.meta.url), 'utf8');

test('every error code in src/errors.ts is documented in docs/errors.md with its status', () => {
  const defined = [...source.matchAll(/'(SVC_ERR_[A-Z_]+)',\s*(\d{3})/g)].map((m) => [m[1]!, m[2]!] as const);
  // ValidationError takes its code as a default parameter.
  const validation = /code = '(SVC_ERR_[A-Z_]+)'/.exec(source);
  assert.ok(validation);
  defined.push([validation[1]!, '422']);
  // Subclasses of ValidationError pass their own code.
  for (const m of source.matchAll(/super\(errors, '(SVC_ERR_[A-Z_]+)'\)/g)) defined.push([m[1]!, '422']);
  assert.ok(defined.length >= 20, `found ${defined.length} codes`);
  for (const [code, status] of defined) {
    const row = doc.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
    assert.ok(row, `${code} is not documented`);
    assert.ok(row.includes(`| ${status} |`), `${code} is documented with another status than ${status}`);
  }
  const documented = [...doc.matchAll(/\| `(SVC_ERR_[A-Z_]+)` \|/g)].map((m) => m[1]);
  for (const code of documented) assert.ok(defined.some(([c]) => c === code), `${code} is documented but not defined`);
});
