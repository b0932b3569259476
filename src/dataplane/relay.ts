/**
 * The relay listener (DESIGN §12): svc-sidecar in front of the application in its pod.
 * A request that matches a route has its JSON body transformed on the way in and the
 * application's JSON answer transformed on the way out, through the same Forwarder and
 * engine as `/proxy`. Everything else — other paths, non-JSON bodies, WebSocket
 * upgrades — streams through untouched via http-proxy-3.
 *
 * Pipeline of a matched request: match the route → log it → resolve its configuration →
 * transform the body → forward to the upstream → transform or relay the answer.
 */
import type { IncomingMessage, Server } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Socket } from 'node:net';
import { createProxyServer, type ProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import { EndUserIdentity } from '../auth/end-user.ts';
import type { RelayConfig } from '../config/schema.ts';
import type { TokenCodec } from '../crypto/token.ts';
import { BadRequestError, InvalidQueryError, SvcError } from '../errors.ts';
import { splitTarget } from '../fields/query.ts';
import type { Configuration } from '../store/configurations.ts';
import { RequestContext } from '../http/context.ts';
import { answerAndClose, Listener, type ListenerOptions } from '../http/listener.ts';
import { Agent as HttpAgent, METHODS, ServerResponse } from '../http/node-http.ts';
import { isOwnHeader } from '../http/svc-headers.ts';
import { sendError } from '../http/respond.ts';
import type { Destination } from './destination.ts';
import { hasBody } from '../http/body.ts';
import { mapUpstreamError, unforwardableHeader, unforwardableHeaderError, type ForwardOptions } from './forwarder.ts';
import { ClassificationAccess, FOR_THE_POD } from '../auth/classification-access.ts';
import { RelayGuard } from './relay-guard.ts';
import { transformRouteQuery } from './route-query.ts';
import { requestBody } from './route-request.ts';
import { routeForwardOptions } from './route-response.ts';
import { compileTransformRoute, logRouteRequest, routeConfiguration, type TransformRoute } from './transform-routes.ts';
import { compileGlob, findRoute, normalizePath, routingPaths, type RoutePattern } from './route-match.ts';
import type { Services } from '../services.ts';

export interface RelayRoute extends TransformRoute, RoutePattern {}

/** Compiles `relay.routes` once at start; a bad route is a ConfigError naming it. */
export function compileRelayRoutes(config: RelayConfig): RelayRoute[] {
  return config.routes.map((route, i) => ({
    // An unnamed route is named by its position, so its log entries still say which.
    ...compileTransformRoute(`relay:${route.name ?? `route-${i + 1}`}`, route),
    method: route.match.method ?? null,
    path: compileGlob(route.match.path),
  }));
}

/**
 * The route the application would send a request to, whichever method it routes it by:
 * HEAD also matches a GET route (Express, Rails, Spring and most routers answer HEAD with
 * the GET handler), and a method override (`x-http-method-override` and its kin, a
 * `_method` query parameter, see `methodOverrides`) is read as the application's
 * method-override middleware would read it. When the request's own method and an override
 * lead to different routes (or one to none) the request is refused with 400: only one
 * route's transform can apply, and the wrong one would let the other's fields by.
 */
export function findRelayRoute(routes: readonly RelayRoute[], method: string, overrides: readonly MethodOverride[], paths: readonly string[]): { route: RelayRoute; path: string } | null {
  const routeFor = (name: string) => findRoute(routes, name, paths) ?? (name === 'HEAD' ? findRoute(routes, 'GET', paths) : null);
  const own = routeFor(method);
  for (const override of overrides) {
    if (override.method === method) continue;
    const other = routeFor(override.method);
    if ((other?.route ?? null) !== (own?.route ?? null)) throw new BadRequestError(overriddenMethodMessage(override.source));
  }
  return own;
}

export interface MethodOverride {
  /** Upper case, trimmed. */
  readonly method: string;
  /** Where it was read: a header's name, or `_method`. */
  readonly source: string;
}

/** Methods an override may name: middleware ignores any other value. */
const KNOWN_METHODS: ReadonlySet<string> = new Set(METHODS);

/** Headers that method-override middleware (Express method-override, Rack, Laravel, Spring) reads. */
const OVERRIDE_HEADERS = ['x-http-method-override', 'x-http-method', 'x-method-override'] as const;

/**
 * The methods a request names besides its own: each override header's values and each
 * `_method` query parameter (name compared case-insensitively, values decoded), when it
 * names a known method (middleware ignores others). A name or value that does not decode
 * is skipped here; the guard refuses such a query anyway.
 */
export function methodOverrides(headers: IncomingMessage['headers'], query: string | null): MethodOverride[] {
  const found: MethodOverride[] = [];
  for (const name of OVERRIDE_HEADERS) {
    const value = headers[name];
    if (value === undefined) continue;
    for (const part of (Array.isArray(value) ? value.join(',') : value).split(',')) {
      const method = part.trim().toUpperCase();
      if (KNOWN_METHODS.has(method)) found.push({ method, source: name });
    }
  }
  if (query !== null) {
    for (const param of query.split(/[&;]/)) {
      const eq = param.indexOf('=');
      const name = decodeQueryPart(eq === -1 ? param : param.slice(0, eq));
      if (name?.trim().toLowerCase() !== '_method') continue;
      const value = eq === -1 ? '' : decodeQueryPart(param.slice(eq + 1));
      const method = value?.trim().toUpperCase();
      if (method !== undefined && KNOWN_METHODS.has(method)) found.push({ method, source: '_method' });
    }
  }
  return found;
}

function decodeQueryPart(text: string): string | null {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    return null;
  }
}

