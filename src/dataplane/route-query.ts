/**
 * The query side of a relay or egress route (DESIGN §15 `query:`): the named parameters of
 * the request's query string encrypted or decrypted before anything is forwarded, the rest
 * of it copied byte for byte. Runs before the body is read, so a bad or wrongly classified
 * token stops the request (422 / 403) with nothing sent.
 */
import type { RevealPolicy } from '../auth/classification-access.ts';
import { transformQuery } from '../fields/query.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { recordUsage } from '../telemetry/usage.ts';
import type { DecryptedPaths } from './echo-guard.ts';
import { DecryptHandler, EncryptHandler } from './field-handlers.ts';
import { routeHandler, type TransformSpec } from './transform-routes.ts';
import type { TokenCodec } from '../crypto/token.ts';

export interface RouteQuery {
  /** The query to send on, without its `?`. */
  readonly query: string;
  /** Parameters replaced. */
  readonly count: number;
  /** Where tokens were decrypted (path → classification), with `record.paths`. */
  readonly decryptedAt: DecryptedPaths | null;
  /** The tokens written, with `record.minted` (for the relay guard that reads them next). */
  readonly minted: ReadonlySet<string> | null;
  readonly codec: TokenCodec;
}

/**
 * `query` (without its `?`) through the route's `spec`. Throws the handler's failure (422,
 * 403, 409) or a 400 for a query that does not decode; records a usage entry when a
 * parameter was replaced.
 */
export function transformRouteQuery(
  ctx: RequestContext,
  services: Services,
  configuration: Configuration,
  spec: TransformSpec,
  query: string,
  record: { readonly minted?: boolean; readonly paths?: boolean } = {},
  reveal?: RevealPolicy,
): RouteQuery {
  const { handler, codec, matcher, limits } = routeHandler(services, configuration, spec, record, reveal);
  const out = transformQuery(query, matcher, handler, limits);
  const failure = handler.failure();
  if (failure !== null) throw failure;
  const decrypting = handler instanceof DecryptHandler;
  if (handler.count > 0) recordUsage(ctx, services, configuration, spec.mode, handler.count, query.length, decrypting ? handler.reveal : null);
  return {
    query: out,
    count: handler.count,
    decryptedAt: decrypting ? handler.decryptedAt : null,
    minted: handler instanceof EncryptHandler ? handler.minted : null,
    codec,
  };
}
