/**
 * The request side of a relay or egress route: the body to forward, transformed when the
 * route says so (encryption streams; decryption is checked whole before anything leaves),
 * else the client's bytes as they come.
 */
import { UnsupportedMediaTypeError } from '../errors.ts';
import { declaredFormat, detectRequestFormat } from '../fields/formats.ts';
import { bodyChunks, hasBody } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { recordUsage } from '../telemetry/usage.ts';
import { BodyTransform, ChainedTransformer, transformStream, transformWhole } from './body-transform.ts';
import type { DecryptedPaths } from './echo-guard.ts';
import { DecryptHandler, EncryptHandler } from './field-handlers.ts';
import type { ForwardBody } from './forwarder.ts';
import type { RelayGuard } from './relay-guard.ts';
import { routeTransformer, type TransformRoute } from './transform-routes.ts';

export interface RequestBody {
  readonly body: ForwardBody;
  /** Records the usage log of the request's transform, once it has run. */
  recordUsage(): void;
  /** Where tokens were decrypted (path → classification), with `recordPaths`; filled as the body is read. */
  readonly decryptedAt: DecryptedPaths | null;
}

export interface RequestBodyOptions {
  /** The relay guard, run over what the route's transform wrote. */
  readonly guard?: RelayGuard | null;
  /** Set `x-svc-fields-transformed` (egress: the application is told; a relay's clients are not). */
  readonly reportCount?: boolean;
  /** Remember where tokens were decrypted, for an answer that must not echo the plaintext. */
  readonly recordPaths?: boolean;
}

/**
 * Whether the request body goes through the route's transform: any body on a route with
 * a request transform, whose format is then read off the body itself. A body that cannot
 * be read (compressed, another charset than UTF-8) is refused: passing it on
 * untransformed would let plaintext by unnoticed.
 */
export function transformsRequest(ctx: RequestContext, route: TransformRoute | null): boolean {
  if (route?.request == null || !hasBody(ctx)) return false;
  if (detectRequestFormat(ctx.req.headers['content-type'], ctx.req.headers['content-encoding']) === 'unreadable') throw new UnsupportedMediaTypeError();
  return true;
}

/**
 * The body to forward for a route's request (`route` null: a relay request that matched
 * none), transformed per the route and then, on the relay, by the guard over what the
 * route wrote.
 */
export async function requestBody(
  ctx: RequestContext,
  services: Services,
  route: TransformRoute | null,
  configuration: Configuration | null,
  { guard = null, reportCount = false, recordPaths = false }: RequestBodyOptions = {},
): Promise<RequestBody> {
  if (!hasBody(ctx)) return { body: null, recordUsage: noop, decryptedAt: null };
  const spec = transformsRequest(ctx, route) ? route!.request! : null;
  if (spec === null && guard === null) return { body: untouched(ctx, services.config.forwarding.max_body), recordUsage: noop, decryptedAt: null };
  let transform: BodyTransform;
  let usage = noop;
  let decryptedAt: DecryptedPaths | null = null;
  if (spec === null) {
    const pass = guard!.begin(ctx, services, null, null);
    transform = new BodyTransform('encrypt', pass, pass.handler);
  } else {
    const own = routeTransformer(services, configuration!, spec, declaredFormat(ctx.req.headers['content-type']), { minted: guard !== null, paths: recordPaths });
    if (own.handler instanceof DecryptHandler) decryptedAt = own.handler.decryptedAt;
    const minted = own.handler instanceof EncryptHandler ? own.handler.minted : null;
    const pass = guard?.begin(ctx, services, own.codec, minted) ?? null;
    // The guard reads each token the route writes within the same chunk: then it can go,
    // so what is kept stays one chunk's worth however long the body.
    const chained = pass === null ? own.transformer : new ChainedTransformer(own.transformer, pass, () => minted?.clear());
    transform = new BodyTransform(spec.mode, chained, own.handler, pass === null ? [] : [pass.handler]);
    const reveal = own.handler instanceof DecryptHandler ? own.handler.reveal : null;
    usage = () => recordUsage(ctx, services, configuration!, spec.mode, own.handler.count, transform.bytes, reveal);
    if (reportCount) transform.reportCountTo(ctx);
  }
  // A denied or invalid token must stop the request before any plaintext leaves.
  if (spec?.mode === 'decrypt') return { body: await transformWhole(ctx, services.config.server.body_limit, transform), recordUsage: usage, decryptedAt };
  return { body: transformStream(ctx, services.config.forwarding.max_body, transform), recordUsage: usage, decryptedAt };
}

function noop(): void {}

async function* untouched(ctx: RequestContext, limit: number): AsyncGenerator<Buffer> {
  for await (const chunk of bodyChunks(ctx, limit)) {
    ctx.bytesIn += chunk.length;
    yield chunk;
  }
}
