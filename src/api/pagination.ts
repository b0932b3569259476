/**
 * The page envelope of spec 2.11, shaped as Laravel's length-aware paginator writes it,
 * with links built from `server.public_url` (else the request's own host). Lists with
 * keyset pagination (the logs) add `next_cursor` and `next_cursor_url` to it.
 */
import type { RequestContext } from '../http/context.ts';
import type { Validator } from './validation.ts';

export const DEFAULT_PER_PAGE = 10;
export const MAX_PER_PAGE = 100;

export interface PageRequest {
  readonly page: number;
  readonly perPage: number;
  readonly offset: number;
}

export interface PageLink {
  url: string | null;
  label: string;
  page: number | null;
  active: boolean;
}

/** True when the page starts at or past the last row: answered empty without querying up to it. */
export function pastTheEnd(request: PageRequest, total: number): boolean {
  return request.offset >= total;
}

export interface Page<T> {
  current_page: number;
  data: T[];
  first_page_url: string;
  from: number | null;
  last_page: number;
  last_page_url: string;
  links: PageLink[];
  next_page_url: string | null;
  path: string;
  per_page: number;
  prev_page_url: string | null;
  to: number | null;
  total: number;
}

/** The envelope of a list that also pages by cursor. */
export interface CursorPage<T> extends Page<T> {
  /** The `cursor` of the next page; null on the last page. */
  next_cursor: string | null;
  /** This list's URL for the next page by cursor (the query without `page`); null on the last page. */
  next_cursor_url: string | null;
}

/** Reads `page` and `per_page` (422 past 100); call `v.check()` after other parameters. */
export function pageRequest(v: Validator): PageRequest {
  const perPage = v.integer('per_page', { min: 1, max: MAX_PER_PAGE }) ?? DEFAULT_PER_PAGE;
  const page = v.integer('page', { min: 1, max: 1_000_000_000 }) ?? 1;
  return { page, perPage, offset: (page - 1) * perPage };
}

/** The absolute URL of this request's path, without query. */
export function baseUrl(ctx: RequestContext, publicUrl: string | undefined): string {
  if (publicUrl !== undefined) return publicUrl + ctx.path;
  const host = ctx.header('host');
  const safeHost = host !== undefined && /^[A-Za-z0-9.\-:[\]]{1,255}$/.test(host) ? host : 'localhost';
  return `http://${safeHost}${ctx.path}`;
}

export function envelope<T>(ctx: RequestContext, publicUrl: string | undefined, request: PageRequest, total: number, data: T[]): Page<T> {
  const path = baseUrl(ctx, publicUrl);
  const query = ctx.query();
  // Page links name pages by number only: a cursor beside the number would contradict it.
  query.delete('page');
  query.delete('cursor');
  const url = (page: number) => {
    const q = new URLSearchParams(query);
    q.set('page', String(page));
    return `${path}?${q.toString()}`;
  };
  const lastPage = Math.max(1, Math.ceil(total / request.perPage));
  const current = request.page;
  const from = data.length === 0 ? null : request.offset + 1;
  const prev = current > 1 ? current - 1 : null;
  const next = current < lastPage ? current + 1 : null;
  const links: PageLink[] = [{ url: prev === null ? null : url(prev), label: '&laquo; Previous', page: prev, active: false }];
  for (const item of window(current, lastPage)) {
    links.push(item === null ? { url: null, label: '...', page: null, active: false } : { url: url(item), label: String(item), page: item, active: item === current });
  }
  links.push({ url: next === null ? null : url(next), label: 'Next &raquo;', page: next, active: false });
  return {
    current_page: current,
    data,
    first_page_url: url(1),
    from,
    last_page: lastPage,
    last_page_url: url(lastPage),
    links,
    next_page_url: next === null ? null : url(next),
    path,
    per_page: request.perPage,
    prev_page_url: prev === null ? null : url(prev),
    to: from === null ? null : from + data.length - 1,
    total,
  };
}

/** `envelope` with the next page's cursor: its links by number, `next_cursor_url` by cursor. */
export function cursorEnvelope<T>(
  ctx: RequestContext,
  publicUrl: string | undefined,
  request: PageRequest,
  total: number,
  data: T[],
  nextCursor: string | null,
): CursorPage<T> {
  const page = envelope(ctx, publicUrl, request, total, data);
  let nextCursorUrl: string | null = null;
  if (nextCursor !== null) {
    const query = ctx.query();
    query.delete('page');
    query.set('cursor', nextCursor);
    nextCursorUrl = `${page.path}?${query.toString()}`;
  }
  return { ...page, next_cursor: nextCursor, next_cursor_url: nextCursorUrl };
}

/**
 * Page numbers to show, null for a gap: all of them up to 13 pages, else the first two,
 * three on each side of the current page, and the last two (Laravel's URL window).
 */
function window(current: number, last: number): Array<number | null> {
  const range = (a: number, b: number) => Array.from({ length: Math.max(0, b - a + 1) }, (_, i) => a + i);
  const onEachSide = 3;
  if (last <= onEachSide * 2 + 7) return range(1, last);
  const span = onEachSide * 2;
  if (current <= span) return [...range(1, span + 2), null, last - 1, last];
  if (current > last - span) return [1, 2, null, ...range(last - (span + 1), last)];
  return [1, 2, null, ...range(current - onEachSide, current + onEachSide), null, last - 1, last];
}
