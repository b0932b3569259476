/**
 * The request side of a relay or egress route: the body to forward, transformed when the
 * route says so (encryption streams; decryption is checked whole before anything leaves),
 * else the client's bytes as they come.
 */
import { UnsupportedMediaTypeError } from '../errors.ts';
import { detectFormat } from '../fields/formats.ts';
import { bodyChunks, hasBody } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { recordUsage } from '../telemetry/usage.ts';
import { transformStream, transformWhole } from './body-transform.ts';
import type { ForwardBody } from './forwarder.ts';
import { routeBodyTransform, type TransformRoute } from './transform-routes.ts';

export interface RequestBody {
  readonly body: ForwardBody;
  /** Records the usage log of the request's transform, once it has run. */
  recordUsage(): void;
}

/**
 * Whether the request body goes through the route's transform: any body on a route with
 * a request transform, whose format is then read off the body itself. A body in a known
 * format that cannot be read (compressed, another charset) is refused: passing it on
 * untransformed would let plaintext by unnoticed.
 */
export function transformsRequest(ctx: RequestContext, route: TransformRoute): boolean {
  if (route.request === null || !hasBody(ctx)) return false;
  if (detectFormat(ctx.req.headers['content-type'], ctx.req.headers['content-encoding']) === 'unreadable') throw new UnsupportedMediaTypeError();
  return true;
}

export async function requestBody(ctx: RequestContext, services: Services, route: TransformRoute, configuration: Configuration): Promise<RequestBody> {
  if (!hasBody(ctx)) return { body: null, recordUsage: noop };
  if (!transformsRequest(ctx, route)) return { body: untouched(ctx, services.config.forwarding.max_body), recordUsage: noop };
  const spec = route.request!;
  const declared = detectFormat(ctx.req.headers['content-type'], undefined);
  const transform = routeBodyTransform(services, configuration, spec, typeof declared === 'string' ? null : declared);
  const usage = () => recordUsage(ctx, services, configuration, transform.mode, transform.handler.count, transform.bytes);
  if (spec.mode === 'encrypt') return { body: transformStream(ctx, services.config.forwarding.max_body, transform), recordUsage: usage };
  // A denied or invalid token must stop the request before any plaintext leaves.
  return { body: await transformWhole(ctx, services.config.server.body_limit, transform), recordUsage: usage };
}

function noop(): void {}

async function* untouched(ctx: RequestContext, limit: number): AsyncGenerator<Buffer> {
  for await (const chunk of bodyChunks(ctx, limit)) {
    ctx.bytesIn += chunk.length;
    yield chunk;
  }
}
