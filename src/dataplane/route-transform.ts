/**
 * What relay and egress routes (DESIGN §12) share: a route names a configuration and a
 * fixed transform for the request body and for the response body, instead of the
 * `x-svc-*` headers of `/proxy`. The engine and limits are those of `/proxy`: encrypting
 * streams, decrypting holds the whole body until every token has been checked.
 *
 * Routes authenticate with the configuration, not a per-request API key: the pod
 * boundary is the trust boundary, so decryption applies no per-user classification
 * access. A `classification` on a decrypt transform still requires every token to carry
 * it (403 on a request, 502 on a response).
 */
import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { ConfigError } from '../config/load.ts';
import type { RouteTransform } from '../config/schema.ts';
import { RouteUnavailableError, InvalidFieldPathsError, UnsupportedMediaTypeError, UpstreamResponseError } from '../errors.ts';
import { NdjsonTransformer, type ChunkTransformer } from '../fields/ndjson.ts';
import { compileFieldPaths, FieldMatcher } from '../fields/paths.ts';
import { JsonTransformer, joinPieces } from '../fields/transformer.ts';
import { bodyChunks, ClientGoneError, hasBody } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';
import type { Configuration } from '../store/configurations.ts';
import { nowIso } from '../store/sql.ts';
import { classificationIdOf } from '../store/stamped-cache.ts';
import { recordUsage, type Mode } from './encryption-routes.ts';
import { DecryptHandler, EncryptHandler, KeyInUse } from './field-handlers.ts';
import { copyResponseHeaders, relay, type ForwardBody, type ForwardOptions } from './forwarder.ts';
import type { Services } from './services.ts';

/** One direction's transform, compiled once at start. */
export interface TransformSpec {
  readonly mode: Mode;
  /** Null: the configuration's `fields` (encrypt), or every token anywhere (decrypt). */
  readonly matcher: FieldMatcher | null;
  /** Classification id or slug, looked up per request (classifications change at runtime). */
  readonly classification: string | null;
}

export interface TransformRoute {
  /** `relay:patients`, `egress:stripe`: how the route is named in the `api` log. */
  readonly label: string;
  /** The encryption configuration's name. */
  readonly configuration: string;
  readonly request: TransformSpec | null;
  readonly response: TransformSpec | null;
}

export interface RouteSettings {
  readonly configuration: string;
  readonly request?: RouteTransform | undefined;
  readonly response?: RouteTransform | undefined;
}

/** Compiles a route's field paths; a bad route stops the start with a ConfigError naming it. */
export function compileTransformRoute(label: string, where: string, settings: RouteSettings): TransformRoute {
  return {
    label,
    configuration: settings.configuration,
    request: compileTransform(settings.request, `${where}.request`),
    response: compileTransform(settings.response, `${where}.response`),
  };
}

function compileTransform(spec: RouteTransform | undefined, where: string): TransformSpec | null {
  if (spec === undefined) return null;
  if (spec.encrypt !== undefined && spec.decrypt !== undefined) throw new ConfigError([`${where}: give encrypt or decrypt, not both`]);
  const paths = spec.encrypt ?? spec.decrypt;
  if (paths === undefined) {
    if (spec.classification !== undefined) throw new ConfigError([`${where}.classification: applies only with encrypt or decrypt`]);
    return null;
  }
  const mode: Mode = spec.encrypt !== undefined ? 'encrypt' : 'decrypt';
  let matcher: FieldMatcher | null;
  try {
    matcher = compileFieldPaths(paths);
  } catch (err) {
    if (!(err instanceof InvalidFieldPathsError)) throw err;
    const detail = err.message.replace(/^The x-svc-fields header is invalid: /, '').replace(/\.$/, '');
    throw new ConfigError([`${where}.${mode}: ${detail}`]);
  }
  return { mode, matcher, classification: spec.classification ?? null };
}

/**
 * The route's configuration, looked up per request (it may be created, rotated or
 * renamed through the API). A route naming none is a deployment mistake: 500.
 */
export function routeConfiguration(ctx: RequestContext, services: Services, route: TransformRoute): Configuration {
  const configuration = services.store.configurations.findByName(route.configuration);
  if (configuration === undefined || configuration.type !== 'encryption') {
    throw new RouteUnavailableError(new Error(`${route.label}: there is no encryption configuration named "${route.configuration}"`));
  }
  ctx.configurationId = configuration.id;
  return configuration;
}

/** Writes one `api` log entry when the exchange ends, named after the route. */
export function logRouteRequest(ctx: RequestContext, services: Services, route: TransformRoute, path: string): void {
  const method = ctx.req.method ?? 'GET';
  ctx.res.once('close', () => {
    const label = `${route.label} ${method} ${path}`;
    services.logs.api({
      requestId: ctx.id,
      method,
      path: label.length > 1024 ? label.slice(0, 1024) : label,
      statusCode: ctx.res.statusCode,
      apiKeyId: null,
      userId: null,
      configurationId: ctx.configurationId,
      destination: ctx.destination,
      durationMs: Math.round(performance.now() - ctx.startedAt),
      ip: ctx.req.socket.remoteAddress ?? '',
      createdAt: nowIso(),
    });
  });
}

