/**
 * Reveal levels (DESIGN §14): how much of a decrypted value a reader is shown, and the
 * masks that show part of it. The vocabulary lives here, below the store, the config
 * schema, the decision (auth/classification-access.ts) and the decrypt handler, so all of
 * them speak one language; what a level does to a value's bytes is the decrypt handler's
 * (dataplane/field-handlers.ts).
 */

/** Every level, the most revealing first. */
export const REVEAL_LEVELS = ['plain', 'mask', 'token', 'redact', 'deny'] as const;
export type RevealLevel = (typeof REVEAL_LEVELS)[number];

/**
 * What a classification's `default` may be: never `plain`, so a classification that admits
 * nobody (DESIGN §13) cannot hand its plaintext to everyone.
 */
export const DEFAULT_LEVELS = ['deny', 'token', 'redact', 'mask'] as const;
export type DefaultLevel = (typeof DEFAULT_LEVELS)[number];

/** The most revealing grant that applies wins: plain > mask > token > redact > deny. */
export const REVEAL_RANK: Readonly<Record<RevealLevel, number>> = Object.freeze({ plain: 4, mask: 3, token: 2, redact: 1, deny: 0 });

/** The levels an answer can carry (a `deny` fails the request), in `x-svc-reveal` order. */
export const ANSWER_LEVELS = ['plain', 'mask', 'redact', 'token'] as const;
export type AnswerLevel = (typeof ANSWER_LEVELS)[number];

export const MASK_PRESETS = ['last4', 'first6last4', 'email', 'ssn'] as const;
export type MaskPreset = (typeof MASK_PRESETS)[number];

/** `{keep_first, keep_last, char}` as the API, the seed and the snapshot write it. */
export interface CustomMask {
  readonly keep_first: number;
  readonly keep_last: number;
  readonly char: string;
}

export type MaskSpec = MaskPreset | CustomMask;

/** The most characters a custom mask may keep at either end. */
export const MASK_KEEP_MAX = 32;
export const DEFAULT_MASK_CHAR = '•';
/** Kept where they stand, so a masked value keeps its shape (`•••• •••• •••• 1111`). */
export const MASK_SEPARATORS = ' -./@';

/** How many characters the email preset writes for any local part: its length stays hidden. */
const EMAIL_HIDDEN = 3;

function isSeparator(ch: string): boolean {
  if (ch.length !== 1) return false;
  const c = ch.charCodeAt(0);
  return c === 0x20 || c === 0x2d || c === 0x2e || c === 0x2f || c === 0x40;
}

/**
 * A compiled mask. Characters are Unicode code points; separators (MASK_SEPARATORS) are
 * kept and do not count: `first6last4` keeps the first six and the last four digits of
 * `4111 1111 1111 1111`, whatever its spacing. A mask never shows a whole value: when the
 * characters it would keep are all the value has (`last4` of `1234`), it hides them all.
 */
export class Mask {
  readonly keepFirst: number;
  readonly keepLast: number;
  readonly char: string;
  /** The `email` preset: the local part's first character, `•••`, then `@domain`. */
  readonly email: boolean;

  private constructor(keepFirst: number, keepLast: number, char: string, email: boolean) {
    this.keepFirst = keepFirst;
    this.keepLast = keepLast;
    this.char = char;
    this.email = email;
  }

  private static readonly PRESETS: Readonly<Record<MaskPreset, Mask>> = {
    last4: new Mask(0, 4, DEFAULT_MASK_CHAR, false),
    first6last4: new Mask(6, 4, DEFAULT_MASK_CHAR, false),
    // `•••-••-6789`: the last four kept, the dashes kept as separators.
    ssn: new Mask(0, 4, DEFAULT_MASK_CHAR, false),
    email: new Mask(0, 0, DEFAULT_MASK_CHAR, true),
  };

  /** The mask of a checked spec (api/reveal-input.ts, the config schema, the store). */
  static of(spec: MaskSpec): Mask {
    if (typeof spec === 'string') return Mask.PRESETS[spec];
    return new Mask(spec.keep_first, spec.keep_last, spec.char, false);
  }

  apply(value: string): string {
    if (this.email) {
      const at = value.lastIndexOf('@');
      if (at > 0) return this.emailMask(value, at);
      // Not an address: hidden whole, as no other part of it is known to be safe to show.
      return keep(value, 0, 0, this.char);
    }
    return keep(value, this.keepFirst, this.keepLast, this.char);
  }

  private emailMask(value: string, at: number): string {
    const local = value.slice(0, at);
    const first = String.fromCodePoint(local.codePointAt(0)!);
    // A one-character local part is not shown at all: it would be the whole of it.
    const shown = first.length < local.length ? first : '';
    return shown + this.char.repeat(EMAIL_HIDDEN) + value.slice(at);
  }
}

function keep(value: string, first: number, last: number, char: string): string {
  let n = 0;
  for (const ch of value) if (!isSeparator(ch)) n++;
  if (first + last >= n) {
    first = 0;
    last = 0;
  }
  const from = n - last;
  let out = '';
  let i = 0;
  for (const ch of value) {
    if (isSeparator(ch)) {
      out += ch;
      continue;
    }
    out += i < first || i >= from ? ch : char;
    i++;
  }
  return out;
}

/** How many values an answer showed at each level: `x-svc-reveal`, the usage log, the metric. */
export interface RevealCounts {
  plain: number;
  mask: number;
  redact: number;
  token: number;
}

export function emptyCounts(): RevealCounts {
  return { plain: 0, mask: 0, redact: 0, token: 0 };
}

/** `plain=3, mask=1, redact=0, token=0` (DESIGN §14). */
export function revealHeader(counts: RevealCounts): string {
  return `plain=${counts.plain}, mask=${counts.mask}, redact=${counts.redact}, token=${counts.token}`;
}
