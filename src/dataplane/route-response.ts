/**
 * The response side of a relay or egress route: the upstream's answer relayed as it is,
 * or transformed per the route's `response` (decrypted whole, or encrypted as it streams).
 */
import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { ClientGoneError, UpstreamResponseError } from '../errors.ts';
import { detectFormat, detectRequestFormat, SniffingTransformer, type BodyFormat } from '../fields/formats.ts';
import { FieldMatcher, splitPath } from '../fields/paths.ts';
import { joinPieces } from '../fields/transformer.ts';
import { FOR_THE_POD, type RevealPolicy } from '../auth/classification-access.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { recordUsage } from '../telemetry/usage.ts';
import { BodyTransform, type Mode } from './body-transform.ts';
import type { DecryptedPaths } from './echo-guard.ts';
import { EchoHandler, KeyInUse } from './field-handlers.ts';
import { copyResponseHeaders, relay, type ForwardOptions } from './forwarder.ts';
import { routeBodyTransform, type TransformRoute, type TransformSpec } from './transform-routes.ts';

/**
 * Forwarding options for a route. With a response transform the upstream is asked for an
 * uncompressed and whole answer, the only kind that can be transformed: a part of a JSON
 * document is not JSON, and a byte range of the upstream's representation means nothing
 * once its fields have been rewritten. `Range` is dropped, so the client gets the whole
 * transformed answer with a 200, which RFC 9110 §14.2 allows any server to send.
 * `decryptedAt` (a guarded route, guardsAnswers): with no `response` its values are
 * encrypted again; with a `response` that encrypts, the answer it makes is still searched
 * for them before it leaves.
 */
export function routeForwardOptions(
  services: Services,
  route: TransformRoute,
  configuration: Configuration,
  keepHost: boolean,
  decryptedAt: DecryptedPaths | null = null,
  reveal: RevealPolicy = FOR_THE_POD,
): ForwardOptions {
  const spec = route.response;
  if (spec === null && decryptedAt === null) return { keepAuthorization: true, keepHost };
  return {
    keepAuthorization: true,
    keepHost,
    setHeaders: { 'accept-encoding': 'identity' },
    dropHeaders: WHOLE_ANSWER,
    respond: (ctx, response, method) =>
      spec !== null
        ? respondTransformed(ctx, services, configuration, spec, response, method, reveal, spec.mode === 'encrypt' && decryptedAt?.searching === true ? decryptedAt : null)
        : respondEchoed(ctx, services, configuration, decryptedAt!, response, method),
  };
}

/**
 * An egress answer after a decrypting request (DESIGN §13): the values at the paths where
 * the request's tokens were decrypted are encrypted again, each under its token's
 * classification, so a vendor that echoes them never hands the plaintext to the application.
 */
async function respondEchoed(
  ctx: RequestContext,
  services: Services,
  configuration: Configuration,
  decryptedAt: DecryptedPaths,
  response: Dispatcher.ResponseData,
  method: string,
): Promise<void> {
  if (decryptedAt.size === 0) return relay(ctx, response, method);
  const codec = services.codecs.get(configuration);
  const handler = new EchoHandler(codec, new KeyInUse(services.store, configuration.id, codec), decryptedAt);
  const matcher = FieldMatcher.exact([...decryptedAt.keys()].map(splitPath));
  const build = (format: BodyFormat) => format.create(matcher, handler, services.limits.plaintext);
  // Read as the request was: an answer of another declared type that starts as JSON is JSON.
  const transform = (declared: BodyFormat | null) => new BodyTransform('encrypt', new SniffingTransformer(declared, build), handler);
  // With plaintexts to look for, the answer is read whole and searched before any of it
  // leaves: a repeat anywhere the transform could not encrypt again is a 502.
  const guard = decryptedAt.searching ? decryptedAt : null;
  await respondWith(ctx, services, configuration, response, method, 'encrypt', transform, true, guard);
}

/** Request headers that would ask the upstream for less than the whole answer. */
const WHOLE_ANSWER: ReadonlySet<string> = new Set(['range', 'if-range']);

/** Response headers that describe the upstream's bytes, wrong once the body is rewritten. */
const REWRITTEN = new Set(['content-length', 'content-md5', 'digest', 'content-digest', 'repr-digest', 'accept-ranges']);

function respondTransformed(
  ctx: RequestContext,
  services: Services,
  configuration: Configuration,
  spec: TransformSpec,
  response: Dispatcher.ResponseData,
  method: string,
  reveal: RevealPolicy,
  guard: DecryptedPaths | null,
): Promise<void> {
  return respondWith(ctx, services, configuration, response, method, spec.mode, (declared) => routeBodyTransform(services, configuration, spec, declared, reveal), false, guard);
}

