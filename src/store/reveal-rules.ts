/**
 * A classification's reveal rules (DESIGN §14) as the store keeps them: its grants as one
 * JSON column (`classifications.reveal`), its default level and, for `default: mask`, the
 * mask of the default. Grants name users and roles by id and groups by provider group id,
 * as the member tables do.
 *
 * The stored text is read strictly. A column that does not hold what this module writes
 * (edited by hand, damaged) yields no grants and a `deny` default: it fails closed, so the
 * classification reveals nothing to anyone who is not a member.
 */
import {
  DEFAULT_LEVELS,
  MASK_KEEP_MAX,
  MASK_PRESETS,
  REVEAL_LEVELS,
  type CustomMask,
  type DefaultLevel,
  type MaskSpec,
  type RevealLevel,
} from '../fields/reveal.ts';

export interface RevealAudience {
  readonly users: readonly number[];
  readonly roles: readonly number[];
  /** Provider group ids. */
  readonly groups: readonly string[];
}

export interface RevealGrant {
  readonly to: RevealAudience;
  readonly level: RevealLevel;
  /** The mask of a `mask` grant; null for every other level. */
  readonly mask: MaskSpec | null;
}

export interface RevealDefault {
  readonly level: DefaultLevel;
  /** The mask of `default: mask`; null otherwise. */
  readonly mask: MaskSpec | null;
}

export const DENY_DEFAULT: RevealDefault = Object.freeze({ level: 'deny', mask: null });

/** Keys in canonical (sorted) order at every depth, so the text is the snapshot's too. */
export function grantsText(grants: readonly RevealGrant[]): string {
  return JSON.stringify(grants.map((g) => ({ level: g.level, mask: maskJson(g.mask), to: { groups: g.to.groups, roles: g.to.roles, users: g.to.users } })));
}

export function maskText(mask: MaskSpec | null): string | null {
  return mask === null ? null : JSON.stringify(maskJson(mask));
}

function maskJson(mask: MaskSpec | null): MaskSpec | null {
  if (mask === null || typeof mask === 'string') return mask;
  return { char: mask.char, keep_first: mask.keep_first, keep_last: mask.keep_last };
}

/** The grants of a `reveal` column; none when it holds anything else. */
export function parseGrants(text: string): RevealGrant[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return [];
  }
  if (!Array.isArray(value)) return [];
  const grants: RevealGrant[] = [];
  for (const item of value) {
    const grant = toGrant(item);
    if (grant === null) return [];
    grants.push(grant);
  }
  return grants;
}

/** The default of the two default columns; `deny` when they hold anything else. */
export function parseDefault(level: string, mask: string | null): RevealDefault {
  if (!(DEFAULT_LEVELS as readonly string[]).includes(level)) return DENY_DEFAULT;
  if (level !== 'mask') return mask === null ? { level: level as DefaultLevel, mask: null } : DENY_DEFAULT;
  const spec = mask === null ? null : parseMask(mask);
  return spec === null ? DENY_DEFAULT : { level: 'mask', mask: spec };
}

function parseMask(text: string): MaskSpec | null {
  try {
    return toMask(JSON.parse(text));
  } catch {
    return null;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function toGrant(value: unknown): RevealGrant | null {
  if (!isRecord(value) || !isRecord(value['to'])) return null;
  const level = value['level'];
  if (typeof level !== 'string' || !(REVEAL_LEVELS as readonly string[]).includes(level)) return null;
  const { users, roles, groups } = value['to'];
  if (!isIdList(users) || !isIdList(roles) || !Array.isArray(groups) || !groups.every((g) => typeof g === 'string')) return null;
  const mask = level === 'mask' ? toMask(value['mask']) : null;
  if (level === 'mask' ? mask === null : value['mask'] !== null) return null;
  return { to: { users, roles, groups: groups as string[] }, level: level as RevealLevel, mask };
}

function isIdList(value: unknown): value is number[] {
  return Array.isArray(value) && value.every((id) => Number.isSafeInteger(id) && (id as number) > 0);
}

/** A preset name, or a custom mask within the bounds the API and the seed enforce. */
export function toMask(value: unknown): MaskSpec | null {
  if (typeof value === 'string') return (MASK_PRESETS as readonly string[]).includes(value) ? (value as MaskSpec) : null;
  if (!isRecord(value)) return null;
  const { keep_first: first, keep_last: last, char } = value;
  const inRange = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0 && (n as number) <= MASK_KEEP_MAX;
  if (!inRange(first) || !inRange(last) || typeof char !== 'string' || [...char].length !== 1) return null;
  const mask: CustomMask = { keep_first: first, keep_last: last, char };
  return mask;
}
