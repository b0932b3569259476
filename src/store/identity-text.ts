/**
 * The text rules of identities (DESIGN §13, "One identity per person"): how emails are
 * compared and stored, and which characters no human-readable name may hold. Here, below
 * everything, so the store (repositories, migrations, seed), auth and the API apply one
 * definition.
 */
import { domainToASCII } from 'node:url';

/**
 * The form an email is stored and compared in: Unicode NFKC, then case folded, then NFKC
 * again (case mapping can undo a normalisation). `\u212Aate@example.com` (KELVIN SIGN),
 * `ｋate@example.com` (fullwidth) and `Kate@Example.COM` all become `kate@example.com`.
 *
 * JavaScript has no case folding of its own; lower(upper(lower(s))) reaches the same
 * equivalence classes for what emails hold: `ß` and `ẞ` fold to `ss`, `ſ` to `s`, and `σ`
 * and final `ς` compare equal, as under Unicode's full case folding.
 */
export function normalizeEmail(email: string): string {
  const folded = email.normalize('NFKC').toLowerCase().toUpperCase().toLowerCase().normalize('NFKC');
  // The domain as DNS reads it (UTS #46): `ｅxample。com`, `bücher.example` and
  // `xn--bcher-kva.example` name one domain each, and a trailing dot names the same one.
  const at = folded.lastIndexOf('@');
  if (at === -1) return folded;
  const domain = folded.slice(at + 1).replace(/\.+$/, '');
  const ascii = domain === '' ? '' : domainToASCII(domain);
  return `${folded.slice(0, at + 1)}${ascii === '' ? domain : ascii}`;
}

/**
 * Characters that show as nothing (format and default-ignorable characters: zero-width
 * spaces and joiners, soft hyphens, …): `ad\u200Bam@example.com` looks like
 * `adam@example.com` and is another address to nobody but us, so an email may not hold one.
 */
const INVISIBLE = /[\p{Cf}\p{Default_Ignorable_Code_Point}]/u;

export function hasInvisibleText(value: string): boolean {
  return INVISIBLE.test(value);
}

/**
 * Control characters (Unicode Cc: C0, DEL, C1) and the bidirectional formatting characters
 * that reorder what follows them on screen: LRM, RLM and ALM (U+200E, U+200F, U+061C), the
 * embeddings and overrides U+202A–U+202E and the isolates U+2066–U+2069. A name holding one
 * can show as another name (`admin\u202Egnp.exe`), or break the lines of a log.
 */
const UNSAFE_TEXT = /[\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/u;

export function hasUnsafeText(value: string): boolean {
  return UNSAFE_TEXT.test(value);
}

/** The 422 message for a field that fails `hasUnsafeText`, worded like the other validation messages. */
export function unsafeTextMessage(attribute: string): string {
  return `The ${attribute} field must not contain control characters or bidirectional formatting characters.`;
}
