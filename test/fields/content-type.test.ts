import assert from 'node:assert/strict';
import { test } from 'node:test';
import { detectFormat, FORM_FORMAT, JSON_FORMAT, parseContentType } from '../../src/fields/formats.ts';

test('a content type reads the same the first time, when remembered, and past the memory of recent types', () => {
  const cases: [string, { media: string; charset: string }][] = [
    ['application/json', { media: 'application/json', charset: 'absent' }],
    ['Application/JSON ; Charset="UTF-8"', { media: 'application/json', charset: 'utf-8' }],
    ['application/json; charset=utf8', { media: 'application/json', charset: 'utf-8' }],
    ['application/json; charset=latin1', { media: 'application/json', charset: 'other' }],
    // Two charset parameters: readers disagree on which counts.
    ['application/json; charset=utf-8; charset=utf-8', { media: 'application/json', charset: 'other' }],
    ['application/json; x="a;charset=latin1"', { media: 'application/json', charset: 'absent' }],
    ['text/plain; charset="utf\\-8"', { media: 'text/plain', charset: 'utf-8' }],
  ];
  for (let pass = 0; pass < 2; pass++) {
    for (const [text, expected] of cases) assert.deepEqual({ ...parseContentType(text) }, expected, `${text} (pass ${pass})`);
  }
  // Enough other spellings to empty the memory, then the same answers again.
  for (let i = 0; i < 200; i++) assert.equal(parseContentType(`application/x-${i}; charset=utf-8`)?.media, `application/x-${i}`);
  for (const [text, expected] of cases) assert.deepEqual({ ...parseContentType(text) }, expected, `${text} (after 200 others)`);
  // Too long to keep: parsed each time, alike.
  const long = `application/json; ${'x=1; '.repeat(60)}charset=utf-16`;
  for (let pass = 0; pass < 2; pass++) assert.deepEqual({ ...parseContentType(long) }, { media: 'application/json', charset: 'other' });
  // The first of repeated headers; none at all.
  assert.equal(parseContentType(['application/x-www-form-urlencoded', 'application/json'])?.media, 'application/x-www-form-urlencoded');
  assert.equal(parseContentType(undefined), null);
});

test('an answer handed out cannot be changed for the next request of that type', () => {
  const first = parseContentType('application/json; charset=latin1')!;
  assert.throws(() => {
    (first as { charset: string }).charset = 'utf-8';
  }, TypeError);
  assert.equal(detectFormat('application/json; charset=latin1', undefined), 'unreadable');
  assert.equal(detectFormat('application/json', undefined), JSON_FORMAT);
  assert.equal(detectFormat('application/x-www-form-urlencoded', 'gzip'), 'unreadable');
  assert.equal(detectFormat('application/x-www-form-urlencoded', undefined), FORM_FORMAT);
});
