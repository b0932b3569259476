/**
 * The `cursor` of the log lists (DESIGN §13, "Bounded queries"): an opaque token naming
 * where the next page starts, so a deep page costs what the first one does.
 *
 * A cursor carries the page number it leads to and the position of the last row before
 * it (see LogPosition), MACed under a key derived from the master key. The MAC also covers
 * the list it was issued for — endpoint, kinds, filters and `per_page` — without carrying
 * them: the rows are always those the request's own filters select, and a cursor used
 * with other filters, or altered in any bit, fails the MAC and is refused (422). Every
 * instance sharing the master key (a control plane and its replicas) accepts the others'
 * cursors.
 *
 * Binary layout, then canonical base64url without padding:
 *   version 0x01 | page (u32 BE) | kind (u8) | id (u64 BE) | created_at length (u8) |
 *   created_at (UTF-8, as stored) | MAC (first 16 bytes of HMAC-SHA256)
 */
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import type { MasterKey } from '../crypto/master-key.ts';
import { LOG_KINDS, type LogKind, type LogPosition } from '../store/logs.ts';

const FORMAT = 0x01;
const MAC_LABEL = 'svc log cursor v1';
const MAC_SIZE = 16;
const HEAD_SIZE = 1 + 4 + 1 + 8 + 1;
/** created_at exactly as stored (the store writes `toISOString()`; replicas ship at most 64 characters). */
const MAX_CREATED_AT = 255;
/** A cursor is never longer than this; longer input is refused before it is decoded. */
export const MAX_CURSOR_LENGTH = Math.ceil(((HEAD_SIZE + MAX_CREATED_AT + MAC_SIZE) * 4) / 3);
/** Pages are counted in a u32; `page` itself stops at 10^9 (pagination.ts). */
const MAX_PAGE = 2 ** 32 - 1;

/** What a cursor's MAC binds it to: the list and its filters, as the request states them. */
export interface CursorScope {
  /** The endpoint, e.g. `unified`. */
  readonly list: string;
  readonly kinds: readonly LogKind[];
  readonly userId: number | undefined;
  readonly requestId: string | undefined;
  readonly perPage: number;
}

export interface DecodedCursor {
  /** The page the cursor leads to (2 or more). */
  readonly page: number;
  readonly after: LogPosition;
}

export class LogCursors {
  readonly #key: KeyObject;

  constructor(master: MasterKey) {
    const secret = master.deriveSecret(MAC_LABEL);
    this.#key = createSecretKey(secret);
    secret.fill(0);
  }

  /** The cursor of the page after `after`; null when the position cannot be written in one. */
  encode(scope: CursorScope, page: number, after: LogPosition): string | null {
    const createdAt = Buffer.from(after.createdAt, 'utf8');
    if (!Number.isSafeInteger(page) || page < 2 || page > MAX_PAGE || !Number.isSafeInteger(after.id) || after.id < 1 || createdAt.length > MAX_CREATED_AT) {
      return null;
    }
    const body = Buffer.alloc(HEAD_SIZE + createdAt.length + MAC_SIZE);
    body[0] = FORMAT;
    body.writeUInt32BE(page, 1);
    body[5] = LOG_KINDS.indexOf(after.kind);
    body.writeBigUInt64BE(BigInt(after.id), 6);
    body[14] = createdAt.length;
    createdAt.copy(body, HEAD_SIZE);
    const payloadEnd = HEAD_SIZE + createdAt.length;
    this.#mac(scope, body.subarray(0, payloadEnd)).copy(body, payloadEnd);
    return body.toString('base64url');
  }

  /** The cursor's page and position, or null for anything but a cursor issued for `scope`. */
  decode(scope: CursorScope, text: string): DecodedCursor | null {
    if (text.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(text)) return null;
    const body = Buffer.from(text, 'base64url');
    // Canonical only: one spelling per cursor (no stray bits in the last character).
    if (body.toString('base64url') !== text) return null;
    if (body.length < HEAD_SIZE + MAC_SIZE || body[0] !== FORMAT) return null;
    const payloadEnd = HEAD_SIZE + body[14]!;
    if (body.length !== payloadEnd + MAC_SIZE) return null;
    // The MAC first: nothing of an unauthenticated cursor is interpreted.
    if (!timingSafeEqual(this.#mac(scope, body.subarray(0, payloadEnd)), body.subarray(payloadEnd))) return null;
    const page = body.readUInt32BE(1);
    const kind = LOG_KINDS[body[5]!];
    const id = body.readBigUInt64BE(6);
    // Authentic, so written by encode(); checked again all the same.
    const createdAt = body.toString('utf8', HEAD_SIZE, payloadEnd);
    if (page < 2 || kind === undefined || id < 1n || id > BigInt(Number.MAX_SAFE_INTEGER) || createdAt.length === 0) return null;
    if (!scope.kinds.includes(kind)) return null;
    return { page, after: { createdAt, id: Number(id), kind } };
  }

  #mac(scope: CursorScope, payload: Buffer): Buffer {
    const bound = JSON.stringify([scope.list, scope.kinds, scope.userId ?? null, scope.requestId ?? null, scope.perPage]);
    return createHmac('sha256', this.#key).update(bound).update('\n').update(payload).digest().subarray(0, MAC_SIZE);
  }
}

const byMaster = new WeakMap<MasterKey, LogCursors>();

/** The cursor codec of a master key, made once (its HMAC key is derived with HKDF). */
export function logCursors(master: MasterKey): LogCursors {
  let cursors = byMaster.get(master);
  if (cursors === undefined) {
    cursors = new LogCursors(master);
    byMaster.set(master, cursors);
  }
  return cursors;
}
