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
import { detectFormat, FORM_FORMAT, JSON_FORMAT, NDJSON_FORMAT, type BodyFormat } from '../fields/formats.ts';
import { FieldMatcher } from '../fields/paths.ts';
import { hasBody } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';
import { sendBody } from '../http/respond.ts';
import type { Configuration } from '../store/configurations.ts';
import { stateOf } from '../store/state-view.ts';
import type { Services } from '../services.ts';
import { recordUsage } from '../telemetry/usage.ts';
import { BodyTransform, transformStream, transformWhole, type Mode } from './body-transform.ts';
import { cachedDestination, type Destination } from './destination.ts';
import { DecryptHandler, EncryptHandler, KeyInUse } from './field-handlers.ts';
import { setTransformHeaders } from './forwarder.ts';

export type { Mode } from './body-transform.ts';

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
  const limits = mode === 'encrypt' ? services.limits.plaintext : services.limits.token;
  const body = new BodyTransform(mode, format.create(matcher, handler, limits), handler).reportCountTo(ctx);

  if (destination === null) {
    send(ctx, format, await transformWhole(ctx, services.config.server.body_limit, body));
  } else if (mode === 'encrypt' && !isSmall(ctx)) {
    // Encrypt-and-forward streams: the destination gets a complete, correctly
    // transformed body or an aborted request, never a wrong one.
    await services.forwarder.forward(ctx, destination, transformStream(ctx, services.config.forwarding.max_body, body));
  } else {
    // Decrypt-and-forward holds the body until every token is checked: a denied or
    // invalid token must stop the request before any plaintext leaves. Small bodies of
    // known length are sent whole too: one write with a content-length is cheaper than
    // a chunked stream.
    await services.forwarder.forward(ctx, destination, await transformWhole(ctx, services.config.server.body_limit, body));
  }
  recordUsage(ctx, services, configuration, mode, handler.count, ctx.bytesIn, handler instanceof DecryptHandler ? handler.reveal : null);
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
  // Node joins repeated headers with ", ": two destinations would become one URL whose
  // path nobody wrote. Only a joined value can hold a comma, so that is the cheap test.
  if (value.includes(',') && ctx.repeated('x-svc-destination')) throw new BadRequestError('The x-svc-destination header must be given once.');
  const destination = cachedDestination(value, configuration.destinations);
  ctx.destination = destination.origin;
  return destination;
}

/** The classification named by `x-svc-classification` (id or slug), 0 for none. */
export function resolveClassification(ctx: RequestContext, services: Services): number {
  const value = ctx.header('x-svc-classification')?.trim();
  if (value === undefined || value === '') return 0;
  const id = value.length <= 128 ? stateOf(services.store).classificationByIdOrSlug(value)?.id : undefined;
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
 * The formats the encryption endpoints and `/proxy` take; the answer is written in the
 * request's own (DESIGN §15).
 */
const API_FORMATS: readonly BodyFormat[] = [JSON_FORMAT, NDJSON_FORMAT, FORM_FORMAT];

/**
 * JSON, NDJSON or a form, uncompressed and UTF-8 (a compressed body cannot be transformed). A
 * request with no body at all, whatever its method or content type, has nothing to
 * transform: it is refused as an empty body is, so a bodiless GET learns what is missing,
 * not that JSON needs a content type.
 */
export function bodyFormat(ctx: RequestContext): BodyFormat {
  if (!hasBody(ctx)) throw new InvalidJsonError('the body is empty');
  const format = detectFormat(ctx.req.headers['content-type'], ctx.req.headers['content-encoding'], API_FORMATS);
  if (typeof format === 'string') throw new UnsupportedMediaTypeError();
  return format;
}

export function buildHandler(services: Services, caller: Caller, configuration: Configuration, mode: Mode, classificationId: number): EncryptHandler | DecryptHandler {
  const codec = services.codecs.get(configuration);
  if (mode === 'encrypt') return new EncryptHandler(codec.encryptor(classificationId), new KeyInUse(services.store, configuration.id, codec));
  return new DecryptHandler(codec, ClassificationAccess.forCaller(services.store, caller), classificationId === 0 ? null : classificationId);
}

/** A transform's answer, with the number of fields it replaced. */
export function send(ctx: RequestContext, format: BodyFormat, body: Buffer): void {
  setTransformHeaders(ctx);
  sendBody(ctx, 200, format.contentType, body);
}
