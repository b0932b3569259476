/**
 * `POST /api/v3/encryption/{slug}/encrypt` and `/decrypt` (spec 4.4, 4.5). The pipeline,
 * top to bottom: authenticate → resolve configuration → check permission → resolve
 * classification and field paths → transform the body as it arrives → respond.
 */
import { ClassificationAccess } from '../auth/classification-access.ts';
import { authenticateRequest } from '../auth/request-auth.ts';
import { requireConfigurationScope, requirePermission, type Caller } from '../auth/caller.ts';
import { BadRequestError, NotFoundError, ValidationError } from '../errors.ts';
import { FieldMatcher } from '../fields/paths.ts';
import { JsonTransformer, type ValueHandler } from '../fields/transformer.ts';
import { consumeBody, requireJson } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';
import { sendJson } from '../http/respond.ts';
import type { Configuration } from '../store/configurations.ts';
import { DecryptHandler, EncryptHandler } from './field-handlers.ts';
import type { Services } from './services.ts';

export type Mode = 'encrypt' | 'decrypt';

export async function encryptRoute(ctx: RequestContext, services: Services): Promise<void> {
  await transformRoute(ctx, services, 'encrypt');
}

export async function decryptRoute(ctx: RequestContext, services: Services): Promise<void> {
  await transformRoute(ctx, services, 'decrypt');
}

async function transformRoute(ctx: RequestContext, services: Services, mode: Mode): Promise<void> {
  const caller = await authenticateRequest(ctx, services.auth);
  const configuration = resolveConfiguration(ctx, services, caller, ctx.params['slug']!);
  requirePermission(caller, mode === 'encrypt' ? 'data.encrypt' : 'data.decrypt');
  rejectForwarding(ctx);
  const classificationId = resolveClassification(ctx, services);
  const matcher = resolveFieldPaths(ctx, services, configuration, mode);
  requireJson(ctx);
  const handler = buildHandler(services, caller, configuration, mode, classificationId);
  const body = await transformBody(ctx, services.config.server.body_limit, matcher, handler);
  sendJson(ctx, 200, body);
  recordUsage(ctx, services, configuration, mode, handler.count, body.length);
}

export function recordUsage(ctx: RequestContext, services: Services, configuration: Configuration, mode: Mode, fieldCount: number, bytes: number): void {
  services.logs.usage({
    requestId: ctx.id,
    configurationId: configuration.id,
    apiKeyId: ctx.apiKeyId,
    userId: ctx.userId,
    mode,
    fieldCount,
    bytes,
    createdAt: new Date().toISOString(),
  });
}

export function resolveConfiguration(ctx: RequestContext, services: Services, caller: Caller, slug: string): Configuration {
  const configuration = services.store.configurations.findBySlug(slug);
  if (configuration === undefined || configuration.type !== 'encryption') throw new NotFoundError();
  requireConfigurationScope(caller, configuration.id);
  ctx.configurationId = configuration.id;
  return configuration;
}

/** Forwarding (`x-svc-destination`) is served by the proxy data path, not here yet. */
function rejectForwarding(ctx: RequestContext): void {
  if (ctx.header('x-svc-destination') !== undefined) {
    throw new BadRequestError('Forwarding with x-svc-destination is not supported on this route in this version.');
  }
}

/** The classification named by `x-svc-classification` (id or slug), 0 for none. */
export function resolveClassification(ctx: RequestContext, services: Services): number {
  const value = ctx.header('x-svc-classification')?.trim();
  if (value === undefined || value === '') return 0;
  const found = value.length <= 128 ? services.store.classifications.findByIdOrSlug(value) : undefined;
  if (found === undefined) {
    throw new ValidationError({ 'x-svc-classification': ['The selected classification is invalid.'] });
  }
  return found.id;
}

export function resolveFieldPaths(ctx: RequestContext, services: Services, configuration: Configuration, mode: Mode): FieldMatcher {
  const header = ctx.utf8Header('x-svc-fields');
  const fromHeader = header === undefined ? null : services.fieldPaths.get(header);
  if (fromHeader !== null) return fromHeader;
  if (mode === 'decrypt') return FieldMatcher.anyToken();
  const defaults = configuration.fields.length === 0 ? null : services.fieldPaths.get(configuration.fields.join(','));
  if (defaults === null) {
    throw new BadRequestError('No fields to encrypt: send x-svc-fields or set the configuration\'s fields.');
  }
  return defaults;
}

export function buildHandler(
  services: Services,
  caller: Caller,
  configuration: Configuration,
  mode: Mode,
  classificationId: number,
): EncryptHandler | DecryptHandler {
  const codec = services.codecs.get(configuration);
  if (mode === 'encrypt') return new EncryptHandler(codec.encryptor(classificationId));
  const access = new ClassificationAccess(services.store, caller);
  return new DecryptHandler(codec, (id) => access.check(id), classificationId === 0 ? null : classificationId);
}

/** Transforms the request body chunk by chunk as it arrives; 422 if any field failed. */
export async function transformBody(
  ctx: RequestContext,
  limit: number,
  matcher: FieldMatcher,
  handler: ValueHandler & { failure(): ValidationError | null },
): Promise<Buffer> {
  const transformer = new JsonTransformer(matcher, handler);
  const out: Buffer[] = [];
  await consumeBody(ctx, limit, (chunk) => transformer.push(chunk, out));
  transformer.end(out);
  const failure = handler.failure();
  if (failure !== null) throw failure;
  return out.length === 1 ? out[0]! : Buffer.concat(out);
}
