/**
 * The main listener: one request handler that finds the route, runs it, and sends any
 * thrown error through the one error mapper. The process keeps serving whatever a
 * handler throws.
 */
import { createServer, type IncomingMessage, type Server, type ServerOptions as HttpServerOptions, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ClientGoneError } from './body.ts';
import { RequestContext } from './context.ts';
import { sendError } from './respond.ts';
import type { Router } from './router.ts';

export type Handler<S> = (ctx: RequestContext, services: S) => Promise<void> | void;

export interface ServerOptions {
  readonly maxHeaderSize: number;
  readonly headersTimeout: number;
  readonly requestTimeout: number;
  readonly keepAliveTimeout: number;
}

export function createHttpServer<S>(
  router: Router<Handler<S>>,
  services: S,
  logger: Logger,
  options: ServerOptions,
  onFinish?: (ctx: RequestContext) => void,
): Server {
  const dispatch = (req: IncomingMessage, res: ServerResponse): void => {
    const ctx = new RequestContext(req, res);
    if (onFinish !== undefined) res.once('close', () => onFinish(ctx));
    let result: Promise<void> | void;
    try {
      const match = router.find(req.method ?? 'GET', ctx.path);
      ctx.route = match.template;
      ctx.params = match.params;
      result = match.handler(ctx, services);
    } catch (err) {
      fail(ctx, err, logger);
      return;
    }
    if (result !== undefined) result.catch((err: unknown) => fail(ctx, err, logger));
  };
  const server = createServer(nodeServerOptions(options), dispatch);
  server.on('clientError', answerClientError);
  return server;
}

/** The `http.createServer` options of every listener (main, admin, relay). */
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
  answerAndClose(socket, err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400);
}

/** Writes a bare 400, 408 or 431 answer on a socket no handler owns, then closes it. */
export function answerAndClose(socket: Duplex, status: 400 | 408 | 431): void {
  const message = status === 431 ? 'Request header fields too large.' : status === 408 ? 'Request timeout.' : 'Bad request.';
  const body = JSON.stringify({ message });
  socket.end(
    `HTTP/1.1 ${status} ${status === 431 ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request'}\r\n` +
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
