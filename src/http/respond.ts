/**
 * Writing responses, and the one place where errors become responses (DESIGN §7).
 */
import type { Logger } from 'pino';
import { InternalError, NotReadyError, StoreUnavailableError, SvcError } from '../errors.ts';
import type { RequestContext } from './context.ts';

export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

export function sendJson(ctx: RequestContext, status: number, body: unknown): void {
  sendBody(ctx, status, JSON_CONTENT_TYPE, Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body)));
}

/** A complete response of known length, with the request id (and `connection: close` when needed). */
export function sendBody(ctx: RequestContext, status: number, contentType: string, payload: Buffer): void {
  const res = ctx.res;
  res.statusCode = status;
  res.setHeader('content-type', contentType);
  res.setHeader('content-length', payload.length);
  res.setHeader('x-svc-request-id', ctx.id);
  if (ctx.closeConnection) closeAfterResponse(ctx);
  res.end(ctx.req.method === 'HEAD' ? undefined : payload);
}

const LINGER_MS = 2000;

/**
 * Answers `connection: close` when the request body was left unread. Node closes such a
 * socket as soon as the response is written; if the client is still uploading, that
 * close resets the connection and the reset can wipe the response from the client's
 * receive buffer before it is read. So the socket lingers instead: half-closed, reading
 * and discarding (never storing) what still arrives, for at most LINGER_MS.
 */
function closeAfterResponse(ctx: RequestContext): void {
  ctx.res.setHeader('connection', 'close');
  const socket = ctx.req.socket;
  socket.destroySoon = function lingeringClose(this: typeof socket) {
    if (this.writable) this.end();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    ctx.req.resume();
  };
}

export function sendEmpty(ctx: RequestContext, status: number): void {
  ctx.res.statusCode = status;
  ctx.res.setHeader('x-svc-request-id', ctx.id);
  if (ctx.closeConnection) closeAfterResponse(ctx);
  ctx.res.end();
}

/**
 * Maps any thrown value to its response; unexpected ones are logged with their stack. A
 * not-ready `/readyz` is the probe doing its job (starting, draining), not a failure.
 */
export function sendError(ctx: RequestContext, err: unknown, logger: Logger): void {
  const error = err instanceof SvcError ? err : new InternalError(err);
  if (error instanceof StoreUnavailableError) {
    // The database is away: the instance is not ready, and says why in its log.
    logger.warn({ err: error.cause, requestId: ctx.id, route: ctx.route }, 'the store cannot be reached; answered not ready');
  } else if (error.status >= 500 && !(error instanceof NotReadyError)) {
    logger.error({ err: error.cause ?? error, requestId: ctx.id, route: ctx.route, code: error.code }, 'request failed');
  } else if (logger.isLevelEnabled('debug')) {
    logger.debug({ requestId: ctx.id, route: ctx.route, code: error.code, status: error.status }, 'request refused');
  }
  const res = ctx.res;
  if (res.headersSent) {
    // The status line is gone; the only honest signal left is cutting the response.
    res.destroy();
    return;
  }
  // An error answers with its own headers only: none set for the answer it replaces (an
  // upstream's, on a response that failed before its first byte) may go out with it.
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  if (error.headers !== undefined) for (const [k, v] of Object.entries(error.headers)) res.setHeader(k, v);
  sendJson(ctx, error.status, error.body());
}
