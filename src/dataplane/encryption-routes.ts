/**
 * The data plane: `POST /api/v3/encryption/{slug}/encrypt|decrypt` (spec 4.4, 4.5) and
 * `/proxy/{slug}` (spec 4.6, any method, `x-svc-mode`). One pipeline, top to bottom:
 * authenticate → check permission → resolve configuration → resolve destination,
 * classification and field paths → transform the body as it arrives → respond, or
 * forward and relay.
 */
import { ClassificationAccess } from '../auth/classification-access.ts';
import { authenticateRequest } from '../auth/request-auth.ts';
import { requireConfigurationScope, requirePermission, type Caller } from '../auth/caller.ts';
import { BadRequestError, InvalidJsonError, NotFoundError, UnsupportedMediaTypeError, ValidationError } from '../errors.ts';
import { NdjsonTransformer, type ChunkTransformer } from '../fields/ndjson.ts';
import { FieldMatcher } from '../fields/paths.ts';
import { JsonTransformer, joinPieces } from '../fields/transformer.ts';
import { bodyChunks, consumeBody, hasBody, isJsonContentType } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';
import { JSON_CONTENT_TYPE, sendBody } from '../http/respond.ts';
import type { Configuration } from '../store/configurations.ts';
import { nowIso } from '../store/sql.ts';
import { classificationIdOf } from '../store/stamped-cache.ts';
import { cachedDestination, type Destination } from './destination.ts';
import { DecryptHandler, EncryptHandler } from './field-handlers.ts';
import type { Services } from './services.ts';

export type Mode = 'encrypt' | 'decrypt';
export type Format = 'json' | 'ndjson';

export async function encryptRoute(ctx: RequestContext, services: Services): Promise<void> {
  await transform(ctx, services, 'encrypt');
}

export async function decryptRoute(ctx: RequestContext, services: Services): Promise<void> {
  await transform(ctx, services, 'decrypt');
}

export async function proxyRoute(ctx: RequestContext, services: Services): Promise<void> {
  await transform(ctx, services, proxyMode(ctx));
}

async function transform(ctx: RequestContext, services: Services, mode: Mode): Promise<void> {
  const caller = await authenticateRequest(ctx, services.auth);
  // Permission before lookup: a caller who may not use the data plane learns nothing
  // about which slugs exist.
  requirePermission(caller, mode === 'encrypt' ? 'data.encrypt' : 'data.decrypt');
  const configuration = resolveConfiguration(ctx, services, caller, ctx.params['slug']!);
  const destination = resolveDestination(ctx, configuration);
  const classificationId = resolveClassification(ctx, services);
  const matcher = resolveFieldPaths(ctx, services, configuration, mode);

  if (destination !== null && !hasBody(ctx)) {
    await services.forwarder.forward(ctx, destination, null);
    return;
  }
  const format = bodyFormat(ctx);
  const handler = buildHandler(services, caller, configuration, mode, classificationId);
  const transformer: ChunkTransformer = format === 'ndjson' ? new NdjsonTransformer(matcher, handler) : new JsonTransformer(matcher, handler);

  if (destination === null) {
    const body = await transformWhole(ctx, services.config.server.body_limit, transformer, handler);
    send(ctx, format, body);
  } else if (mode === 'encrypt' && !isSmall(ctx)) {
    // Encrypt-and-forward streams: the destination gets a complete, correctly
    // transformed body or an aborted request, never a wrong one.
    const stream = transformStream(ctx, services.config.forwarding.max_body, transformer, handler);
    await services.forwarder.forward(ctx, destination, stream);
  } else {
    // Decrypt-and-forward holds the body until every token is checked: a denied or
    // invalid token must stop the request before any plaintext leaves. Small bodies of
    // known length are sent whole too: one write with a content-length is cheaper than
    // a chunked stream.
    const body = await transformWhole(ctx, services.config.server.body_limit, transformer, handler);
    await services.forwarder.forward(ctx, destination, body);
  }
  recordUsage(ctx, services, configuration, mode, handler.count, ctx.bytesIn);
  if (handler instanceof DecryptHandler) services.metrics.countKeyVersions(configuration.name, handler.versions);
}

/** Bodies this size or under with a declared length are forwarded whole, not streamed. */
const SMALL_BODY = 64 * 1024;

function isSmall(ctx: RequestContext): boolean {
  const length = ctx.req.headers['content-length'];
  return length !== undefined && Number(length) <= SMALL_BODY;
}

function proxyMode(ctx: RequestContext): Mode {
  const value = ctx.header('x-svc-mode')?.trim().toLowerCase();
  if (value === undefined || value === '' || value === 'encrypt') return 'encrypt';
  if (value === 'decrypt') return 'decrypt';
  throw new BadRequestError('The x-svc-mode header must be "encrypt" or "decrypt".');
}

