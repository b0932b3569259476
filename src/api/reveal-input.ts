/**
 * The reveal rules of a classification in a request body (DESIGN §14): `reveal`, a list of
 * grants `{to: {users, roles, groups}, level, mask}` that replaces the stored one whole,
 * and `default` with `default_mask`. `to.users` and `to.roles` take ids, as the
 * classification's own `users` and `roles` do; `to.groups` provider group ids. Every
 * failure is reported under its own key (`reveal.0.level`, `reveal.2.to.users.1`), and
 * keys the API does not know inside a grant or a mask are refused: a misspelt `keep_lst`
 * must not quietly become a mask that keeps nothing, nor a misspelt `levle` a grant of
 * nothing.
 */
import { DEFAULT_LEVELS, MASK_KEEP_MAX, MASK_PRESETS, REVEAL_LEVELS, DEFAULT_MASK_CHAR, type DefaultLevel, type MaskSpec, type RevealLevel } from '../fields/reveal.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import { hasInvisibleText, hasUnsafeText, unsafeTextMessage } from '../store/identity-text.ts';
import type { RevealDefault, RevealGrant } from '../store/reveal-rules.ts';
import { attributeName, type Validator } from './validation.ts';

/** Bounds a request's grants, as the member lists are bounded. */
export const REVEAL_MAX = 100;
const AUDIENCE_MAX = 1000;
const GROUP_ID_MAX = 255;

const GRANT_KEYS = new Set(['to', 'level', 'mask']);
const AUDIENCE_KEYS = new Set(['users', 'roles', 'groups']);
const MASK_KEYS = new Set(['keep_first', 'keep_last', 'char']);

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** `reveal`: the grants, or undefined when not sent (null counts as not sent) or invalid. */
export function revealGrants(v: Validator, store: Store): RevealGrant[] | undefined {
  if (v.input['reveal'] === null) return undefined;
  // A grant that failed is left out of the list; the 422 then stops the request before it is used.
  return v.array('reveal', (value, key) => grant(v, store, value, key), { max: REVEAL_MAX });
}

/**
 * `default` and `default_mask`: the mask goes with `default: mask` in the same request,
 * and that needs one (a PATCH that changes the mask sends both). Undefined when neither
 * is sent (null counts as not sent) or they fail.
 */
export function revealDefault(v: Validator): RevealDefault | undefined {
  const levelSent = v.has('default') && v.input['default'] !== null;
  const maskSent = v.has('default_mask') && v.input['default_mask'] !== null;
  if (!levelSent && !maskSent) return undefined;
  const level = levelSent ? v.oneOf('default', DEFAULT_LEVELS) : undefined;
  if (level !== 'mask') {
    if (maskSent && (level !== undefined || !levelSent)) v.fail('default_mask', 'The default mask field is prohibited unless default is mask.');
    return level === undefined || maskSent ? undefined : { level: level as DefaultLevel, mask: null };
  }
  if (!maskSent) {
    v.fail('default_mask', 'The default mask field is required when default is mask.');
    return undefined;
  }
  const mask = maskSpec(v, v.input['default_mask'], 'default_mask');
  return mask === undefined ? undefined : { level: 'mask', mask };
}

function grant(v: Validator, store: Store, value: unknown, key: string): RevealGrant | undefined {
  if (!isRecord(value)) {
    v.fail(key, `The ${attributeName(key)} field must be an array.`);
    return undefined;
  }
  let ok = unknownKeys(v, value, GRANT_KEYS, key);
  const level = grantLevel(v, value['level'], `${key}.level`);
  const to = audience(v, store, value['to'], `${key}.to`);
  let mask: MaskSpec | null = null;
  const maskKey = `${key}.mask`;
  const maskValue = value['mask'];
  if (level === 'mask') {
    if (maskValue === undefined || maskValue === null || maskValue === '') {
      v.fail(maskKey, `The ${attributeName(maskKey)} field is required when ${attributeName(`${key}.level`)} is mask.`);
      ok = false;
    } else {
      const spec = maskSpec(v, maskValue, maskKey);
      if (spec === undefined) ok = false;
      else mask = spec;
    }
  } else if (level !== undefined && maskValue !== undefined && maskValue !== null) {
    v.fail(maskKey, `The ${attributeName(maskKey)} field is prohibited unless ${attributeName(`${key}.level`)} is mask.`);
    ok = false;
  }
  if (!ok || level === undefined || to === undefined) return undefined;
  return { to, level, mask };
}

function grantLevel(v: Validator, value: unknown, key: string): RevealLevel | undefined {
  if (value === undefined || value === null || value === '') {
    v.fail(key, `The ${attributeName(key)} field is required.`);
    return undefined;
  }
  if (typeof value !== 'string' || !(REVEAL_LEVELS as readonly string[]).includes(value)) {
    v.fail(key, `The selected ${attributeName(key)} is invalid.`);
    return undefined;
  }
  return value as RevealLevel;
}

