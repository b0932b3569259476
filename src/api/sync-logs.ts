/**
 * `POST /api/v3/sync/logs`: the api and usage log rows replicas ship to their control
 * plane (docs/replication.md "Logs from the fleet"). The rows end up in the control plane's
 * own log lists, so they are held to what those lists show (status 100–599, known
 * methods, ids that exist or null, bounded text, timestamps in the stored format) and may
 * not be dated in the future: a row dated years ahead would head every newest-first list
 * and outlive retention. Late rows (a replica that was cut off) are fine.
 *
 * Rows are deduplicated by the shipping replica's instance id and row id, so a retried
 * batch lands once, and nobody without the instance id (which no API shows) can claim a
 * replica's row ids before its real rows arrive.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import type { Caller } from '../auth/caller.ts';
import type { Services } from '../services.ts';
import { BadRequestError, SyncBatchTooLargeError, ValidationError, type ValidationErrors } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { METHODS } from '../http/node-http.ts';
import { sendJson } from '../http/respond.ts';
import { INSTANCE_ID_PATTERN, type ShippedLogs } from '../store/shipped-logs.ts';
import { attributeName } from './validation.ts';

/** 5,000 rows of the longest kind are about 20 MB at worst; the row limit is the real bound. */
export const LOGS_BODY_LIMIT = 32 * 1024 * 1024;
/** A row dated further ahead of the control plane's clock than this is refused. */
export const MAX_CLOCK_AHEAD_MS = 10 * 60 * 1000;

/** Paths are cut to this length where they are logged (app.ts, route-transform.ts). */
const PATH_MAX = 1024;
/** The longest IPv6 text, with an embedded IPv4 address. */
const IP_MAX = 45;
/** A request lasting longer than this is not a real request. */
const DURATION_MAX_MS = 30 * 24 * 60 * 60 * 1000;
/** The form every log row's `created_at` has (Date#toISOString): lists sort on this text. */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
/** As request ids are made or accepted (src/telemetry/request-id.ts). */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** The longest end-user subject the relay records (src/auth/end-user.ts). */
const END_USER_MAX = 256;
/** Ids of API keys and configurations are UUIDs; this is a bound, not a format check. */
const TEXT_ID_MAX = 64;
/** Anything a replica's own name may not hold: control characters, bidi overrides and isolates. */
const UNPRINTABLE = /[\p{Cc}\u200E\u200F\u202A-\u202E\u2066-\u2069]/u;

const rowId = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);
const userId = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).nullable();
const textId = z.string().min(1).max(TEXT_ID_MAX);
const createdAt = z
  .string()
  .regex(ISO_TIME)
  .refine((text) => {
    const time = Date.parse(text);
    return Number.isFinite(time) && new Date(time).toISOString() === text;
  });

const apiRow = z.strictObject({
  id: rowId,
  request_id: z.string().regex(REQUEST_ID),
  method: z.enum(METHODS as [string, ...string[]]),
  // Shown in every log list: no control or bidirectional formatting characters, as the replica name.
  path: z.string().min(1).max(PATH_MAX).refine((text) => !UNPRINTABLE.test(text)),
  status_code: z.number().int().min(100).max(599),
  api_key_id: textId.nullable(),
  user_id: userId,
  configuration_id: textId.nullable(),
  destination: z.string().min(1).max(2048).refine((text) => !UNPRINTABLE.test(text)).nullable(),
  duration_ms: z.number().min(0).max(DURATION_MAX_MS),
  ip: z.string().max(IP_MAX).refine((ip) => ip === '' || isIP(ip) !== 0),
  created_at: createdAt,
  // The relay's end user, as src/auth/end-user.ts bounds a subject; absent on most rows.
  end_user: z
    .string()
    .min(1)
    .max(END_USER_MAX)
    .refine((text) => !UNPRINTABLE.test(text))
    .nullable()
    .optional(),
});

const revealCount = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

const usageRow = z.strictObject({
  id: rowId,
  request_id: z.string().regex(REQUEST_ID),
  configuration_id: textId,
  api_key_id: textId.nullable(),
  user_id: userId,
  mode: z.enum(['encrypt', 'decrypt']),
  field_count: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  bytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  // Absent from replicas of an earlier build.
  reveal: z
    .strictObject({ plain: revealCount, mask: revealCount, redact: revealCount, token: revealCount })
    .nullable()
    .optional(),
  created_at: createdAt,
});