/**
 * Relays an answer through `build`'s transform when it is in a format we read; as it is
 * otherwise. An answer to encrypt that names no format is still read for JSON by its first
 * byte (as the relay guard reads requests): a vendor that echoes JSON as `text/plain`, or
 * with no type at all, must not hand the plaintext back. Answers to decrypt are not
 * sniffed: decrypting what the answer does not declare would reveal more, not less.
 */
async function respondWith(
  ctx: RequestContext,
  services: Services,
  configuration: Configuration,
  response: Dispatcher.ResponseData,
  method: string,
  mode: Mode,
  build: (declared: BodyFormat | null) => BodyTransform,
  sniffOther = false,
  guard: DecryptedPaths | null = null,
): Promise<void> {
  const bodiless = method === 'HEAD' || response.statusCode === 204 || response.statusCode === 304 || response.headers['content-length'] === '0';
  if (guard !== null) {
    try {
      guard.check(response.headers, null);
    } catch (err) {
      discard(response.body);
      throw err;
    }
    if (bodiless) return relay(ctx, response, method);
  }
  // Answers to encrypt are read as JSON by their first byte too: encrypting more only protects.
  const sniff = sniffOther || mode === 'encrypt';
  const format = sniff
    ? detectRequestFormat(response.headers['content-type'], response.headers['content-encoding'])
    : detectFormat(response.headers['content-type'], response.headers['content-encoding']);
  if (bodiless || (format === 'other' && !sniff && guard === null)) return relay(ctx, response, method);
  if (format === 'unreadable') {
    discard(response.body);
    throw new UpstreamResponseError(new Error(`the upstream answered ${String(response.headers['content-type'])} that cannot be transformed`));
  }
  let transform: BodyTransform;
  try {
    transform = build(format === 'other' ? null : format);
  } catch (err) {
    discard(response.body);
    throw err;
  }
  if (mode === 'decrypt' || guard !== null) await respondWhole(ctx, response, transform, services.config.server.body_limit, guard);
  else await respondStreamed(ctx, response, transform);
  recordUsage(ctx, services, configuration, transform.mode, transform.handler.count, transform.bytes, transform.handler.reveal ?? null);
}

/**
 * Decrypted answers go out whole or not at all: never partial plaintext. So do answers
 * searched for echoed plaintexts (`guard`), which are refused whole when one is found.
 */
async function respondWhole(ctx: RequestContext, response: Dispatcher.ResponseData, transform: BodyTransform, limit: number, guard: DecryptedPaths | null = null): Promise<void> {
  const out: Buffer[] = [];
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      if (transform.bytes + chunk.length > limit) throw new Error(`the upstream answer is larger than ${limit} bytes`);
      transform.push(chunk, out);
    }
    transform.end(out);
  } catch (err) {
    discard(response.body);
    if (ctx.res.destroyed) throw new ClientGoneError();
    throw new UpstreamResponseError(err);
  }
  const body = out.length === 0 ? Buffer.alloc(0) : joinPieces(out);
  guard?.check({}, body);
  copyHeaders(ctx, response);
  ctx.res.setHeader('content-length', body.length);
  ctx.res.end(body);
}

/**
 * Encrypted answers stream, as encrypt-and-forward requests do. A failure before the
 * first byte is a clean 502; after it the response is cut (the error mapper destroys it).
 */
async function respondStreamed(ctx: RequestContext, response: Dispatcher.ResponseData, transform: BodyTransform): Promise<void> {
  copyHeaders(ctx, response);
  const out: Buffer[] = [];
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      transform.push(chunk, out);
      if (out.length > 0) await write(ctx.res, joinPieces(out));
    }
    transform.end(out);
  } catch (err) {
    discard(response.body);
    if (err instanceof ClientGoneError || ctx.res.destroyed) throw new ClientGoneError();
    throw new UpstreamResponseError(err);
  }
  ctx.res.end(out.length > 0 ? joinPieces(out) : undefined);
}

function copyHeaders(ctx: RequestContext, response: Dispatcher.ResponseData): void {
  copyResponseHeaders(ctx, response.statusCode, response.headers, REWRITTEN);
}

/** Writes with backpressure; rejects if the client goes away while we wait. */
function write(res: ServerResponse, chunk: Buffer): Promise<void> {
  if (res.destroyed) return Promise.reject(new ClientGoneError());
  if (res.write(chunk)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const cleanup = () => {
      res.off('drain', onDrain);
      res.off('close', onClose);
    };
    const onDrain = () => {
      cleanup();
      resolve();
    };
    const onClose = () => {
      cleanup();
      reject(new ClientGoneError());
    };
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

/**
 * Stops reading an answer that will not be relayed. Destroying undici's body stream can
 * emit 'error' (an aborted body), which with no listener would end the process.
 */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => {});
  body.destroy();
}
