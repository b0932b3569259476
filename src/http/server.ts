/**
 * The main listener: one request handler that finds the route, runs it, and sends any
 * thrown error through the one error mapper. The process keeps serving whatever a
 * handler throws.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
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
  const server = createServer(
    {
      maxHeaderSize: options.maxHeaderSize,
      headersTimeout: options.headersTimeout,
      requestTimeout: options.requestTimeout,
      keepAliveTimeout: options.keepAliveTimeout,
    },
    dispatch,
  );
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Node's parser rejected the request before any handler saw it: answer with the
    // matching status when the socket can still take it (RFC 9110 §15.5.1, RFC 6585 §5).
    if (!socket.writable || (err.code === 'ECONNRESET' && !socket.readable)) {
      socket.destroy();
      return;
    }
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    const message = status === 431 ? 'Request header fields too large.' : status === 408 ? 'Request timeout.' : 'Bad request.';
    const body = JSON.stringify({ message });
    socket.end(
      `HTTP/1.1 ${status} ${status === 431 ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request'}\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
  return server;
}

function fail(ctx: RequestContext, err: unknown, logger: Logger): void {
  if (err instanceof ClientGoneError) {
    ctx.res.destroy();
    return;
  }
  sendError(ctx, err, logger);
}