const batchSchema = z.strictObject({
  replica: z
    .string()
    .min(1)
    .max(128)
    .refine((name) => !UNPRINTABLE.test(name)),
  instance: z.string().regex(INSTANCE_ID_PATTERN),
  api: z.array(z.unknown()).default([]),
  usage: z.array(z.unknown()).default([]),
});

/**
 * Stores a replica's batch; rows already received (a retry) are skipped, so the replica
 * may resend freely. No activity entry: this is log traffic, not a management change.
 */
export async function receiveLogs(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const raw = await readJson(ctx, LOGS_BODY_LIMIT);
  // As on every other endpoint: a body that is no object is a 400, not a 422 on `body`.
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new BadRequestError('The request body must be a JSON object.');
  const body = batchSchema.safeParse(raw);
  if (!body.success) throw new ValidationError(validationErrors(body.error.issues));
  const batch = body.data;
  // The row count first: a batch over the limit is refused before any row is looked at.
  const limit = services.config.sync.max_batch;
  if (batch.api.length + batch.usage.length > limit) throw new SyncBatchTooLargeError(limit);

  const errors: ValidationErrors = {};
  const logs: ShippedLogs = { api: [], usage: [] };
  const now = Date.now();
  for (const [kind, schema] of [['api', apiRow], ['usage', usageRow]] as const) {
    batch[kind].forEach((row, index) => {
      const parsed = schema.safeParse(row);
      if (!parsed.success) {
        Object.assign(errors, validationErrors(parsed.error.issues, `${kind}.${index}.`));
        return;
      }
      if (Date.parse(parsed.data.created_at) > now + MAX_CLOCK_AHEAD_MS) {
        fail(errors, `${kind}.${index}.created_at`);
        return;
      }
      (logs[kind] as unknown[]).push(parsed.data);
    });
  }
  await checkReferences(services, caller, batch, errors);
  if (Object.keys(errors).length > 0) throw new ValidationError(errors);
  const result = await services.store.shippedLogs.receive(batch.replica, batch.instance, logs);
  sendJson(ctx, 200, result);
}

/**
 * Ids must name what exists on the control plane, and a configuration must be one the
 * key may reach: a replica limited to some configurations has never served another.
 */
async function checkReferences(services: Services, caller: Caller, batch: { api: unknown[]; usage: unknown[] }, errors: ValidationErrors): Promise<void> {
  type Ref = { field: 'api_key_id' | 'user_id' | 'configuration_id'; value: string | number; at: string };
  const refs: Ref[] = [];
  for (const kind of ['api', 'usage'] as const) {
    batch[kind].forEach((row, index) => {
      if (errors[`${kind}.${index}.id`] !== undefined || row === null || typeof row !== 'object') return;
      const record = row as Record<string, unknown>;
      for (const field of ['api_key_id', 'user_id', 'configuration_id'] as const) {
        const value = record[field];
        const at = `${kind}.${index}.${field}`;
        if ((typeof value === 'string' || typeof value === 'number') && errors[at] === undefined) refs.push({ field, value, at });
      }
    });
  }
  if (refs.length === 0) return;
  const existing = await services.store.shippedLogs.existingReferences({
    apiKeys: refs.filter((r) => r.field === 'api_key_id').map((r) => String(r.value)),
    users: refs.filter((r) => r.field === 'user_id').map((r) => Number(r.value)),
    configurations: refs.filter((r) => r.field === 'configuration_id').map((r) => String(r.value)),
  });
  const scope = caller.configurations;
  for (const ref of refs) {
    const known =
      ref.field === 'api_key_id'
        ? existing.apiKeys.has(String(ref.value))
        : ref.field === 'user_id'
          ? existing.users.has(Number(ref.value))
          : existing.configurations.has(String(ref.value)) && (scope === null || scope.has(String(ref.value)));
    if (!known) fail(errors, ref.at);
  }
}

function fail(errors: ValidationErrors, field: string): void {
  (errors[field] ??= []).push(`The ${attributeName(field)} field is invalid.`);
}

function validationErrors(issues: readonly z.core.$ZodIssue[], prefix = ''): ValidationErrors {
  const errors: ValidationErrors = {};
  for (const issue of issues) {
    const path = issue.path.join('.');
    const field = prefix + path === '' ? 'body' : prefix + path;
    if (errors[field] === undefined) fail(errors, field);
  }
  return errors;
}
