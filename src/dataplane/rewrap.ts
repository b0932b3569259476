/**
 * Rewrap: tokens in, the same tokens re-encrypted under the configuration's newest key
 * version out (`POST /api/v3/encryption/{slug}/rewrap` and `svc-sidecar keys rewrap`).
 * The pipeline is decrypt's — authenticate → resolve configuration → permission → field
 * paths → transform the body as it arrives → respond — with a handler that writes tokens
 * where decrypt writes plaintext.
 *
 * Permission is `configurations.rotate`, not `data.decrypt`, and there is no
 * classification access check: no plaintext leaves the process, and every token keeps
 * its classification, so a caller ends up with exactly what it could read before. What
 * the caller gains is moving tokens off a key version, which is the rotate permission's
 * business.
 */
import { requirePermission } from '../auth/caller.ts';
import { authenticateRequest } from '../auth/request-auth.ts';
import { BadRequestError } from '../errors.ts';
import type { BodyFormat } from '../fields/formats.ts';
import type { FieldMatcher } from '../fields/paths.ts';
import { UNLIMITED } from '../fields/value.ts';
import { joinPieces } from '../fields/transformer.ts';
import type { RequestContext } from '../http/context.ts';
import type { Configuration } from '../store/configurations.ts';
import { BodyTransform, transformWhole } from './body-transform.ts';
import { bodyFormat, resolveConfiguration, resolveFieldPaths, send } from './encryption-routes.ts';
import { KeyInUse, RewrapHandler } from './field-handlers.ts';
import type { Services } from '../services.ts';
import { recordUsage } from '../telemetry/usage.ts';

export async function rewrapRoute(ctx: RequestContext, services: Services): Promise<void> {
  const caller = await authenticateRequest(ctx, services.auth);
  requirePermission(caller, 'configurations.rotate');
  const configuration = resolveConfiguration(ctx, services, caller, ctx.params['slug']!);
  refuseInapplicableHeaders(ctx);
  // As on decrypt: without x-svc-fields every string that is a token is rewrapped.
  const matcher = resolveFieldPaths(ctx, services, configuration, 'decrypt');
  const format = bodyFormat(ctx);
  const codec = services.codecs.get(configuration);
  const handler = new RewrapHandler(codec, new KeyInUse(services.store, configuration.id, codec));
  const transform = new BodyTransform('encrypt', format.create(matcher, handler, services.limits.token), handler).reportCountTo(ctx);
  const body = await transformWhole(ctx, services.config.server.body_limit, transform);
  ctx.res.setHeader('x-svc-key-version', String(handler.version));
  send(ctx, format, body);
  // The usage log's mode is encrypt or decrypt (a fixed schema other tools read): a
  // rewrap writes tokens, so it counts as encrypt; its api log entry names the path.
  recordUsage(ctx, services, configuration, 'encrypt', handler.count, ctx.bytesIn);
}

/** Rewrap neither forwards nor reclassifies; silently ignoring either header would surprise. */
function refuseInapplicableHeaders(ctx: RequestContext): void {
  if ((ctx.header('x-svc-destination')?.trim() ?? '') !== '') {
    throw new BadRequestError('The rewrap endpoint does not forward: remove the x-svc-destination header.');
  }
  if ((ctx.header('x-svc-classification')?.trim() ?? '') !== '') {
    throw new BadRequestError("Rewrap keeps each token's classification: remove the x-svc-classification header.");
  }
}

export interface RewrapResult {
  readonly body: Buffer;
  /** Tokens re-encrypted. */
  readonly rewrapped: number;
  /** Tokens already at the newest version, left unchanged. */
  readonly kept: number;
  /** The key version every token of `body` carries. */
  readonly version: number;
}

/**
 * Rewraps a whole document arriving in chunks (the CLI's stdin). Throws the 422 of the
 * failed tokens, if any, before returning any output.
 */
export async function rewrapDocument(
  services: Pick<Services, 'codecs' | 'store'>,
  configuration: Configuration,
  chunks: AsyncIterable<Buffer>,
  matcher: FieldMatcher,
  format: BodyFormat,
): Promise<RewrapResult> {
  const codec = services.codecs.get(configuration);
  const handler = new RewrapHandler(codec, new KeyInUse(services.store, configuration.id, codec));
  const transform = new BodyTransform('encrypt', format.create(matcher, handler, UNLIMITED), handler);
  const out: Buffer[] = [];
  for await (const chunk of chunks) transform.push(chunk, out);
  transform.end(out);
  return { body: out.length === 0 ? Buffer.alloc(0) : joinPieces(out), rewrapped: handler.count, kept: handler.kept, version: handler.version };
}