function audience(v: Validator, store: Store, value: unknown, key: string): RevealGrant['to'] | undefined {
  if (value === undefined || value === null) {
    v.fail(key, `The ${attributeName(key)} field is required.`);
    return undefined;
  }
  if (!isRecord(value)) {
    v.fail(key, `The ${attributeName(key)} field must be an array.`);
    return undefined;
  }
  let ok = unknownKeys(v, value, AUDIENCE_KEYS, key);
  const users = idList(v, value['users'], `${key}.users`, (id) => stateOf(store).user(id) !== undefined);
  const roles = idList(v, value['roles'], `${key}.roles`, (id) => stateOf(store).role(id) !== undefined);
  const groups = groupList(v, value['groups'], `${key}.groups`);
  if (users === undefined || roles === undefined || groups === undefined) ok = false;
  if (!ok) return undefined;
  // A grant to nobody is a mistake, not a rule: it would change what no one sees.
  if (users!.length + roles!.length + groups!.length === 0) {
    v.fail(key, `The ${attributeName(key)} field must name at least one user, role or group.`);
    return undefined;
  }
  return { users: [...new Set(users)], roles: [...new Set(roles)], groups: [...new Set(groups)] };
}

function idList(v: Validator, value: unknown, key: string, exists: (id: number) => boolean): number[] | undefined {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) {
    v.fail(key, `The ${attributeName(key)} field must be an array.`);
    return undefined;
  }
  if (value.length > AUDIENCE_MAX) {
    v.fail(key, `The ${attributeName(key)} field must not have more than ${AUDIENCE_MAX} items.`);
    return undefined;
  }
  const check = v.existingId(exists);
  const out: number[] = [];
  let ok = true;
  value.forEach((item, i) => {
    const id = check(item, `${key}.${i}`);
    if (id === undefined) ok = false;
    else out.push(id);
  });
  return ok ? out : undefined;
}

function groupList(v: Validator, value: unknown, key: string): string[] | undefined {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) {
    v.fail(key, `The ${attributeName(key)} field must be an array.`);
    return undefined;
  }
  if (value.length > AUDIENCE_MAX) {
    v.fail(key, `The ${attributeName(key)} field must not have more than ${AUDIENCE_MAX} items.`);
    return undefined;
  }
  const out: string[] = [];
  let ok = true;
  value.forEach((item, i) => {
    const at = `${key}.${i}`;
    if (typeof item !== 'string' || item === '') {
      v.fail(at, `The ${attributeName(at)} field must be a string.`);
      ok = false;
    } else if ([...item].length > GROUP_ID_MAX) {
      v.fail(at, `The ${attributeName(at)} field must not be greater than ${GROUP_ID_MAX} characters.`);
      ok = false;
    } else if (hasUnsafeText(item)) {
      v.fail(at, unsafeTextMessage(attributeName(at)));
      ok = false;
    } else {
      out.push(item);
    }
  });
  return ok ? out : undefined;
}

/** A preset name, or `{keep_first, keep_last, char}` (each optional: 0, 0, `•`). */
function maskSpec(v: Validator, value: unknown, key: string): MaskSpec | undefined {
  if (typeof value === 'string') {
    if ((MASK_PRESETS as readonly string[]).includes(value)) return value as MaskSpec;
    v.fail(key, `The selected ${attributeName(key)} is invalid.`);
    return undefined;
  }
  if (!isRecord(value)) {
    v.fail(key, `The selected ${attributeName(key)} is invalid.`);
    return undefined;
  }
  let ok = unknownKeys(v, value, MASK_KEYS, key);
  const first = keepCount(v, value['keep_first'], `${key}.keep_first`);
  const last = keepCount(v, value['keep_last'], `${key}.keep_last`);
  const char = maskChar(v, value['char'], `${key}.char`);
  if (first === undefined || last === undefined || char === undefined) ok = false;
  return ok ? { keep_first: first!, keep_last: last!, char: char! } : undefined;
}

function keepCount(v: Validator, value: unknown, key: string): number | undefined {
  if (value === undefined || value === null) return 0;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    v.fail(key, `The ${attributeName(key)} field must be an integer.`);
    return undefined;
  }
  if (value < 0) {
    v.fail(key, `The ${attributeName(key)} field must be at least 0.`);
    return undefined;
  }
  if (value > MASK_KEEP_MAX) {
    v.fail(key, `The ${attributeName(key)} field must not be greater than ${MASK_KEEP_MAX}.`);
    return undefined;
  }
  return value;
}

function maskChar(v: Validator, value: unknown, key: string): string | undefined {
  if (value === undefined || value === null) return DEFAULT_MASK_CHAR;
  if (typeof value !== 'string') {
    v.fail(key, `The ${attributeName(key)} field must be a string.`);
    return undefined;
  }
  if ([...value].length !== 1) {
    v.fail(key, `The ${attributeName(key)} field must be 1 characters.`);
    return undefined;
  }
  // One that shows as nothing, or moves the text around, would misrepresent the value's shape.
  if (hasUnsafeText(value) || hasInvisibleText(value)) {
    v.fail(key, `The ${attributeName(key)} field must be a visible character.`);
    return undefined;
  }
  return value;
}

function unknownKeys(v: Validator, value: Record<string, unknown>, known: ReadonlySet<string>, key: string): boolean {
  let ok = true;
  for (const name of Object.keys(value)) {
    if (known.has(name)) continue;
    v.fail(`${key}.${name}`, `The ${attributeName(`${key}.${name}`)} field is prohibited.`);
    ok = false;
  }
  return ok;
}
