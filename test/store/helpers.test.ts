/** The store's pure helpers: no store is opened. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { slugify } from '../../src/store/classifications.ts';
import { parseDefault, parseGrants } from '../../src/store/reveal-rules.ts';

test('slugify follows DESIGN §10', () => {
  assert.equal(slugify('PHI'), 'phi');
  assert.equal(slugify('Hello, World!'), 'hello-world');
  assert.equal(slugify('  --a__b  c-- '), 'a-b-c');
  assert.equal(slugify('Café 42'), 'caf-42');
  assert.equal(slugify('!!!'), '');
});

test('stored rules that are not what the store writes fail closed: no grants, a deny default', () => {
  const good = '[{"level":"mask","mask":"last4","to":{"groups":[],"roles":[2],"users":[]}}]';
  assert.equal(parseGrants(good).length, 1);
  for (const bad of [
    '[{"level":"mask","mask":null,"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"plain","mask":"last4","to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"peek","mask":null,"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"mask","mask":{"keep_first":99,"keep_last":0,"char":"*"},"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"mask","mask":{"keep_first":0,"keep_last":0,"char":"**"},"to":{"groups":[],"roles":[2],"users":[]}}]',
    '[{"level":"token","mask":null,"to":{"groups":[],"roles":["2"],"users":[]}}]',
    `[${good.slice(1, -1)},{"level":"plain"}]`,
    'not json',
    '{}',
  ]) {
    assert.deepEqual(parseGrants(bad), [], bad);
  }
  assert.deepEqual(parseDefault('token', null), { level: 'token', mask: null });
  assert.deepEqual(parseDefault('mask', '"email"'), { level: 'mask', mask: 'email' });
  for (const [level, mask] of [['plain', null], ['mask', null], ['mask', '"nope"'], ['token', '"last4"']] as const) {
    assert.deepEqual(parseDefault(level, mask), { level: 'deny', mask: null }, `${level} ${mask}`);
  }
});
