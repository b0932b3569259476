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
import { Agent as HttpAgent, createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { createProxyServer, type ProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import { parseListen } from '../config/load.ts';
import type { RelayConfig } from '../config/schema.ts';
import { ClientGoneError } from '../http/body.ts';
import { BadRequestError } from '../errors.ts';
import { RequestContext } from '../http/context.ts';
import { sendError } from '../http/respond.ts';
import { answerAndClose, answerClientError, nodeServerOptions, type ServerOptions } from '../http/server.ts';
import type { Destination } from './destination.ts';
import { mapUpstreamError, unforwardableHeader, unforwardableHeaderError } from './forwarder.ts';
import { compileTransformRoute, logRouteRequest, requestBody, routeConfiguration, routeForwardOptions, transformsRequest, type TransformRoute } from './route-transform.ts';
import type { Services } from '../services.ts';

export interface RelayRoute extends TransformRoute {
  /** Upper-case; null matches every method. */
  readonly method: string | null;
  /** Matched against the normalized path (see `normalizePath`). */
  readonly path: RegExp;
}

/** Compiles `relay.routes` once at start; a bad route is a ConfigError naming it. */
export function compileRelayRoutes(config: RelayConfig): RelayRoute[] {
  return config.routes.map((route, i) => ({
    // An unnamed route is named by its position, so its log entries still say which.
    ...compileTransformRoute(`relay:${route.name ?? `route-${i + 1}`}`, `relay.routes[${i}]`, route),
    method: route.match.method ?? null,
    path: compileGlob(route.match.path),
  }));
}

/**
 * `*` matches within one segment, a whole `**` segment any number of segments (none
 * included). Matching ignores case, like many application routers (Express's default):
 * matching too much only transforms more, matching too little would let plaintext by.
 */
export function compileGlob(pattern: string): RegExp {
  let source = '';
  for (const segment of pattern.split('/')) {
    if (segment === '') continue;
    if (segment === '**') {
      source += '(?:/[^/]+)*';
      continue;
    }
    source += `/${segment
      .split(/\*+/)
      .map((literal) => literal.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
      .join('[^/]*')}`;
  }
  return new RegExp(`^${source}$`, 'i');
}

/**
 * The path the application's router most likely sees, so a route cannot be dodged by
 * spelling: percent-decoded segments, no empty segments (`//`, trailing `/`), `.` and
 * `..` resolved, no query. The root is the empty string. Null for `*` (OPTIONS).
 */
export function normalizePath(url: string): string | null {
  let path = url;
  if (!path.startsWith('/')) {
    // absolute-form (RFC 9112 §3.2.2): the application would route on its path.
    const parsed = URL.parse(url);
    if (parsed === null) return null;
    path = parsed.pathname;
  }
  const q = path.indexOf('?');
  if (q !== -1) path = path.slice(0, q);
  const out: string[] = [];
  for (const raw of path.split('/')) {
    let segment = raw;
    if (segment.includes('%')) {
      try {
        segment = decodeURIComponent(segment);
      } catch {
        // Not valid percent-encoding: the application cannot decode it either.
      }
    }
    if (segment === '' || segment === '.') continue;
    if (segment === '..') out.pop();
    else out.push(segment);
  }
  return out.length === 0 ? '' : `/${out.join('/')}`;
}

function findRoute(routes: readonly RelayRoute[], method: string, path: string): RelayRoute | null {
  for (const route of routes) {
    if ((route.method === null || route.method === method) && route.path.test(path)) return route;
  }
  return null;
}

export class RelayServer {
  readonly server: Server;
  private readonly services: Services;
  private readonly logger: Logger;
  private readonly routes: readonly RelayRoute[];
  private readonly listenAddress: string;
  private readonly upstream: URL;
  /** The upstream as a trusted destination, for error mapping. */
  private readonly upstreamDestination: Destination;
  private readonly proxy: ProxyServer;
  private readonly agent: HttpAgent;
  /** Upgraded (WebSocket) client sockets: the HTTP server no longer tracks them. */
  private readonly upgraded = new Set<Socket>();

  constructor(config: RelayConfig, routes: readonly RelayRoute[], services: Services, options: ServerOptions) {
    this.services = services;
    this.logger = services.logger;
    this.routes = routes;
    this.listenAddress = config.listen;
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
    this.server = createServer(nodeServerOptions(options), (req, res) => this.onRequest(req, res));
    this.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => this.onUpgrade(req, socket, head));
    // As on the main listener: oversized headers get 431, a slow client 408, then the close.
    this.server.on('clientError', answerClientError);
  }

  async listen(): Promise<AddressInfo> {
    const { host, port } = parseListen(this.listenAddress);
    const address = await new Promise<AddressInfo>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve(this.server.address() as AddressInfo);
      });
    });
    this.logger.info({ relay: `${address.address}:${address.port}`, upstream: this.upstream.origin, routes: this.routes.length }, 'relay listening');
    return address;
  }

  /** Stops accepting, lets requests finish within `drainTimeout` ms, then cuts the rest and WebSockets. */
  async close(drainTimeout: number): Promise<void> {
    for (const socket of this.upgraded) socket.destroy();
    if (this.server.listening) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => this.server.closeAllConnections(), drainTimeout);
        timer.unref();
        this.server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        this.server.closeIdleConnections();
      });
    }
    this.agent.destroy();
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const method = req.method ?? 'GET';
    const path = normalizePath(req.url ?? '/');
    const route = path === null ? null : findRoute(this.routes, method, path);
    if (route === null) {
      this.passThrough(req, res);
      return;
    }
    const ctx = new RequestContext(req, res);
    ctx.route = route.label;
    this.relayRoute(ctx, route, path!).catch((err: unknown) => {
      if (err instanceof ClientGoneError) ctx.res.destroy();
      else sendError(ctx, err, this.logger);
    });
  }

  private async relayRoute(ctx: RequestContext, route: RelayRoute, path: string): Promise<void> {
    logRouteRequest(ctx, this.services, route, path === '' ? '/' : path);
    ctx.destination = this.upstream.origin;
    const configuration = routeConfiguration(ctx, this.services, route);
    // Nothing to transform either way: the bytes go through untouched, as for other paths.
    if (route.response === null && !transformsRequest(ctx, route)) {
      this.passThrough(ctx.req, ctx.res);
      return;
    }
    const request = await requestBody(ctx, this.services, route, configuration);
    await this.services.forwarder.forward(ctx, this.destinationFor(ctx), request.body, routeForwardOptions(this.services, route, configuration, true));
    request.recordUsage();
  }

  /** The upstream plus the request's own path and query, as sent (never normalized). */
  private destinationFor(ctx: RequestContext): Destination {
    const raw = ctx.req.url ?? '/';
    let target = raw;
    if (!raw.startsWith('/')) {
      const parsed = URL.parse(raw);
      target = parsed === null ? '/' : `${parsed.pathname}${parsed.search}`;
    }
    const prefix = this.upstream.pathname === '/' ? '' : this.upstream.pathname.replace(/\/$/, '');
    return { ...this.upstreamDestination, path: `${prefix}${target}` };
  }

  private passThrough(req: IncomingMessage, res: ServerResponse): void {
    // The same rule as for transformed requests (Forwarder): control and non-ASCII bytes
    // in a header value never reach the application, whichever way the request goes.
    const unsafe = unforwardableHeader(req.headers);
    if (unsafe !== null || !passesUnchanged(req.url)) {
      const ctx = new RequestContext(req, res);
      ctx.closeConnection = true;
      sendError(ctx, unsafe !== null ? unforwardableHeaderError(unsafe) : new BadRequestError(UNCHANGEABLE_TARGET), this.logger);
      return;
    }
    this.proxy.web(req, res, (err) => {
      // Answer with a gateway status while nothing has been sent; afterwards the only
      // honest signal left is cutting the response (sendError does that).
      const ctx = new RequestContext(req, res);
      sendError(ctx, mapUpstreamError(err, this.upstreamDestination), this.logger);
    });
  }

  private onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    this.upgraded.add(socket);
    socket.once('close', () => this.upgraded.delete(socket));
    socket.on('error', () => socket.destroy());
    if (unforwardableHeader(req.headers) !== null || !passesUnchanged(req.url)) {
      answerAndClose(socket, 400);
      return;
    }
    this.proxy.ws(req, socket, head, (err) => {
      const error = mapUpstreamError(err, this.upstreamDestination);
      // The path only: an application's query string may carry its own tokens.
      this.logger.warn({ err: error.cause ?? error, code: error.code, path: (req.url ?? '').split('?', 1)[0]!.slice(0, 1024) }, 'relay: WebSocket upgrade failed');
      // Nothing written yet means the 101 never went out: say why before the close.
      if (socket.writable && socket.bytesWritten === 0) {
        const body = JSON.stringify(error.body());
        socket.write(
          `HTTP/1.1 ${error.status} ${error.status === 504 ? 'Gateway Timeout' : 'Bad Gateway'}\r\n` +
            `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
        );
      }
    });
  }
}

const UNCHANGEABLE_TARGET = 'The request target cannot be passed on unchanged.';

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
