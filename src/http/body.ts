/**
 * Request bodies: the content type is checked, bytes are counted as they arrive, and each
 * chunk is handed on at once so bodies are never held whole here. Past the limit the
 * request is refused with 413 and the rest is never read (the connection is closed).
 */
import { BodyTooLargeError, ClientGoneError, UnsupportedMediaTypeError } from '../errors.ts';
import type { RequestContext } from './context.ts';

/** `application/json` or any `+json` type (RFC 6839 §3.1), with or without parameters. */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined) return false;
  const semi = value.indexOf(';');
  const type = (semi === -1 ? value : value.slice(0, semi)).trim().toLowerCase();
  if (type !== 'application/json' && !(type.startsWith('application/') && type.endsWith('+json'))) return false;
  if (semi === -1) return true;
  const charset = /charset\s*=\s*"?([^";\s]+)/i.exec(value.slice(semi));
  return charset === null || charset[1]!.toLowerCase() === 'utf-8' || charset[1]!.toLowerCase() === 'utf8';
}

export function requireJson(ctx: RequestContext): void {
  if (!isJsonContentType(ctx.header('content-type'))) throw new UnsupportedMediaTypeError();
}

/**
 * Reads the body, calling `onChunk` for each chunk as it arrives. Resolves with the byte
 * count. If `onChunk` throws or the limit is passed, reading stops and the connection is
 * marked to close, so an unread remainder cannot be taken for the next request.
 */
export function consumeBody(ctx: RequestContext, limit: number, onChunk: (chunk: Buffer) => void): Promise<number> {
  const req = ctx.req;
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    ctx.closeConnection = true;
    return Promise.reject(new BodyTooLargeError(limit));
  }
  return new Promise<number>((resolve, reject) => {
    let received = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
    };
    const stop = (err: unknown) => {
      cleanup();
      req.pause();
      ctx.closeConnection = true;
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limit) return stop(new BodyTooLargeError(limit));
      try {
        onChunk(chunk);
      } catch (err) {
        stop(err);
      }
    };
    const onEnd = () => {
      cleanup();
      resolve(received);
    };
    const onError = () => stop(new ClientGoneError());
    const onAborted = () => stop(new ClientGoneError());
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/** True when the request has a body to read (RFC 9112 §6.3). */
export function hasBody(ctx: RequestContext): boolean {
  const length = ctx.req.headers['content-length'];
  if (length !== undefined) return Number(length) > 0;
  return ctx.req.headers['transfer-encoding'] !== undefined;
}

/**
 * The body as an async sequence of chunks with backpressure, counted against `limit`.
 * Unlike a `for await` over the request, stopping early leaves the socket open, so the
 * error can still be answered; the connection is then marked to close.
 */
export async function* bodyChunks(ctx: RequestContext, limit: number): AsyncGenerator<Buffer> {
  const req = ctx.req;
  let received = 0;
  let finished = false;
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    ctx.closeConnection = true;
    throw new BodyTooLargeError(limit);
  }
  try {
    for (;;) {
      const chunk = req.read() as Buffer | null;
      if (chunk !== null) {
        received += chunk.length;
        if (received > limit) throw new BodyTooLargeError(limit);
        yield chunk;
        continue;
      }
      if (req.readableEnded) break;
      await nextReadable(req);
      if (req.readableEnded && req.readableLength === 0) break;
    }
    finished = true;
  } finally {
    if (!finished) ctx.closeConnection = true;
  }
}

function nextReadable(req: RequestContext['req']): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = () => {
      cleanup();
      resolve();
    };
    const gone = () => {
      cleanup();
      reject(new ClientGoneError());
    };
    const onClose = () => (req.readableEnded ? done() : gone());
    const cleanup = () => {
      req.off('readable', done);
      req.off('end', done);
      req.off('error', gone);
      req.off('close', onClose);
    };
    req.on('readable', done);
    req.on('end', done);
    req.on('error', gone);
    req.on('close', onClose);
  });
}
