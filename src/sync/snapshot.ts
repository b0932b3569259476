/**
 * State snapshots (docs/replication.md): their wire format, and how a replica checks and
 * applies one. The control plane's side, building and caching them, is
 * snapshot-publisher.ts.
 *
 * The body is `{digest, format, mac, sections, state, version}`. Each entry of `sections`
 * is the SHA-256 of the canonical serialisation (below) of that section of `state`, and
 * `digest` covers the format, the version and those section digests, so a body cut short
 * or edited in transit fails the check instead of being half applied. `mac` makes it
 * authentic: HMAC-SHA256 (snapshot-mac.ts) over the canonical text of the whole body
 * without `mac`, under a key only holders of the master key can derive. A replica applies
 * nothing whose MAC fails, whatever its digest says.
 *
 * The control plane writes every object with its keys already in canonical order, so
 * either side gets the canonical text of a section from plain JSON.stringify; a body laid
 * out differently is still checked, by the slower canonicaliser.
 *
 * Versions only move forward on a replica, and one too far ahead of its clock is refused
 * (MAX_VERSION_LEAD_SECONDS), so no snapshot can pin a replica to a version that real
 * ones never reach.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { DEFAULT_LEVELS, MASK_KEEP_MAX, MASK_PRESETS, REVEAL_LEVELS } from '../fields/reveal.ts';
import type { Store } from '../store/db.ts';
import { SECTIONS, type SectionName, type StateChanges, type StateRows, type SyncStateRow } from '../store/replication.ts';
import type { SnapshotMac } from './snapshot-mac.ts';

/** 2: users carry no password hash, and the body carries a MAC. */
export const SNAPSHOT_FORMAT = 2;

/**
 * A replica refuses a snapshot whose version is above its clock (Unix seconds) plus this.
 * Control planes issue versions close to their clock (snapshot-publisher.ts), so only a
 * clock skew of about this much between the two can refuse a real one.
 */
export const MAX_VERSION_LEAD_SECONDS = 3600;

/** Wire names of the sections; digests list them in SECTIONS order. */
const WIRE_NAMES = {
  roles: 'roles',
  users: 'users',
  configurations: 'configurations',
  classifications: 'classifications',
  apiKeys: 'api_keys',
} as const satisfies Record<SectionName, string>;

/** The sections in canonical order: sorted by wire name, as in the body's `sections` and `state`. */
const CANONICAL_ORDER: readonly SectionName[] = [...SECTIONS].sort((a, b) => (WIRE_NAMES[a] < WIRE_NAMES[b] ? -1 : 1));

export type SectionDigests = Record<SectionName, string>;

/** A snapshot that passed every check, ready to apply. */
export interface VerifiedSnapshot {
  readonly version: number;
  readonly digest: string;
  readonly sections: SectionDigests;
  /** The state as it arrived (wire form, checked). */
  readonly state: WireState;
}

/** Why a snapshot was refused, as the `reason` label of `svc_sync_snapshots_refused_total`. */
export type RefusalReason = 'invalid' | 'mac' | 'digest' | 'version' | 'older' | 'store';

/** Why a snapshot was refused; the last good state stays. */
export class SnapshotRejectedError extends Error {
  readonly reason: RefusalReason;

  constructor(message: string, options?: { cause?: unknown }, reason: RefusalReason = 'invalid') {
    super(`snapshot rejected: ${message}`, options);
    this.name = 'SnapshotRejectedError';
    this.reason = reason;
  }
}

// ---------------------------------------------------------------------------------------
// Canonical form and digests