function overriddenMethodMessage(source: string): string {
  return `The request overrides its method with ${source}, and the two methods match different relay routes.`;
}

export class RelayServer {
  readonly listener: Listener;
  private readonly services: Services;
  private readonly logger: Logger;
  private readonly routes: readonly RelayRoute[];
  private readonly upstream: URL;
  /** The upstream as a trusted destination, for error mapping. */
  private readonly upstreamDestination: Destination;
  private readonly proxy: ProxyServer;
  private readonly agent: HttpAgent;
  private readonly guard: RelayGuard | null;
  /** `relay.identity`: who the application's end user is, for the api log (and reveal levels). */
  private readonly identity: EndUserIdentity | null;

  constructor(config: RelayConfig, routes: readonly RelayRoute[], services: Services, options: ListenerOptions) {
    this.services = services;
    this.logger = services.logger;
    this.routes = routes;
    this.guard = config.protect === undefined ? null : new RelayGuard(config.protect);
    this.identity = config.identity === undefined ? null : EndUserIdentity.fromConfig(config.identity.jwt, services.logger);
    this.upstream = new URL(config.upstream);
    this.upstreamDestination = {
      url: this.upstream,
      origin: this.upstream.origin,
      path: '/',
      authorization: null,
      trusted: true,
      entry: this.upstream.origin,
    };
    // http-proxy-3 opens a connection per request without an agent (and asks for
    // `connection: close`); a keep-alive pool is what a sidecar in front of an app wants.
    this.agent = this.upstream.protocol === 'https:' ? new HttpsAgent({ keepAlive: true, maxSockets: 256 }) : new HttpAgent({ keepAlive: true, maxSockets: 256 });
    this.proxy = createProxyServer({
      target: this.upstream,
      agent: this.agent,
      connectTimeout: services.config.forwarding.connect_timeout,
      // A transparent hop: no x-forwarded-*, the client's Host kept, redirects relayed.
      xfwd: false,
      changeOrigin: false,
      followRedirects: false,
    });
    // http-proxy-3 reports the errors of a proxied connection's client socket (a reset
    // after the 101 of a WebSocket, a write after the client left) as `error` events, and
    // throws them when nobody listens: one client could end the process. Nobody is left to
    // answer on that connection, so it is closed.
    this.proxy.on('error', (err: Error, _req: IncomingMessage, target: unknown) => {
      if (this.logger.isLevelEnabled('debug')) this.logger.debug({ err }, 'relay: a proxied connection failed');
      if (target instanceof Socket || target instanceof ServerResponse) target.destroy();
    });
    this.listener = new Listener('relay', config.listen, (ctx) => this.onRequest(ctx), options);
    this.listener.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => this.onUpgrade(req, socket, head));
  }

  get server(): Server {
    return this.listener.server;
  }

  /** Stops accepting, lets requests finish within `drainTimeout` ms, then cuts the rest and WebSockets. */
  async close(drainTimeout: number): Promise<void> {
    await this.listener.close(drainTimeout);
    this.agent.destroy();
    await this.identity?.close();
  }

  private onRequest(ctx: RequestContext): Promise<void> | void {
    const method = ctx.req.method ?? 'GET';
    const paths = routingPaths(ctx.req.url ?? '/');
    if (paths === null) {
      ctx.route = 'relay:refused';
      ctx.closeConnection = true;
      throw new BadRequestError(UNMATCHABLE_TARGET);
    }
    this.guardPathParameters(ctx);
    // Read before the `x-svc-` headers go: they are not the application's, but its overrides are.
    const overrides = methodOverrides(ctx.req.headers, splitTarget(targetOf(ctx.req.url ?? '/')).query);
    stripOwnHeaders(ctx);
    let found: { route: RelayRoute; path: string } | null;
    try {
      found = findRelayRoute(this.routes, method, overrides, paths);
    } catch (err) {
      ctx.route = 'relay:refused';
      ctx.closeConnection = true;
      throw err;
    }
    if (found === null) {
      ctx.route = 'relay:passthrough';
      this.services.metrics.countPassthrough();
      // A target that no route matched only as spelled (`/patients#x`, `/patients/%2e%2e/x`)
      // could be a route's path to the application: refused, with a body or without.
      if (!passesUnchanged(ctx.req.url)) {
        ctx.closeConnection = true;
        throw new BadRequestError(UNCHANGEABLE_TARGET);
      }
      // A body still passes the guard: only bodiless requests go straight through, their
      // query string guarded too.
      if (this.guard !== null && hasBody(ctx)) return this.forwardGuarded(ctx);
      if (this.guard !== null) this.guardPassThroughQuery(ctx);
      this.passThrough(ctx);
      return;
    }
    ctx.route = found.route.label;
    return this.relayRoute(ctx, found.route, found.path);
  }

  private async relayRoute(ctx: RequestContext, route: RelayRoute, path: string): Promise<void> {
    logRouteRequest(ctx, route, path === '' ? '/' : path);
    // Never fails: a reader who cannot be identified is anonymous (null).
    if (this.identity !== null) ctx.endUser = await this.identity.resolve(ctx.req.headers, this.services.store);
    ctx.destination = this.upstream.origin;
    const configuration = routeConfiguration(ctx, this.services, route);
    const query = this.routeQuery(ctx, route, configuration);
    const request = await requestBody(ctx, this.services, route, configuration, { guard: this.guard });
    // Answers decrypt as the end user when the relay knows who reads (DESIGN §14): each
    // classification's reveal rules decide, the anonymous get its default, and a deny is a
    // redact, so the application's answer never fails because of its reader. Without
    // relay.identity, for the pod: every value plain.
    const reveal = this.identity === null ? FOR_THE_POD : new ClassificationAccess(this.services.store, ctx.endUser, { denyAsRedact: true });
    await this.services.forwarder.forward(ctx, this.destinationFor(ctx, query), request.body, routeForwardOptions(this.services, route, configuration, true, null, reveal));
    request.recordUsage();
  }

  /**
   * The query string to send on for a matched route: the route's `query` rules, then the
   * guard over what they wrote (tokens the route just wrote are kept). Null: the target
   * has no query.
   */
  private routeQuery(ctx: RequestContext, route: RelayRoute, configuration: Configuration): string | null {
    let query = splitTarget(targetOf(ctx.req.url ?? '/')).query;
    if (query === null) return null;
    let codec: TokenCodec | null = null;
    let minted: ReadonlySet<string> | null = null;
    if (route.query !== null) {
      const done = transformRouteQuery(ctx, this.services, configuration, route.query, query, { minted: this.guard !== null });
      query = done.query;
      codec = done.codec;
      minted = done.minted;
    }
    return this.guard === null ? query : this.guard.query(ctx, this.services, query, codec, minted);
  }

  /** A request that matched no route but has a body: on to the application through the guard. */
  private async forwardGuarded(ctx: RequestContext): Promise<void> {
    ctx.destination = this.upstream.origin;
    const query = this.guardedQuery(ctx);
    const request = await requestBody(ctx, this.services, null, null, { guard: this.guard });
    await this.services.forwarder.forward(ctx, this.destinationFor(ctx, query), request.body, PASS_THROUGH);
  }

  /**
   * The guard over the `;`-parameters of the path's segments (`/patients;ssn=…/7`), which
   * JAX-RS (`@MatrixParam`) and Spring (`@MatrixVariable`) hand to the application like a
   * query. They are read as a query is, but a plaintext protected value is refused (422)
   * whatever `on_plaintext` says: the path is matched against routes and is not rewritten.
   */
  private guardPathParameters(ctx: RequestContext): void {
    if (this.guard === null) return;
    for (const parameters of pathParameters(ctx.req.url ?? '/')) {
      try {
        this.guard.query(null, this.services, parameters);
      } catch (err) {
        ctx.route = 'relay:refused';
        ctx.closeConnection = true;
        throw err instanceof InvalidQueryError ? new BadRequestError(UNREADABLE_PATH_PARAMETERS) : err;
      }
    }
  }

  /** The guard over the query of a request no route matched; null: it has none. */
  private guardedQuery(ctx: RequestContext): string | null {
    const query = splitTarget(targetOf(ctx.req.url ?? '/')).query;
    return query === null || this.guard === null ? query : this.guard.query(ctx, this.services, query);
  }

  /**
   * The upstream plus the request's own path and query, as sent (never normalized); the
   * query replaced by `query` when the route or the guard rewrote it.
   */
  private destinationFor(ctx: RequestContext, query: string | null = null): Destination {
    let target = targetOf(ctx.req.url ?? '/');
    if (query !== null) target = `${splitTarget(target).path}?${query}`;
    const prefix = this.upstream.pathname === '/' ? '' : this.upstream.pathname.replace(/\/$/, '');
    return { ...this.upstreamDestination, path: `${prefix}${target}` };
  }

  /** Rewrites the target of a bodiless pass-through when the guard encrypted in its query. */
  private guardPassThroughQuery(ctx: RequestContext): void {
    const target = ctx.req.url ?? '/';
    const { path, query } = splitTarget(target);
    if (query === null) return;
    const guarded = this.guard!.query(ctx, this.services, query);
    if (guarded !== query) ctx.req.url = `${path}?${guarded}`;
  }

  private passThrough(ctx: RequestContext): void {
    ctx.res.setHeader('x-svc-request-id', ctx.id);
    // The same rule as for transformed requests (Forwarder): control and non-ASCII bytes
    // in a header value never reach the application, whichever way the request goes.
    const unsafe = unforwardableHeader(ctx.req.headers);
    if (unsafe !== null) {
      ctx.closeConnection = true;
      throw unforwardableHeaderError(unsafe);
    }
    this.proxy.web(ctx.req, ctx.res, (err) => {
      // Answer with a gateway status while nothing has been sent; afterwards the only
      // honest signal left is cutting the response (sendError does that).
      sendError(ctx, mapUpstreamError(err, this.upstreamDestination), this.logger);
    });
  }

  private onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    this.listener.adopt(socket);
    socket.on('error', () => socket.destroy());
    stripOwn(req.headers);
    if (unforwardableHeader(req.headers) !== null || !passesUnchanged(req.url) || normalizePath(req.url ?? '/') === null) {
      answerAndClose(socket, new BadRequestError('Bad request.'));
      return;
    }
    // A protected parameter in plaintext in an upgrade's query or path parameters is refused
    // (they cannot be rewritten and counted like a request's): the guard never lets it by.
    const query = splitTarget(req.url ?? '/').query;
    if (this.guard !== null) {
      try {
        for (const parameters of pathParameters(req.url ?? '/')) this.guard.query(null, this.services, parameters);
        if (query !== null) this.guard.query(null, this.services, query);
      } catch (err) {
        answerAndClose(socket, err instanceof SvcError ? err : new BadRequestError('Bad request.'));
        return;
      }
    }
    this.proxy.ws(req, socket, head, (err) => {
      const error = mapUpstreamError(err, this.upstreamDestination);
      // The path only: an application's query string may carry its own tokens.
      this.logger.warn({ err: error.cause ?? error, code: error.code, path: (req.url ?? '').split('?', 1)[0]!.slice(0, 1024) }, 'relay: WebSocket upgrade failed');
      // Nothing written yet means the 101 never went out: say why before the close.
      if (socket.writable && socket.bytesWritten === 0) answerAndClose(socket, error);
    });
  }
}

