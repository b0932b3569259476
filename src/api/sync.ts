/**
 * Replication endpoints a control plane serves to its replicas (docs/replication.md):
 * the state snapshot, and the logs replicas ship back (sync-logs.ts).
 */
import type { Caller } from '../auth/caller.ts';
import type { Services } from '../services.ts';
import type { RequestContext } from '../http/context.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import type { Store } from '../store/db.ts';
import { SnapshotMac } from '../sync/snapshot-mac.ts';
import { SnapshotPublisher } from '../sync/snapshot-publisher.ts';
import type { Handlers } from './routes.ts';
import { receiveLogs } from './sync-logs.ts';

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { snapshot, receiveLogs } satisfies Handlers;

/** One publisher per store, so its cache serves every request of that service. */
const publishers = new WeakMap<Store, SnapshotPublisher>();

function publisherFor(services: Services): SnapshotPublisher {
  let publisher = publishers.get(services.store);
  if (publisher === undefined) {
    publisher = new SnapshotPublisher(services.store, new SnapshotMac(services.master));
    publishers.set(services.store, publisher);
  }
  return publisher;
}

/** The snapshot as the key may see it: a key limited to configurations gets only those (snapshot-scope.ts). */
async function snapshot(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const published = await publisherFor(services).current(caller.configurations);
  const etag = `"${published.digest}"`;
  const res = ctx.res;
  res.setHeader('etag', etag);
  res.setHeader('cache-control', 'no-cache');
  res.setHeader('vary', 'accept-encoding');
  if (noneMatch(ctx.header('if-none-match'), published.digest)) {
    sendEmpty(ctx, 304);
    return;
  }
  const gzipped = acceptsGzip(ctx.header('accept-encoding'));
  if (gzipped) res.setHeader('content-encoding', 'gzip');
  sendJson(ctx, 200, gzipped ? published.gzipped : published.body);
}

/** RFC 9110 §13.1.2: `*`, or any listed entity tag (weak comparison). */
function noneMatch(header: string | undefined, digest: string): boolean {
  if (header === undefined) return false;
  return header.split(',').some((tag) => {
    const t = tag.trim();
    return t === '*' || t.replace(/^W\//, '') === `"${digest}"`;
  });
}

/** RFC 9110 §12.5.3: gzip (or `*`) listed without `q=0`. */
function acceptsGzip(header: string | undefined): boolean {
  if (header === undefined) return false;
  return header.split(',').some((entry) => {
    const [coding = '', ...params] = entry.split(';').map((part) => part.trim().toLowerCase());
    if (coding !== 'gzip' && coding !== 'x-gzip' && coding !== '*') return false;
    const q = params.find((p) => p.startsWith('q='));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}