/**
 * JSON with object keys sorted by UTF-16 code units and no whitespace (RFC 8785 for the
 * values a snapshot holds: strings, integers, booleans, null). Both sides derive the
 * digest from this form, so it does not matter how the body was laid out in between.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + canonicalJson(value[i]);
    return out + ']';
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  let out = '{';
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    out += (i === 0 ? '' : ',') + JSON.stringify(key) + ':' + canonicalJson(record[key]);
  }
  return out + '}';
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function sectionLines(sections: SectionDigests): string {
  return SECTIONS.map((s) => `${WIRE_NAMES[s]} ${sections[s]}\n`).join('');
}

/** The digest in the body and the ETag. */
export function snapshotDigest(version: number, sections: SectionDigests): string {
  return sha256(`svc-sidecar snapshot ${SNAPSHOT_FORMAT}\nversion ${version}\n${sectionLines(sections)}`);
}

/**
 * The text a snapshot's MAC covers: the canonical form of the whole body without `mac`,
 * i.e. `{"digest":…,"format":2,"sections":{…},"state":{…},"version":…}` with the sections
 * (and their texts in `state`) sorted by wire name. `texts` are the canonical texts of the
 * sections.
 */
function macText(version: number, digest: string, sections: SectionDigests, texts: Record<SectionName, string>): string {
  return `{"digest":"${digest}","format":${SNAPSHOT_FORMAT},${bodyTail(version, sections, texts)}`;
}

function bodyTail(version: number, sections: SectionDigests, texts: Record<SectionName, string>): string {
  const digests = CANONICAL_ORDER.map((s) => `"${WIRE_NAMES[s]}":"${sections[s]}"`).join(',');
  const state = CANONICAL_ORDER.map((s) => `"${WIRE_NAMES[s]}":${texts[s]}`).join(',');
  return `"sections":{${digests}},"state":{${state}},"version":${version}}`;
}

/**
 * A snapshot's body from the canonical texts of its sections: canonical itself, with
 * `mac` in its sorted place, so removing that one member gives the text the MAC covers.
 */
export function snapshotBody(
  version: number,
  texts: Record<SectionName, string>,
  mac: SnapshotMac,
  sections: SectionDigests = sectionDigests(texts),
): { digest: string; body: Buffer } {
  const digest = snapshotDigest(version, sections);
  const signature = mac.sign(macText(version, digest, sections, texts));
  return { digest, body: Buffer.from(`{"digest":"${digest}","format":${SNAPSHOT_FORMAT},"mac":"${signature}",${bodyTail(version, sections, texts)}`) };
}

/** What the state is, independent of its version: a control plane bumps the version when this changes. */
export function contentDigest(sections: SectionDigests): string {
  return sha256(sectionLines(sections));
}

/** The SHA-256 of each section text. */
export function sectionDigests(texts: Record<SectionName, string>): SectionDigests {
  const sections = {} as SectionDigests;
  for (const section of SECTIONS) sections[section] = sha256(texts[section]);
  return sections;
}

/** A key JavaScript keeps first, in numeric order, whatever the insertion order. */
const INDEX_KEY = /^(?:0|[1-9][0-9]{0,8})$/;
/**
 * Set when sortedKeys met an index-like key: that object cannot hold its keys in canonical
 * order, so its section's text must come from canonicalJson. Read right after the
 * (synchronous) conversion of one section.
 */
let indexKeySeen = false;

/** Sorts object keys at every depth, for JSON read from a column (`extra`, group lists). */
function sortedKeys(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(sortedKeys);
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) {
    if (INDEX_KEY.test(key)) indexKeySeen = true;
    out[key] = sortedKeys((value as Record<string, unknown>)[key]);
  }
  return out;
}

const parseColumn = (text: string): unknown => sortedKeys(JSON.parse(text));

// ---------------------------------------------------------------------------------------
// Rows ⇄ wire. Binary columns travel as base64; JSON columns as the JSON they hold.

/**
 * The wire form of each section, keys in canonical (sorted) order at every level: with
 * them, JSON.stringify gives the canonical text.
 */
