import { randomUUID } from 'node:crypto';

/** A caller's id is kept when it is short and plain; anything else gets a fresh one. */
const SANE = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && SANE.test(header) ? header : randomUUID();
}
