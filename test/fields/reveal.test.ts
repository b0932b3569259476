/**
 * Masks (DESIGN §14): each preset, custom masks, separators, the rule that a mask never
 * shows a whole value, and a property: a mask shows no character outside the ones it keeps
 * and the separators, and keeps the length (in code points) of what it masks, but for the
 * email preset, which hides the length of the local part.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { Mask, MASK_PRESETS, MASK_SEPARATORS, revealHeader, type MaskSpec } from '../../src/fields/reveal.ts';

const mask = (spec: MaskSpec, value: string) => Mask.of(spec).apply(value);

test('last4 keeps the last four characters and every separator: 4111 1111 1111 1111 → •••• •••• •••• 1111', () => {
  assert.equal(mask('last4', '4111 1111 1111 1111'), '•••• •••• •••• 1111');
  assert.equal(mask('last4', '4111111111111111'), '••••••••••••1111');
  assert.equal(mask('last4', '4111-1111-1111-1111'), '••••-••••-••••-1111');
  // Separators do not count: the last four are digits, whatever the spacing before them.
  assert.equal(mask('last4', '41 11 11 11 11 11 11 1-1'), '•• •• •• •• •• •• 11 1-1');
});

test('first6last4 keeps the first six and the last four characters, separators not counted', () => {
  assert.equal(mask('first6last4', '4111 1111 1111 1234'), '4111 11•• •••• 1234');
  assert.equal(mask('first6last4', '4111111111111234'), '411111••••••1234');
});

test('ssn shows •••-••-6789', () => {
  assert.equal(mask('ssn', '123-45-6789'), '•••-••-6789');
  assert.equal(mask('ssn', '123456789'), '•••••6789');
});

test('email shows the first character of the local part, three marks, and the domain: a•••@example.com', () => {
  assert.equal(mask('email', 'ada@example.com'), 'a•••@example.com');
  assert.equal(mask('email', 'ada.lovelace+work@example.com'), 'a•••@example.com', 'the local part’s length is not shown');
  assert.equal(mask('email', 'a@example.com'), '•••@example.com', 'a one-character local part is not shown at all');
  assert.equal(mask('email', 'we"ird@x"@example.com'), 'w•••@example.com', 'split at the last @');
  // Not an address: hidden whole, separators kept.
  assert.equal(mask('email', 'not an address'), '••• •• •••••••');
  assert.equal(mask('email', '@example.com'), '@•••••••.•••', 'no local part: not an address');
});

test('custom masks: keep_first, keep_last and char; the default char is •', () => {
  assert.equal(mask({ keep_first: 2, keep_last: 0, char: '•' }, 'secret'), 'se••••');
  assert.equal(mask({ keep_first: 1, keep_last: 1, char: '*' }, 'secret'), 's****t');
  assert.equal(mask({ keep_first: 0, keep_last: 0, char: 'x' }, 'a/b.c'), 'x/x.x');
  assert.equal(mask({ keep_first: 0, keep_last: 2, char: '🔒' }, 'héllo wörld'), '🔒🔒🔒🔒🔒 🔒🔒🔒ld', 'characters are code points');
});

test('a mask never shows a whole value: one with no more characters than it keeps is hidden whole', () => {
  assert.equal(mask('last4', '1234'), '••••');
  assert.equal(mask('last4', '12345'), '•2345');
  assert.equal(mask('first6last4', '4111 1111 12'), '•••• •••• ••');
  assert.equal(mask({ keep_first: 3, keep_last: 3, char: '#' }, 'abcdef'), '######');
  assert.equal(mask('last4', ''), '');
  assert.equal(mask('last4', ' - '), ' - ', 'separators alone are all there is to show');
});

test('numbers and booleans are masked as their JSON text', () => {
  assert.equal(mask('last4', '12345678901234567890'), '••••••••••••••••7890');
  assert.equal(mask('last4', '-1234.56'), '-••34.56');
  assert.equal(mask('last4', 'true'), '••••');
});

test('x-svc-reveal is written plain, mask, redact, token', () => {
  assert.equal(revealHeader({ plain: 3, mask: 1, redact: 0, token: 2 }), 'plain=3, mask=1, redact=0, token=2');
});

// ---------------------------------------------------------------------------------------
// Property

const SEPARATORS = new Set(MASK_SEPARATORS);
const MARKS = ['•', '*', 'x', '🔒', '#'];

const specArb: fc.Arbitrary<MaskSpec> = fc.oneof(
  fc.constantFrom(...MASK_PRESETS),
  fc.record({ keep_first: fc.integer({ min: 0, max: 32 }), keep_last: fc.integer({ min: 0, max: 32 }), char: fc.constantFrom(...MARKS) }),
);

/** Strings rich in separators, digits, `@` and characters outside the BMP. */
const valueArb = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('1', '2', '9', ' ', '-', '.', '/', '@', 'a', 'é', '😀', '•', '*'), maxLength: 40 }),
  fc.emailAddress(),
);

/** What a mask may show: the characters it keeps, by position among the non-separators, and separators. */
function allowed(spec: MaskSpec, value: string): { chars: string[]; shown: boolean[] } {
  const chars = [...value];
  const significant = chars.filter((c) => !SEPARATORS.has(c)).length;
  const compiled = Mask.of(spec);
  let first = compiled.keepFirst;
  let last = compiled.keepLast;
  if (first + last >= significant) first = last = 0;
  let i = 0;
  const shown = chars.map((c) => {
    if (SEPARATORS.has(c)) return true;
    const keep = i < first || i >= significant - last;
    i++;
    return keep;
  });
  return { chars, shown };
}

test('property: a mask shows no character outside the kept positions and separators, and keeps the length (email: the domain alone)', () => {
  fc.assert(
    fc.property(specArb, valueArb, (spec, value) => {
      const out = Mask.of(spec).apply(value);
      const mark = typeof spec === 'string' ? '•' : spec.char;
      if (spec === 'email') {
        const at = value.lastIndexOf('@');
        if (at > 0) {
          const local = [...value.slice(0, at)];
          const shown = local.length > 1 ? local[0]! : '';
          // The local part's length is hidden: always three marks.
          assert.equal(out, `${shown}${mark.repeat(3)}${value.slice(at)}`);
          return;
        }
        spec = { keep_first: 0, keep_last: 0, char: '•' };
      }
      const { chars, shown } = allowed(spec, value);
      const outChars = [...out];
      assert.equal(outChars.length, chars.length, 'same length in characters');
      outChars.forEach((c, i) => {
        if (shown[i]) assert.equal(c, chars[i]);
        else assert.equal(c, mark, `position ${i} of ${JSON.stringify(value)} is hidden`);
      });
      // Never the whole value: some character that is not a separator is hidden, if there is one.
      if (chars.some((c) => !SEPARATORS.has(c))) assert.ok(shown.includes(false), `${JSON.stringify(value)} is not shown whole`);
    }),
    { numRuns: 2000 },
  );
});