const TO_WIRE: { readonly [S in SectionName]: (rows: StateRows[S]) => unknown[] } = {
  roles: (rows) => rows.map((r) => ({ description: r.description, id: r.id, name: r.name, permissions: r.permissions })),
  users: (rows) =>
    rows.map((u) => ({
      created_at: u.createdAt,
      disabled: u.disabled,
      email: u.email,
      id: u.id,
      name: u.name,
      role_ids: u.roleIds,
      two_factor_enabled: u.twoFactorEnabled,
      updated_at: u.updatedAt,
    })),
  configurations: (rows) =>
    rows.map((c) => ({
      created_at: c.createdAt,
      destinations: parseColumn(c.destinations),
      deterministic: c.deterministic,
      extra: parseColumn(c.extra),
      fields: parseColumn(c.fields),
      id: c.id,
      keyring_id: c.keyringId === null ? null : c.keyringId.toString('base64'),
      keys: c.keys.map((k) => ({ created_at: k.createdAt, destroyed_at: k.destroyedAt, version: k.version, wrapped: k.wrapped.toString('base64') })),
      min_decryption_version: c.minDecryptionVersion,
      name: c.name,
      provider: c.provider,
      proxy_slug: c.proxySlug,
      type: c.type,
      updated_at: c.updatedAt,
    })),
  classifications: (rows) =>
    rows.map((c) => ({
      bg_color: c.bgColor,
      created_at: c.createdAt,
      description: c.description,
      emoji: c.emoji,
      fg_color: c.fgColor,
      id: c.id,
      name: c.name,
      provider_container_id: c.providerContainerId,
      providers: c.providers.map((p) => ({ configuration_id: p.configurationId, gws_groups: parseColumn(p.gwsGroups) })),
      reveal: parseColumn(c.reveal),
      reveal_default: c.revealDefault,
      reveal_default_mask: c.revealDefaultMask === null ? null : parseColumn(c.revealDefaultMask),
      role_ids: c.roleIds,
      slug: c.slug,
      updated_at: c.updatedAt,
      user_ids: c.userIds,
    })),
  apiKeys: (rows) =>
    rows.map((k) => ({
      configurations: parseColumn(k.configurations),
      created_at: k.createdAt,
      id: k.id,
      key_hash: k.keyHash.toString('base64'),
      name: k.name,
      permissions: parseColumn(k.permissions),
      prefix: k.prefix,
      revoked_at: k.revokedAt,
      status: k.status,
      updated_at: k.updatedAt,
      user_id: k.userId,
    })),
};

function sectionToWire<S extends SectionName>(section: S, rows: StateRows[S]): unknown[] {
  return TO_WIRE[section](rows);
}

const id = z.number().int().min(1);
const str = z.string();
const nullableStr = z.string().nullable();
const timestamp = z.string().min(1);
const base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/);
const jsonValue = z.json();

/** Reveal rules as store/reveal-rules.ts writes them: a replica applies only what it can read back. */
const maskWire = z.union([
  z.enum(MASK_PRESETS),
  z.strictObject({ char: z.string().refine((c) => [...c].length === 1), keep_first: z.number().int().min(0).max(MASK_KEEP_MAX), keep_last: z.number().int().min(0).max(MASK_KEEP_MAX) }),
]);
const revealGrantWire = z
  .strictObject({
    level: z.enum(REVEAL_LEVELS),
    mask: maskWire.nullable(),
    to: z.strictObject({ groups: z.array(str), roles: z.array(id), users: z.array(id) }),
  })
  .refine((g) => (g.level === 'mask') === (g.mask !== null), { path: ['mask'], message: 'a mask grant needs a mask, any other none' });