/** The origin-form target of a request: an absolute-form one's path and query. */
function targetOf(raw: string): string {
  if (raw.startsWith('/')) return raw;
  const parsed = URL.parse(raw);
  return parsed === null ? '/' : `${parsed.pathname}${parsed.search}`;
}

/** The `;`-parameters of each segment of a target's path (`/a;x=1;y=2/b` gives `x=1;y=2`), as written. */
export function pathParameters(target: string): string[] {
  const path = splitTarget(targetOf(target)).path;
  if (!path.includes(';')) return [];
  const found: string[] = [];
  for (const segment of path.split('/')) {
    const semi = segment.indexOf(';');
    if (semi !== -1 && semi + 1 < segment.length) found.push(segment.slice(semi + 1));
  }
  return found;
}

const UNREADABLE_PATH_PARAMETERS = 'The request path has a ";" parameter that is not valid percent-encoding or UTF-8.';
const UNCHANGEABLE_TARGET = 'The request target cannot be passed on unchanged.';
const UNMATCHABLE_TARGET = 'The request path cannot be read the same way by every router: it holds an escaped ";", a control byte, a space or a stray "%".';

/** Requests that matched no route keep the application's own credentials and host. */
const PASS_THROUGH: ForwardOptions = { keepAuthorization: true, keepHost: true };

/** `x-svc-*` headers are svc-sidecar's own: none reaches the application, on any path. */
function stripOwnHeaders(ctx: RequestContext): void {
  stripOwn(ctx.req.headers);
}

function stripOwn(headers: IncomingMessage['headers']): void {
  for (const name of Object.keys(headers)) if (isOwnHeader(name)) delete headers[name];
}

/**
 * Whether the pass-through (http-proxy-3, which re-parses the target as a URL) would send
 * the application exactly the target the client wrote. Anything it would rewrite — dot
 * segments, `\`, a fragment, characters a URL escapes, absolute form — or cannot parse
 * at all is refused: a rewritten path could land on a route's path without the route's
 * transform, and an unparsable one would throw inside the proxy.
 */
function passesUnchanged(target: string | undefined): boolean {
  if (target === undefined || !target.startsWith('/') || target.startsWith('//')) return false;
  const parsed = URL.parse(target, 'http://relay.invalid');
  return parsed !== null && `${parsed.pathname}${parsed.search}` === target;
}
