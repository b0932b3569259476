/**
 * Egress routes (DESIGN §12): the application calls `/egress/{name}/{rest}` on the main
 * listener and the request goes to the route's `destination` + `/{rest}` + query, its
 * body transformed on the way (typically decrypted, so the application never holds
 * plaintext), the vendor's answer relayed back (optionally transformed too).
 *
 * Pipeline: find the route → log it → resolve its configuration → build the destination
 * → transform the body → forward and relay.
 */
import type { EgressRoute as EgressConfig } from '../config/schema.ts';
import { DestinationNotAllowedError, EgressPathRefusedError, NotFoundError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { parseDestination, type Destination } from './destination.ts';
import { transformRouteQuery } from './route-query.ts';
import { requestBody } from './route-request.ts';
import { guardsAnswers, joinDecrypted } from './echo-guard.ts';
import { routeForwardOptions } from './route-response.ts';
import { compileTransformRoute, logRouteRequest, routeConfiguration, type TransformRoute } from './transform-routes.ts';
import type { Services } from '../services.ts';

export interface EgressRoute extends TransformRoute {
  /** `protocol//userinfo@host` + the destination's path without its trailing `/`. */
  readonly base: string;
  /**
   * The destination as the one allowlist entry of the route: it names its host exactly,
   * so it may be a private address, and a path that climbs out of it (`../`) is refused.
   */
  readonly allow: string;
  /**
   * The request decrypts and the answer is not passed through (guardsAnswers): what it
   * decrypted is encrypted again in the answer, or with a `response` of its own searched
   * for (DESIGN §13).
   */
  readonly echoes: boolean;
}

/** The configured egress routes by name, compiled once at start. */
export class EgressRoutes {
  private readonly routes: ReadonlyMap<string, EgressRoute>;

  constructor(config: readonly EgressConfig[]) {
    const routes = new Map<string, EgressRoute>();
    config.forEach((entry) => {
      const url = new URL(entry.destination);
      const prefix = url.pathname.endsWith('/') ? url.pathname.slice(0, -1) : url.pathname;
      const userinfo = url.username === '' && url.password === '' ? '' : `${url.username}:${url.password}@`;
      const compiled = compileTransformRoute(`egress:${entry.name}`, entry);
      routes.set(entry.name, {
        ...compiled,
        echoes: guardsAnswers(compiled, entry.response === 'passthrough'),
        base: `${url.protocol}//${userinfo}${url.host}${prefix}`,
        allow: `${url.protocol}//${url.host}${prefix}/`,
      });
    });
    this.routes = routes;
  }

  get(name: string): EgressRoute | undefined {
    return this.routes.get(name);
  }
}

/** `/egress/:name/*rest`, any method. */
export async function egressRoute(ctx: RequestContext, services: Services): Promise<void> {
  const route = services.egress.get(ctx.params['name'] ?? '');
  if (route === undefined) throw new NotFoundError();
  const rest = ctx.params['rest'] ?? '';
  logRouteRequest(ctx, route, `/${rest}`);
  const configuration = routeConfiguration(ctx, services, route);
  if (isAmbiguousPath(rest)) throw new EgressPathRefusedError();
  // The query first: a bad token in it stops the request before the body is read.
  const query = route.query === null || ctx.rawQuery === '' ? null : transformRouteQuery(ctx, services, configuration, route.query, ctx.rawQuery, { paths: route.echoes });
  const destination = egressDestination(route, rest, query?.query ?? ctx.rawQuery);
  ctx.destination = destination.origin;
  if (query !== null) ctx.fieldsTransformed = query.count;
  // The application is told how many fields were transformed (a relay's clients are not),
  // and never gets back the plaintext a vendor echoes.
  const request = await requestBody(ctx, services, route, configuration, { reportCount: true, recordPaths: route.echoes });
  const decryptedAt = joinDecrypted(query?.decryptedAt ?? null, request.decryptedAt, route.echoes);
  await services.forwarder.forward(ctx, destination, request.body, routeForwardOptions(services, route, configuration, false, decryptedAt));
  request.recordUsage();
}

/**
 * The vendor URL for `{rest}` (already refused by egressRoute when isAmbiguousPath): one
 * that climbs out of the destination's path is refused; the answer never names the
 * vendor's host.
 */
function egressDestination(route: EgressRoute, rest: string, query: string): Destination {
  try {
    return parseDestination(`${route.base}/${rest}${query === '' ? '' : `?${query}`}`, [route.allow]);
  } catch (err) {
    if (err instanceof DestinationNotAllowedError) throw new EgressPathRefusedError();
    throw err;
  }
}

/**
 * Whether a vendor's server could read `path` (no query) as another path than the one it
 * is written as: an escaped `/`, `\`, `;` or `%`, a control byte, escapes that are not
 * UTF-8, or a dot segment in any spelling.
 */
export function isAmbiguousPath(path: string): boolean {
  return UNSAFE_REST.test(path) || !decodesAsUtf8(path) || path.split('/').some(isDotSegment);
}

/**
 * An escaped `/`, `\`, `;` or `%` (a second round of decoding), a raw `\`, or an escaped or
 * raw control byte: a vendor's server could read any of them as another path.
 */
const UNSAFE_REST = /%2f|%5c|%3b|%25|%[01][0-9a-f]|%7f|\\|[\x00-\x1f\x7f]/i;

/** Escapes that decode to UTF-8 (`%c0%ae` is an overlong `.`, which some decoders accept). */
function decodesAsUtf8(rest: string): boolean {
  try {
    decodeURIComponent(rest);
    return true;
  } catch {
    return false;
  }
}

/** `.` or `..`, however escaped (`%2e`, `.%2E`, ...). */
function isDotSegment(segment: string): boolean {
  const plain = segment.split(';', 1)[0]!.replace(/%2e/gi, '.');
  return plain === '.' || plain === '..';
}