const wireSchema = z.strictObject({
  format: z.literal(SNAPSHOT_FORMAT),
  version: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  mac: z.string().regex(/^[0-9a-f]{64}$/),
  sections: z.strictObject(Object.fromEntries(SECTIONS.map((s) => [WIRE_NAMES[s], z.string().regex(/^[0-9a-f]{64}$/)])) as Record<string, z.ZodString>),
  state: z.strictObject({
    roles: z.array(z.strictObject({ id, name: str, description: nullableStr, permissions: z.array(str) })),
    users: z.array(
      z.strictObject({
        id,
        name: str,
        email: str,
        disabled: z.boolean(),
        two_factor_enabled: z.boolean(),
        role_ids: z.array(id),
        created_at: timestamp,
        updated_at: timestamp,
      }),
    ),
    configurations: z.array(
      z.strictObject({
        id: str.min(1),
        name: str,
        type: z.enum(['encryption', 'provider']),
        provider: nullableStr,
        proxy_slug: nullableStr,
        keyring_id: base64.nullable(),
        deterministic: z.boolean(),
        min_decryption_version: id,
        destinations: z.array(str),
        fields: z.array(str),
        extra: z.record(z.string(), jsonValue),
        created_at: timestamp,
        updated_at: timestamp,
        keys: z.array(z.strictObject({ version: id, wrapped: base64, created_at: timestamp, destroyed_at: timestamp.nullable() })),
      }),
    ),
    classifications: z.array(
      z.strictObject({
        id,
        name: str,
        slug: str,
        description: nullableStr,
        bg_color: str,
        fg_color: str,
        emoji: nullableStr,
        provider_container_id: nullableStr,
        created_at: timestamp,
        updated_at: timestamp,
        user_ids: z.array(id),
        role_ids: z.array(id),
        providers: z.array(z.strictObject({ configuration_id: str, gws_groups: z.array(jsonValue) })),
        // Absent from a control plane of an earlier build: no grants, and `deny`.
        reveal: z.array(revealGrantWire).optional(),
        reveal_default: z.enum(DEFAULT_LEVELS).optional(),
        reveal_default_mask: maskWire.nullable().optional(),
      }).refine((c) => (c.reveal_default === 'mask') === (c.reveal_default_mask != null), { path: ['reveal_default_mask'], message: 'a mask default needs a mask, any other none' }),
    ),
    api_keys: z.array(
      z.strictObject({
        id: str.min(1),
        name: str,
        prefix: str,
        key_hash: base64,
        user_id: id,
        permissions: z.array(str),
        configurations: z.array(str),
        status: z.enum(['active', 'revoked']),
        created_at: timestamp,
        updated_at: timestamp,
        revoked_at: timestamp.nullable(),
      }),
    ),
  }),
});

type WireState = z.output<typeof wireSchema>['state'];
type WireRow<S extends SectionName> = WireState[(typeof WIRE_NAMES)[S]][number];

const FROM_WIRE: { readonly [S in SectionName]: (row: WireRow<S>) => StateRows[S][number] } = {
  roles: (r) => ({ id: r.id, name: r.name, description: r.description, permissions: r.permissions }),
  users: (u) => ({
    id: u.id,
    name: u.name,
    email: u.email,
    disabled: u.disabled,
    twoFactorEnabled: u.two_factor_enabled,
    roleIds: u.role_ids,
    createdAt: u.created_at,
    updatedAt: u.updated_at,
  }),
  configurations: (c) => ({
    id: c.id,
    name: c.name,
    type: c.type,
    provider: c.provider,
    proxySlug: c.proxy_slug,
    keyringId: c.keyring_id === null ? null : Buffer.from(c.keyring_id, 'base64'),
    deterministic: c.deterministic,
    minDecryptionVersion: c.min_decryption_version,
    destinations: JSON.stringify(c.destinations),
    fields: JSON.stringify(c.fields),
    extra: JSON.stringify(c.extra),
    createdAt: c.created_at,
    updatedAt: c.updated_at,
    keys: c.keys.map((k) => ({ version: k.version, wrapped: Buffer.from(k.wrapped, 'base64'), createdAt: k.created_at, destroyedAt: k.destroyed_at })),
  }),
  classifications: (c) => ({
    id: c.id,
    name: c.name,
    slug: c.slug,
    description: c.description,
    bgColor: c.bg_color,
    fgColor: c.fg_color,
    emoji: c.emoji,
    providerContainerId: c.provider_container_id,
    createdAt: c.created_at,
    updatedAt: c.updated_at,
    userIds: c.user_ids,
    roleIds: c.role_ids,
    providers: c.providers.map((p) => ({ configurationId: p.configuration_id, gwsGroups: JSON.stringify(p.gws_groups) })),
    reveal: JSON.stringify(c.reveal ?? []),
    revealDefault: c.reveal_default ?? 'deny',
    revealDefaultMask: c.reveal_default_mask == null ? null : JSON.stringify(c.reveal_default_mask),
  }),
  apiKeys: (k) => ({
    id: k.id,
    name: k.name,
    prefix: k.prefix,
    keyHash: Buffer.from(k.key_hash, 'base64'),
    userId: k.user_id,
    permissions: JSON.stringify(k.permissions),
    configurations: JSON.stringify(k.configurations),
    status: k.status,
    createdAt: k.created_at,
    updatedAt: k.updated_at,
    revokedAt: k.revoked_at,
  }),
};

