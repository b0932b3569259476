/**
 * One base for every listener (main, admin, relay, and any to come): it owns the Node
 * server, binding, draining on close, the answers to requests Node's parser rejects, and
 * the end-of-request hook where metrics and the api log are written. A listener is its
 * name, its address and one request handler; every thrown error goes through the one
 * error mapper, and the process keeps serving whatever a handler throws.
 */
import type { Server, ServerOptions as HttpServerOptions } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { parseListen } from '../config/listen.ts';
import { BadRequestError, ClientGoneError, HeaderTooLargeError, ListenError, RequestTimeoutError, type SvcError } from '../errors.ts';
import { RequestContext } from './context.ts';
import { createServer } from './node-http.ts';
import { sendError } from './respond.ts';
import type { Router } from './router.ts';

export type Handler<S> = (ctx: RequestContext, services: S) => Promise<void> | void;
export type RequestHandler = (ctx: RequestContext) => Promise<void> | void;

export interface ServerOptions {
  readonly maxHeaderSize: number;
  readonly headersTimeout: number;
  readonly requestTimeout: number;
  readonly keepAliveTimeout: number;
}

export interface ListenerOptions {
  readonly server: ServerOptions;
  readonly logger: Logger;
  /** Runs once per request as it arrives, before its handler. */
  readonly onStart?: (ctx: RequestContext) => void;
  /** Runs once per request when its exchange ends (the response closed, sent or not). */
  readonly onFinish?: (ctx: RequestContext) => void;
}

export class Listener {
  /** `main`, `admin`, `relay`: how errors and logs name this listener. */
  readonly name: string;
  /** `host:port` as configured. */
  readonly address: string;
  readonly server: Server;
  /** Sockets taken over by an upgrade (WebSocket): the HTTP server no longer tracks them. */
  private readonly upgraded = new Set<Socket>();

  constructor(name: string, address: string, handle: RequestHandler, options: ListenerOptions) {
    this.name = name;
    this.address = address;
    const { logger, onStart, onFinish } = options;
    this.server = createServer(nodeServerOptions(options.server), (req, res) => {
      const ctx = new RequestContext(req, res);
      if (onFinish !== undefined) res.once('close', () => onFinish(ctx));
      if (onStart !== undefined) onStart(ctx);
      let result: Promise<void> | void;
      try {
        result = handle(ctx);
      } catch (err) {
        fail(ctx, err, logger);
        return;
      }
      if (result !== undefined) result.catch((err: unknown) => fail(ctx, err, logger));
    });
    this.server.on('clientError', answerClientError);
  }

  /** Binds the configured address; rejects with a ListenError naming this listener. */
  listen(): Promise<AddressInfo> {
    const { host, port } = parseListen(this.address);
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(new ListenError(this.name, this.address, err));
      this.server.once('error', onError);
      this.server.listen(port, host, () => {
        this.server.off('error', onError);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  /** Keeps an upgraded socket so that close() can end it. */
  adopt(socket: Socket): void {
    this.upgraded.add(socket);
    socket.once('close', () => this.upgraded.delete(socket));
  }

  /** Stops accepting, lets in-flight requests finish within `drainTimeout` ms, then cuts the rest. */
  async close(drainTimeout: number): Promise<void> {
    for (const socket of this.upgraded) socket.destroy();
    if (!this.server.listening) return;
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
}

/** The handler of a listener that serves a router's routes. */
export function routerHandler<S>(router: Router<Handler<S>>, services: S): RequestHandler {
  return (ctx) => {
    const match = router.find(ctx.req.method ?? 'GET', ctx.path);
    ctx.route = match.template;
    ctx.params = match.params;
    return match.handler(ctx, services);
  };
}

/**
 * Binds every listener or none: if one cannot bind, those already bound are closed and the
 * error names the one that failed. A process half-started would report not ready forever.
 */
export async function listenAll(listeners: readonly Listener[]): Promise<AddressInfo[]> {
  const bound: Listener[] = [];
  const addresses: AddressInfo[] = [];
  try {
    for (const listener of listeners) {
      addresses.push(await listener.listen());
      bound.push(listener);
    }
  } catch (err) {
    await Promise.all(bound.map((listener) => listener.close(0)));
    throw err;
  }
  return addresses;
}

/** The `http.createServer` options of every listener. */
export function nodeServerOptions(options: ServerOptions): HttpServerOptions {
  const shortest = Math.min(...[options.headersTimeout, options.requestTimeout].filter((ms) => ms > 0));
  return {
    maxHeaderSize: options.maxHeaderSize,
    headersTimeout: options.headersTimeout,
    requestTimeout: options.requestTimeout,
    keepAliveTimeout: options.keepAliveTimeout,
    // Node enforces headersTimeout and requestTimeout only when it sweeps its connections,
    // every 30 s by default: a 10 s headers timeout would let a slow client hold its
    // connection for up to 40 s. Sweep often enough that a timeout is late by a quarter
    // of itself at most (and at most a second).
    connectionsCheckingInterval: Number.isFinite(shortest) ? Math.max(50, Math.min(1_000, Math.floor(shortest / 4))) : 1_000,
  };
}

/** How long a rejected client may still read our answer before its connection is cut. */
const CLIENT_ERROR_LINGER_MS = 1_000;

/**
 * Node's parser rejected the request (malformed, oversized headers, too slow) before any
 * handler saw it: answer with the matching status when the socket can still take it
 * (RFC 9110 §15.5.1, RFC 6585 §5), then close. Half-closing alone is not enough: a
 * client that keeps sending would hold the connection open forever.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  // A response already under way (a request timeout during a long relay) cannot be
  // followed by another status line in the same stream: cutting is the only signal left.
  const inProgress = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
  if (!socket.writable || (err.code === 'ECONNRESET' && !socket.readable) || inProgress?.headersSent === true) {
    socket.destroy();
    return;
  }
  const error =
    err.code === 'HPE_HEADER_OVERFLOW' ? new HeaderTooLargeError() : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new RequestTimeoutError() : new BadRequestError('Bad request.');
  answerAndClose(socket, error);
}

const REASONS: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

/**
 * Writes an error's answer as raw HTTP/1.1 on a socket no handler owns (a rejected
 * request, a failed upgrade), then closes it.
 */
export function answerAndClose(socket: Duplex, error: SvcError): void {
  const body = JSON.stringify(error.body());
  socket.end(
    `HTTP/1.1 ${error.status} ${REASONS[error.status] ?? 'Error'}\r\n` +
      `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  // Not at once: a reset right after the answer can wipe it from the client's receive buffer.
  setTimeout(() => socket.destroy(), CLIENT_ERROR_LINGER_MS).unref();
}

function fail(ctx: RequestContext, err: unknown, logger: Logger): void {
  if (err instanceof ClientGoneError) {
    ctx.res.destroy();
    return;
  }
  sendError(ctx, err, logger);
}