export function resolveConfiguration(ctx: RequestContext, services: Services, caller: Caller, slug: string): Configuration {
  const configuration = services.codecs.configuration(slug);
  if (configuration === undefined || configuration.type !== 'encryption') throw new NotFoundError();
  requireConfigurationScope(caller, configuration.id);
  ctx.configurationId = configuration.id;
  return configuration;
}

function resolveDestination(ctx: RequestContext, configuration: Configuration): Destination | null {
  const value = ctx.header('x-svc-destination')?.trim();
  if (value === undefined || value === '') return null;
  const destination = cachedDestination(value, configuration.destinations);
  ctx.destination = destination.origin;
  return destination;
}

/** The classification named by `x-svc-classification` (id or slug), 0 for none. */
export function resolveClassification(ctx: RequestContext, services: Services): number {
  const value = ctx.header('x-svc-classification')?.trim();
  if (value === undefined || value === '') return 0;
  const id = value.length <= 128 ? classificationIdOf(services.store, value) : undefined;
  if (id === undefined) {
    throw new ValidationError({ 'x-svc-classification': ['The selected classification is invalid.'] });
  }
  return id;
}

export function resolveFieldPaths(ctx: RequestContext, services: Services, configuration: Configuration, mode: Mode): FieldMatcher {
  const header = ctx.utf8Header('x-svc-fields');
  const fromHeader = header === undefined ? null : services.fieldPaths.get(header);
  if (fromHeader !== null) return fromHeader;
  if (mode === 'decrypt') return FieldMatcher.anyToken();
  const defaults = configuration.fields.length === 0 ? null : services.fieldPaths.get(configuration.fields.join(','));
  if (defaults === null) {
    throw new BadRequestError("No fields to encrypt: send x-svc-fields or set the configuration's fields.");
  }
  return defaults;
}

/**
 * JSON or NDJSON, uncompressed (a compressed body cannot be transformed). A request with
 * no body at all, whatever its method or content type, has nothing to transform: it is
 * refused as an empty body is, so a bodiless GET learns what is missing, not that JSON
 * needs a content type.
 */
export function bodyFormat(ctx: RequestContext): Format {
  if (!hasBody(ctx)) throw new InvalidJsonError('the body is empty');
  const encoding = ctx.header('content-encoding');
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') throw new UnsupportedMediaTypeError();
  const type = ctx.header('content-type');
  if (isJsonContentType(type)) return 'json';
  if (type !== undefined && /^application\/x-ndjson\s*(;|$)/i.test(type.trim())) return 'ndjson';
  throw new UnsupportedMediaTypeError();
}

export function buildHandler(services: Services, caller: Caller, configuration: Configuration, mode: Mode, classificationId: number): EncryptHandler | DecryptHandler {
  const codec = services.codecs.get(configuration);
  if (mode === 'encrypt') return new EncryptHandler(codec.encryptor(classificationId));
  const access = new ClassificationAccess(services.store, caller);
  return new DecryptHandler(codec, (id) => access.check(id), classificationId === 0 ? null : classificationId);
}

/** Transforms the body chunk by chunk as it arrives into memory; 422 if any field failed. */
export async function transformWhole(ctx: RequestContext, limit: number, transformer: ChunkTransformer, handler: { failure(): ValidationError | null }): Promise<Buffer> {
  const out: Buffer[] = [];
  ctx.bytesIn = await consumeBody(ctx, limit, (chunk) => transformer.push(chunk, out));
  transformer.end(out);
  const failure = handler.failure();
  if (failure !== null) throw failure;
  return joinPieces(out);
}

/** Transforms the body as it streams to the destination, one output buffer per input chunk. */
async function* transformStream(ctx: RequestContext, limit: number, transformer: ChunkTransformer, handler: EncryptHandler | DecryptHandler): AsyncGenerator<Buffer> {
  const out: Buffer[] = [];
  for await (const chunk of bodyChunks(ctx, limit)) {
    ctx.bytesIn += chunk.length;
    transformer.push(chunk, out);
    const failure = handler.failure();
    if (failure !== null) throw failure;
    if (out.length > 0) yield joinPieces(out);
  }
  transformer.end(out);
  const failure = handler.failure();
  if (failure !== null) throw failure;
  if (out.length > 0) yield joinPieces(out);
}


export function send(ctx: RequestContext, format: Format, body: Buffer): void {
  sendBody(ctx, 200, format === 'ndjson' ? 'application/x-ndjson' : JSON_CONTENT_TYPE, body);
}

export function recordUsage(ctx: RequestContext, services: Services, configuration: Configuration, mode: Mode, fieldCount: number, bytes: number): void {
  services.metrics.countFields(configuration.name, mode, fieldCount);
  services.logs.usage({
    requestId: ctx.id,
    configurationId: configuration.id,
    apiKeyId: ctx.apiKeyId,
    userId: ctx.userId,
    mode,
    fieldCount,
    bytes,
    createdAt: nowIso(),
  });
}