// ---------------------------------------------------------------------------------------
// Body formats

type Format = 'json' | 'ndjson';
/** `other`: not JSON, passed on untouched. `unreadable`: JSON we cannot transform. */
type BodyKind = Format | 'other' | 'unreadable';

const JSON_BASE = /^application\/(?:json|[^\s;/]+\+json)$/;

/**
 * A JSON body that is compressed or in another charset than UTF-8 is `unreadable`, never
 * `other`: passing it on untouched would let plaintext by (an encrypt route) unnoticed.
 */
function bodyKind(type: string | string[] | undefined, encoding: string | string[] | undefined): BodyKind {
  const value = Array.isArray(type) ? type[0] : type;
  if (value === undefined) return 'other';
  const semi = value.indexOf(';');
  const base = (semi === -1 ? value : value.slice(0, semi)).trim().toLowerCase();
  const format: Format | null = JSON_BASE.test(base) ? 'json' : base === 'application/x-ndjson' ? 'ndjson' : null;
  if (format === null) return 'other';
  const coding = (Array.isArray(encoding) ? encoding.join(',') : encoding)?.trim().toLowerCase();
  if (coding !== undefined && coding !== '' && coding !== 'identity') return 'unreadable';
  if (semi !== -1) {
    const charset = /charset\s*=\s*"?([^";\s]+)/i.exec(value.slice(semi))?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') return 'unreadable';
  }
  return format;
}

/** Whether the request body will be transformed: JSON on a route with a request transform. */
export function transformsRequest(ctx: RequestContext, route: TransformRoute): boolean {
  if (route.request === null || !hasBody(ctx)) return false;
  const kind = bodyKind(ctx.req.headers['content-type'], ctx.req.headers['content-encoding']);
  if (kind === 'unreadable') throw new UnsupportedMediaTypeError();
  return kind !== 'other';
}

// ---------------------------------------------------------------------------------------
// One body's transform

/**
 * The transformer and handler for one body, with the failure check after every chunk so
 * a bad value stops the stream at once.
 */
class BodyTransform {
  readonly mode: Mode;
  readonly handler: EncryptHandler | DecryptHandler;
  private readonly transformer: ChunkTransformer;
  bytes: number;

  constructor(services: Services, configuration: Configuration, spec: TransformSpec, format: Format) {
    this.mode = spec.mode;
    const codec = services.codecs.get(configuration);
    const classificationId = resolveClassification(services, spec);
    this.handler =
      spec.mode === 'encrypt'
        ? new EncryptHandler(codec.encryptor(classificationId), new KeyInUse(services.store, configuration.id, codec))
        : new DecryptHandler(codec, trusted, classificationId === 0 ? null : classificationId);
    const matcher = resolveMatcher(services, configuration, spec);
    this.transformer = format === 'ndjson' ? new NdjsonTransformer(matcher, this.handler) : new JsonTransformer(matcher, this.handler);
    this.bytes = 0;
  }

  push(chunk: Buffer, out: Buffer[]): void {
    this.bytes += chunk.length;
    this.transformer.push(chunk, out);
    this.check();
  }

  /** An empty body stays empty: a relay has no business turning it into an error. */
  end(out: Buffer[]): void {
    if (this.bytes === 0) return;
    this.transformer.end(out);
    this.check();
  }

  private check(): void {
    const failure = this.handler.failure();
    if (failure !== null) throw failure;
  }
}

/** Relay and egress decrypt for the pod: no per-user classification access (DESIGN §12). */
function trusted(): void {}

function resolveClassification(services: Services, spec: TransformSpec): number {
  if (spec.classification === null) return 0;
  const id = classificationIdOf(services.store, spec.classification);
  if (id === undefined) throw new RouteUnavailableError(new Error(`a relay or egress route names the classification "${spec.classification}", which does not exist`));
  return id;
}

function resolveMatcher(services: Services, configuration: Configuration, spec: TransformSpec): FieldMatcher {
  if (spec.matcher !== null) return spec.matcher;
  if (spec.mode === 'decrypt') return FieldMatcher.anyToken();
  const defaults = configuration.fields.length === 0 ? null : services.fieldPaths.get(configuration.fields.join(','));
  if (defaults === null) throw new RouteUnavailableError(new Error(`a route encrypts the fields of "${configuration.name}", which lists none`));
  return defaults;
}


// ---------------------------------------------------------------------------------------
// The request side

