/**
 * The records a request leaves behind: one `usage` entry per transform (DESIGN §10) with
 * its field count in `svc_fields_total` (a decrypt's values per reveal level, DESIGN §14),
 * and one `api` entry per logged request.
 */
import type { RevealCounts } from '../fields/reveal.ts';
import type { RequestContext } from '../http/context.ts';
import { nowIso } from '../store/sql.ts';
import type { LogWriter } from './log-writer.ts';
import type { Metrics } from './metrics.ts';

export interface Recorders {
  readonly logs: LogWriter;
  readonly metrics: Metrics;
}

/** The configuration a transform ran under, as the usage log and metrics name it. */
export interface UsageSubject {
  readonly id: string;
  readonly name: string;
}

export function recordUsage(
  ctx: RequestContext,
  recorders: Recorders,
  configuration: UsageSubject,
  mode: 'encrypt' | 'decrypt',
  fieldCount: number,
  bytes: number,
  reveal: RevealCounts | null = null,
): void {
  if (reveal === null) recorders.metrics.countFields(configuration.name, mode, fieldCount);
  else recorders.metrics.countRevealed(configuration.name, reveal);
  recorders.logs.usage({
    requestId: ctx.id,
    configurationId: configuration.id,
    apiKeyId: ctx.apiKeyId,
    userId: ctx.userId,
    mode,
    fieldCount,
    bytes,
    reveal,
    createdAt: nowIso(),
  });
}

/** Paths are cut to this many characters in the api log. */
const MAX_LOGGED_PATH = 1024;

/** One `api` log entry for a finished exchange, logged under `path`. */
export function recordApiLog(ctx: RequestContext, logs: LogWriter, path: string): void {
  logs.api({
    requestId: ctx.id,
    method: ctx.req.method ?? 'GET',
    path: path.length > MAX_LOGGED_PATH ? path.slice(0, MAX_LOGGED_PATH) : path,
    statusCode: ctx.res.statusCode,
    apiKeyId: ctx.apiKeyId,
    userId: ctx.userId,
    configurationId: ctx.configurationId,
    destination: ctx.destination,
    endUser: ctx.endUser?.subject ?? null,
    durationMs: Math.round(performance.now() - ctx.startedAt),
    ip: ctx.req.socket.remoteAddress ?? '',
    createdAt: nowIso(),
  });
}