/** The canonical text of every section of `rows` (the control plane's state, or a scoped view of it). */
export function sectionTexts(rows: StateRows): Record<SectionName, string> {
  const out = {} as Record<SectionName, string>;
  for (const section of SECTIONS) {
    indexKeySeen = false;
    const wire = sectionToWire(section, rows[section]);
    out[section] = indexKeySeen ? canonicalJson(wire) : JSON.stringify(wire);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Replica: verifying and applying

export interface VerifyOptions {
  /** The highest version to accept (the replica's clock plus MAX_VERSION_LEAD_SECONDS); none for a copy already applied. */
  readonly maxVersion?: number;
}

/** The highest version a replica accepts now. */
export function versionBound(nowMs = Date.now()): number {
  return Math.floor(nowMs / 1000) + MAX_VERSION_LEAD_SECONDS;
}

/**
 * Parses and checks a snapshot body: valid JSON (a truncated body is not), the expected
 * shape, the MAC over the canonical body, each section against its digest, the digest
 * over them all, and the version bound.
 */
export function verifySnapshot(body: Buffer, mac: SnapshotMac, options: VerifyOptions = {}): VerifiedSnapshot {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new SnapshotRejectedError('the body is not valid JSON (truncated?)', { cause: err }, 'invalid');
  }
  const result = wireSchema.safeParse(parsed);
  if (!result.success) {
    const issue = result.error.issues[0];
    throw new SnapshotRejectedError(`unexpected shape at ${issue?.path.join('.') ?? '?'}: ${issue?.message ?? 'invalid'}`, undefined, 'invalid');
  }
  const snapshot = result.data;
  const sections = {} as SectionDigests;
  for (const section of SECTIONS) sections[section] = snapshot.sections[WIRE_NAMES[section]]!;
  // Over what arrived, not the parsed output: the MAC and the digests must vouch for every
  // byte of state. The claimed digest only tells which text to try first: plain
  // JSON.stringify is the canonical text when the sender laid the section out canonically,
  // and when it did not (or the digest lies) the canonicaliser is.
  const arrived = (parsed as { state: Record<string, unknown> }).state;
  const texts = {} as Record<SectionName, string>;
  for (const section of SECTIONS) {
    const value = arrived[WIRE_NAMES[section]];
    const plain = JSON.stringify(value);
    texts[section] = sha256(plain) === sections[section] ? plain : canonicalJson(value);
  }
  if (!mac.verify(macText(snapshot.version, snapshot.digest, sections, texts), snapshot.mac)) {
    throw new SnapshotRejectedError('the MAC does not verify (not made with this master key, or altered)', undefined, 'mac');
  }
  if (snapshotDigest(snapshot.version, sections) !== snapshot.digest) throw new SnapshotRejectedError('the digest does not match the sections (tampered or corrupted)', undefined, 'digest');
  for (const section of SECTIONS) {
    if (sha256(texts[section]) !== sections[section]) {
      throw new SnapshotRejectedError(`the ${WIRE_NAMES[section]} section does not match its digest (tampered or corrupted)`, undefined, 'digest');
    }
  }
  if (options.maxVersion !== undefined && snapshot.version > options.maxVersion) {
    throw new SnapshotRejectedError(`version ${snapshot.version} is more than ${MAX_VERSION_LEAD_SECONDS} s ahead of this replica's clock (bound ${options.maxVersion})`, undefined, 'version');
  }
  // The parsed input rather than zod's output: zod rebuilds objects in schema key order, and
  // the apply compares rows by their text, which the control plane wrote in canonical order.
  return { version: snapshot.version, digest: snapshot.digest, sections, state: arrived as unknown as WireState };
}

export type ApplyOutcome = { readonly kind: 'applied'; readonly changed: number } | { readonly kind: 'unchanged' };

/**
 * Applies a verified snapshot in one transaction and records it (with `gzipped`, its body)
 * as the applied one. Only sections whose digest changed are looked at, and of those only
 * the rows that differ from the store are written: a revoked key is one row, whatever the
 * size of the rest. `force` compares every section with the store, to bring a store
 * changed by other means back to the snapshot. A version below the applied one, or the
 * same version with other content, is refused: it would roll the replica back.
 */
export async function applySnapshot(store: Store, snapshot: VerifiedSnapshot, gzipped: Buffer, options: { force?: boolean } = {}): Promise<ApplyOutcome> {
  const previous = await store.replication.getSync('applied');
  if (previous !== undefined && options.force !== true) {
    if (snapshot.version < previous.version) {
      throw new SnapshotRejectedError(`version ${snapshot.version} is older than the applied version ${previous.version}`, undefined, 'older');
    }
    if (snapshot.version === previous.version) {
      if (snapshot.digest === previous.digest) return { kind: 'unchanged' };
      throw new SnapshotRejectedError(`version ${snapshot.version} is already applied with other content`, undefined, 'older');
    }
  }
  const before = previous === undefined || options.force === true ? null : (JSON.parse(previous.sections) as Partial<SectionDigests>);
  const sections = new Set(SECTIONS.filter((s) => before === null || before[s] !== snapshot.sections[s]));
  const current = await store.replication.readSections(sections);
  const changes: StateChanges = {};
  let changed = 0;
  for (const section of sections) {
    const change = diffSection(section, current[section] ?? [], snapshot.state);
    changed += change.upsert.length + change.remove.length;
    (changes as Record<SectionName, unknown>)[section] = change;
  }
  const applied: SyncStateRow = {
    version: snapshot.version,
    digest: snapshot.digest,
    sections: JSON.stringify(snapshot.sections),
    body: gzipped,
    updatedAt: new Date().toISOString(),
  };
  try {
    await store.replication.applyChanges(changes, applied);
  } catch (err) {
    throw new SnapshotRejectedError(`the store refused it (${(err as Error).message})`, { cause: err }, 'store');
  }
  return { kind: 'applied', changed };
}

/** The rows of `section` to write (new or different from the store) and the ids to delete. */
function diffSection<S extends SectionName>(section: S, stored: StateRows[S], incoming: WireState): { upsert: Array<StateRows[S][number]>; remove: Array<string | number> } {
  const have = new Map<string | number, string>();
  for (const row of sectionToWire(section, stored) as Array<{ id: string | number }>) have.set(row.id, JSON.stringify(row));
  const rows = incoming[WIRE_NAMES[section]] as unknown as Array<WireRow<S> & { id: string | number }>;
  const upsert: Array<StateRows[S][number]> = [];
  const keep = new Set<string | number>();
  for (const row of rows) {
    keep.add(row.id);
    if (have.get(row.id) !== JSON.stringify(row)) upsert.push(FROM_WIRE[section](row));
  }
  const remove = [...have.keys()].filter((id) => !keep.has(id));
  return { upsert, remove };
}