export interface RequestBody {
  readonly body: ForwardBody;
  /** Records the usage log of the request's transform, once it has run. */
  recordUsage(): void;
}

/**
 * The body to forward: transformed when the route says so and the body is JSON
 * (encrypt streams, decrypt is checked whole first), else the client's bytes as they come.
 */
export async function requestBody(ctx: RequestContext, services: Services, route: TransformRoute, configuration: Configuration): Promise<RequestBody> {
  if (!hasBody(ctx)) return { body: null, recordUsage: noop };
  if (!transformsRequest(ctx, route)) return { body: untouched(ctx, services.config.forwarding.max_body), recordUsage: noop };
  const spec = route.request!;
  const kind = bodyKind(ctx.req.headers['content-type'], undefined) as Format;
  const transform = new BodyTransform(services, configuration, spec, kind);
  const usage = () => recordUsage(ctx, services, configuration, transform.mode, transform.handler.count, transform.bytes);
  if (spec.mode === 'encrypt') {
    return { body: streamed(ctx, services.config.forwarding.max_body, transform), recordUsage: usage };
  }
  // A denied or invalid token must stop the request before any plaintext leaves.
  const out: Buffer[] = [];
  for await (const chunk of bodyChunks(ctx, services.config.server.body_limit)) {
    ctx.bytesIn += chunk.length;
    transform.push(chunk, out);
  }
  transform.end(out);
  return { body: out.length === 0 ? Buffer.alloc(0) : joinPieces(out), recordUsage: usage };
}

function noop(): void {}

async function* untouched(ctx: RequestContext, limit: number): AsyncGenerator<Buffer> {
  for await (const chunk of bodyChunks(ctx, limit)) {
    ctx.bytesIn += chunk.length;
    yield chunk;
  }
}

async function* streamed(ctx: RequestContext, limit: number, transform: BodyTransform): AsyncGenerator<Buffer> {
  const out: Buffer[] = [];
  for await (const chunk of bodyChunks(ctx, limit)) {
    ctx.bytesIn += chunk.length;
    transform.push(chunk, out);
    if (out.length > 0) yield joinPieces(out);
  }
  transform.end(out);
  if (out.length > 0) yield joinPieces(out);
}

// ---------------------------------------------------------------------------------------
// The response side

/**
 * Forwarding options for a route. With a response transform the upstream is asked for an
 * uncompressed and whole answer, the only kind that can be transformed: a part of a JSON
 * document is not JSON, and a byte range of the upstream's representation means nothing
 * once its fields have been rewritten. `Range` is dropped, so the client gets the whole
 * transformed answer with a 200, which RFC 9110 §14.2 allows any server to send.
 */
export function routeForwardOptions(services: Services, route: TransformRoute, configuration: Configuration, keepHost: boolean): ForwardOptions {
  const spec = route.response;
  if (spec === null) return { keepAuthorization: true, keepHost };
  return {
    keepAuthorization: true,
    keepHost,
    setHeaders: { 'accept-encoding': 'identity' },
    dropHeaders: WHOLE_ANSWER,
    respond: (ctx, response, method) => respondTransformed(ctx, services, configuration, spec, response, method),
  };
}

/** Request headers that would ask the upstream for less than the whole answer. */
const WHOLE_ANSWER: ReadonlySet<string> = new Set(['range', 'if-range']);

/** Response headers that describe the upstream's bytes, wrong once the body is rewritten. */
const REWRITTEN = new Set(['content-length', 'content-md5', 'digest', 'content-digest', 'repr-digest', 'accept-ranges']);

async function respondTransformed(
  ctx: RequestContext,
  services: Services,
  configuration: Configuration,
  spec: TransformSpec,
  response: Dispatcher.ResponseData,
  method: string,
): Promise<void> {
  const bodiless = method === 'HEAD' || response.statusCode === 204 || response.statusCode === 304 || response.headers['content-length'] === '0';
  const kind = bodyKind(response.headers['content-type'], response.headers['content-encoding']);
  if (bodiless || kind === 'other') return relay(ctx, response, method);
  if (kind === 'unreadable') {
    discard(response.body);
    throw new UpstreamResponseError(new Error(`the upstream answered ${String(response.headers['content-type'])} that cannot be transformed`));
  }
  let transform: BodyTransform;
  try {
    transform = new BodyTransform(services, configuration, spec, kind);
  } catch (err) {
    discard(response.body);
    throw err;
  }
  if (spec.mode === 'decrypt') await respondWhole(ctx, response, transform, services.config.server.body_limit);
  else await respondStreamed(ctx, response, transform);
  recordUsage(ctx, services, configuration, transform.mode, transform.handler.count, transform.bytes);
}

/** Decrypted answers go out whole or not at all: never partial plaintext. */
async function respondWhole(ctx: RequestContext, response: Dispatcher.ResponseData, transform: BodyTransform, limit: number): Promise<void> {
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
