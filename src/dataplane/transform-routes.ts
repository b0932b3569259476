/**
 * What relay and egress routes (DESIGN §12) share: a route names a configuration and a
 * fixed transform for the request body and for the response body, instead of the
 * `x-svc-*` headers of `/proxy`. This file compiles routes and resolves what they name
 * per request; `route-request.ts` and `route-response.ts` run the two sides. The engine
 * and limits are those of `/proxy`: encrypting streams, decrypting holds the whole body
 * until every token has been checked.
 *
 * Routes authenticate with the configuration, not a per-request API key: the pod
 * boundary is the trust boundary, so decryption shows every value plain (FOR_THE_POD)
 * unless the caller passes the reveal policy of a known reader (an end user behind the
 * relay, DESIGN §14). A `classification` on a decrypt transform still requires every token
 * to carry it (403 on a request, 502 on a response).
 */
import { FOR_THE_POD, type RevealPolicy } from '../auth/classification-access.ts';
import type { RouteTransform } from '../config/schema.ts';
import { RouteUnavailableError } from '../errors.ts';
import type { TokenCodec } from '../crypto/token.ts';
import { SniffingTransformer, type BodyFormat } from '../fields/formats.ts';
import { compileFieldPaths, FieldMatcher } from '../fields/paths.ts';
import type { CaptureLimits, ChunkTransformer } from '../fields/value.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { stateOf } from '../store/state-view.ts';
import { BodyTransform, type Mode } from './body-transform.ts';
import { DecryptHandler, EncryptHandler, KeyInUse } from './field-handlers.ts';

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
  /** The request's query-string parameters (DESIGN §15). */
  readonly query: TransformSpec | null;
}

/** Whether a route hands plaintext onward: its request body or its query decrypts. */
export function decryptsOutbound(route: TransformRoute): boolean {
  return route.request?.mode === 'decrypt' || route.query?.mode === 'decrypt';
}

export interface RouteSettings {
  readonly configuration: string;
  readonly request?: RouteTransform | undefined;
  readonly query?: RouteTransform | undefined;
  /** `passthrough` (egress): relay the answer as it is. */
  readonly response?: RouteTransform | 'passthrough' | undefined;
}

/**
 * Compiles a route's field paths. The configuration's schema has already checked them
 * (one direction at a time, valid paths), with the file's other problems.
 */
export function compileTransformRoute(label: string, settings: RouteSettings): TransformRoute {
  return {
    label,
    configuration: settings.configuration,
    request: compileTransform(settings.request),
    response: settings.response === 'passthrough' ? null : compileTransform(settings.response),
    query: compileTransform(settings.query),
  };
}

function compileTransform(spec: RouteTransform | undefined): TransformSpec | null {
  const paths = spec?.encrypt ?? spec?.decrypt;
  if (spec === undefined || paths === undefined) return null;
  return { mode: spec.encrypt !== undefined ? 'encrypt' : 'decrypt', matcher: compileFieldPaths(paths), classification: spec.classification ?? null };
}

/**
 * The route's configuration, looked up per request (it may be created, rotated or
 * renamed through the API). A route naming none is a deployment mistake: 500.
 */
export function routeConfiguration(ctx: RequestContext, services: Services, route: TransformRoute): Configuration {
  const configuration = services.codecs.configurationNamed(route.configuration);
  if (configuration === undefined || configuration.type !== 'encryption') {
    throw new RouteUnavailableError(new Error(`${route.label}: there is no encryption configuration named "${route.configuration}"`));
  }
  ctx.configurationId = configuration.id;
  return configuration;
}

/** Names the request's `api` log entry after the route: `relay:patients POST /patients/7`. */
export function logRouteRequest(ctx: RequestContext, route: TransformRoute, path: string): void {
  ctx.logPath = `${route.label} ${ctx.req.method ?? 'GET'} ${path}`;
}

/** A route's transform of one body, before it is driven (and, on the relay, chained to the guard). */
export interface RouteTransformer {
  readonly transformer: ChunkTransformer;
  readonly handler: EncryptHandler | DecryptHandler;
  readonly codec: TokenCodec;
}

/**
 * The route's handler over the body's format, which is decided from the body itself
 * (`SniffingTransformer`): a body that is none of the formats passes unchanged.
 * `record.minted` keeps the tokens an encryption writes, for a guard that follows;
 * `record.paths` where a decryption wrote plaintext, for an answer that must not echo it.
 * `reveal` decides what a decryption shows of each classification: all of it, for the pod,
 * unless a reader is known.
 */
export function routeTransformer(
  services: Services,
  configuration: Configuration,
  spec: TransformSpec,
  declared: BodyFormat | null,
  record: { readonly minted?: boolean; readonly paths?: boolean } = {},
  reveal: RevealPolicy = FOR_THE_POD,
): RouteTransformer {
  const { handler, codec, matcher, limits } = routeHandler(services, configuration, spec, record, reveal);
  return { transformer: new SniffingTransformer(declared, (format) => format.create(matcher, handler, limits)), handler, codec };
}

/** What a route's transform is made of, whatever it reads (a body, a query string). */
export interface RouteHandler {
  readonly handler: EncryptHandler | DecryptHandler;
  readonly codec: TokenCodec;
  readonly matcher: FieldMatcher;
  readonly limits: CaptureLimits;
}

/** The handler, matcher and limits of `spec` on `configuration` (`record` and `reveal` as routeTransformer). */
export function routeHandler(
  services: Services,
  configuration: Configuration,
  spec: TransformSpec,
  record: { readonly minted?: boolean; readonly paths?: boolean } = {},
  reveal: RevealPolicy = FOR_THE_POD,
): RouteHandler {
  const codec = services.codecs.get(configuration);
  const classificationId = resolveClassification(services, spec);
  const handler =
    spec.mode === 'encrypt'
      ? new EncryptHandler(codec.encryptor(classificationId), new KeyInUse(services.store, configuration.id, codec), record.minted === true)
      : new DecryptHandler(codec, reveal, classificationId === 0 ? null : classificationId, record.paths === true);
  const matcher = resolveMatcher(services, configuration, spec);
  const limits = spec.mode === 'encrypt' ? services.limits.plaintext : services.limits.token;
  return { handler, codec, matcher, limits };
}

/** The transform of one body on a route, alone (`reveal` as routeTransformer). */
export function routeBodyTransform(
  services: Services,
  configuration: Configuration,
  spec: TransformSpec,
  declared: BodyFormat | null,
  reveal: RevealPolicy = FOR_THE_POD,
): BodyTransform {
  const { transformer, handler } = routeTransformer(services, configuration, spec, declared, {}, reveal);
  return new BodyTransform(spec.mode, transformer, handler);
}

function resolveClassification(services: Services, spec: TransformSpec): number {
  if (spec.classification === null) return 0;
  const id = stateOf(services.store).classificationByIdOrSlug(spec.classification)?.id;
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
