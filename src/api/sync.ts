/**
 * Replication endpoints a control plane serves to its replicas (docs/replication.md):
 * the state snapshot, and the logs replicas ship back.
 */
import { LOGS_PATH } from '../sync/log-shipper.ts';
import { SNAPSHOT_PATH } from '../sync/replica.ts';
import { METHODS } from 'node:http';
import { z } from 'zod';
import type { Services } from '../dataplane/services.ts';
import { BadRequestError, ValidationError, type ValidationErrors } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import type { Store } from '../store/db.ts';
import { SnapshotPublisher } from '../sync/snapshot.ts';
import type { ApiRoute } from './routes.ts';
import { attributeName } from './validation.ts';

/** A shipped batch is at most a few thousand rows; this leaves room without being unbounded. */
const LOGS_BODY_LIMIT = 16 * 1024 * 1024;
const MAX_ROWS = 10_000;

export const routes: ApiRoute[] = [
  { method: 'GET', path: SNAPSHOT_PATH, permission: 'sync.read', write: false, handler: snapshot },
  // A write: a replica has no fleet logs to collect, so it answers 409 like other writes.
  { method: 'POST', path: LOGS_PATH, permission: 'sync.write', write: true, handler: receiveLogs },
];

/** One publisher per store, so its cache serves every request of that service. */
const publishers = new WeakMap<Store, SnapshotPublisher>();

function publisherFor(store: Store): SnapshotPublisher {
  let publisher = publishers.get(store);
  if (publisher === undefined) {
    publisher = new SnapshotPublisher(store);
    publishers.set(store, publisher);
  }
  return publisher;
}

async function snapshot(ctx: RequestContext, services: Services): Promise<void> {
  const published = await publisherFor(services.store).current();
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

// ---------------------------------------------------------------------------------------
// POST /api/v3/sync/logs

// Rows are held to what the log lists show (the SyncApiLogRow and SyncUsageLogRow schemas
// of the OpenAPI document): anything a replica's own log tables hold passes, and nothing
// else can be planted in the fleet's logs. Text bounds stay generous: a row refused here
// would be sent again and again, and hold up every row behind it.
const nullableId = z.number().int().min(1).nullable();
const uuid = z.guid();
const timestamp = z.iso.datetime({ offset: true });
const requestId = z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/);
const shortText = z.string().max(256);
const longText = z.string().max(8192);

const batchSchema = z.strictObject({
  replica: z.string().min(1).max(128),
  api: z
    .array(
      z.strictObject({
        id: z.number().int().min(1),
        request_id: requestId,
        method: z.enum(METHODS),
        path: longText,
        status_code: z.number().int().min(100).max(599),
        api_key_id: uuid.nullable(),
        user_id: nullableId,
        configuration_id: uuid.nullable(),
        destination: longText.nullable(),
        duration_ms: z.number().min(0),
        ip: shortText,
        created_at: timestamp,
      }),
    )
    .max(MAX_ROWS)
    .default([]),
  usage: z
    .array(
      z.strictObject({
        id: z.number().int().min(1),
        request_id: requestId,
        configuration_id: uuid,
        api_key_id: uuid.nullable(),
        user_id: nullableId,
        mode: z.enum(['encrypt', 'decrypt']),
        field_count: z.number().int().min(0),
        bytes: z.number().int().min(0),
        created_at: timestamp,
      }),
    )
    .max(MAX_ROWS)
    .default([]),
});

/**
 * Stores a replica's batch; rows already received (a retry) are skipped, so the replica
 * may resend freely. No activity entry: this is log traffic, not a management change.
 */
async function receiveLogs(ctx: RequestContext, services: Services): Promise<void> {
  const body = await readJson(ctx, LOGS_BODY_LIMIT);
  // As on every other endpoint: a body that is no object is a 400, not a 422 on `body`.
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new BadRequestError('The request body must be a JSON object.');
  const parsed = batchSchema.safeParse(body);
  if (!parsed.success) throw new ValidationError(validationErrors(parsed.error.issues));
  const batch = parsed.data;
  const result = services.store.shippedLogs.receive(batch.replica, { api: batch.api, usage: batch.usage });
  sendJson(ctx, 200, result);
}

function validationErrors(issues: readonly z.core.$ZodIssue[]): ValidationErrors {
  const errors: ValidationErrors = {};
  for (const issue of issues) {
    const field = issue.path.length === 0 ? 'body' : issue.path.join('.');
    (errors[field] ??= []).push(`The ${attributeName(field)} field is invalid.`);
  }
  return errors;
}
