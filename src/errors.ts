/**
 * The error catalogue. Every error the service answers with is a class here with a
 * stable `code`, an HTTP `status` and its exact message (DESIGN §7). Handlers throw;
 * `sendError` in `http/respond.ts` is the one place that turns them into responses.
 * The few errors that are never answered but end a request or a start (a client that
 * left, a listener that cannot bind, a master key that does not fit the store) are here
 * too, at the end. Errors that stay inside one module and are turned into one of these
 * before anything answers live with that module: ConfigError (config/), TokenError
 * (crypto/token.ts, becomes a 422 or 403), UsageError (cli/), SeedError (store/seed.ts)
 * and SnapshotRejectedError (sync/snapshot.ts, a refused snapshot, counted and logged).
 *
 * This file imports nothing of ours, so every area (fields and crypto included) may use it.
 */

export type ValidationErrors = Record<string, string[]>;

export class SvcError extends Error {
  readonly code: string;
  readonly status: number;
  /** Extra response headers, e.g. Retry-After. */
  readonly headers: Record<string, string> | undefined;

  constructor(code: string, status: number, message: string, options?: { cause?: unknown; headers?: Record<string, string> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.headers = options?.headers;
  }

  /** The JSON body sent to the client. Never contains internals. */
  body(): Record<string, unknown> {
    return { message: this.message };
  }
}

export class UnauthorizedError extends SvcError {
  constructor(options?: { cause?: unknown }) {
    super('SVC_ERR_UNAUTHORIZED', 401, 'Unauthorized.', options);
  }
}

export class UnauthenticatedError extends SvcError {
  constructor() {
    super('SVC_ERR_UNAUTHENTICATED', 401, 'Unauthenticated.');
  }
}

export class ActionUnauthorizedError extends SvcError {
  constructor() {
    super('SVC_ERR_ACTION_UNAUTHORIZED', 403, 'This action is unauthorized.');
  }
}

export class ForbiddenError extends SvcError {
  constructor() {
    super('SVC_ERR_FORBIDDEN', 403, 'User does not have the right permissions.');
  }
}

export class DestinationNotAllowedError extends SvcError {
  constructor(host: string) {
    super('SVC_ERR_DESTINATION_NOT_ALLOWED', 403, `The destination host ${host} is not allowed for this configuration.`);
  }
}

/** An `x-svc-destination` whose path could leave the allowlisted path it matched by prefix (DESIGN §8). */
export const DESTINATION_PATH_NOT_ALLOWED = 'The destination path is not allowed: under an allowlisted path it may not contain an encoded "/", "\\", ";" or "%", or a dot segment.';

export class DestinationPathNotAllowedError extends SvcError {
  constructor() {
    super('SVC_ERR_DESTINATION_PATH', 403, DESTINATION_PATH_NOT_ALLOWED);
  }
}

/** An egress `{rest}` that could leave the route's destination path (DESIGN §13). */
export class EgressPathRefusedError extends SvcError {
  constructor() {
    super('SVC_ERR_EGRESS_PATH', 403, 'The egress path is not allowed: it may not contain an encoded "/" or "\\", or a dot segment.');
  }
}

/** The egress proxy (DESIGN §15) lists no rule for the host, and `unknown_hosts` is `deny`. */
export class EgressHostNotAllowedError extends SvcError {
  constructor(host: string) {
    // The host as the client named it, no longer than a DNS name can be.
    super('SVC_ERR_EGRESS_HOST', 403, `The egress proxy does not serve the host ${host.slice(0, 253)}.`);
  }
}

/** The egress proxy (DESIGN §15) refuses to decrypt tokens for a plain `http://` request. */
export class EgressPlainHttpError extends SvcError {
  constructor() {
    super('SVC_ERR_EGRESS_PLAIN_HTTP', 403, 'Tokens are decrypted only for https: send this request to an https:// URL.');
  }
}

export class NotFoundError extends SvcError {
  constructor() {
    super('SVC_ERR_NOT_FOUND', 404, 'Not found.');
  }
}

export class MethodNotAllowedError extends SvcError {
  constructor(allowed: readonly string[]) {
    super('SVC_ERR_METHOD_NOT_ALLOWED', 405, 'Method not allowed.', { headers: { allow: allowed.join(', ') } });
  }
}

export class ManagedByControlPlaneError extends SvcError {
  constructor() {
    super('SVC_ERR_MANAGED', 409, 'Managed by the control plane.');
  }
}

/**
 * Destroying a key version that stopped being current less than `keys.destroy_after` ago:
 * requests in flight and replicas that have not polled yet may still be encrypting with it.
 */
export class KeyDestroyTooSoonError extends SvcError {
  constructor(version: number, destroyableAt: string) {
    super(
      'SVC_ERR_KEY_DESTROY_TOO_SOON',
      409,
      `Key version ${version} was current less than keys.destroy_after ago and may still be in use: it can be destroyed from ${destroyableAt}, or now with force: true.`,
    );
  }
}

/** An encryption whose key version was destroyed before it finished: its tokens could never be decrypted. */
export class KeyDestroyedDuringRequestError extends SvcError {
  constructor() {
    super('SVC_ERR_KEY_DESTROYED', 409, 'The key version was destroyed during the request.');
  }
}

export class BodyTooLargeError extends SvcError {
  constructor(limit: number) {
    super('SVC_ERR_BODY_TOO_LARGE', 413, `The request body exceeds the limit of ${limit} bytes.`);
  }
}

/** One captured field value or object key is larger than `limits.max_value` (DESIGN §13). */
export class ValueTooLargeError extends SvcError {
  constructor(limit: number) {
    super('SVC_ERR_VALUE_TOO_LARGE', 413, `A field value exceeds the limit of ${limit} bytes.`);
  }
}

/** `POST /api/v3/sync/logs` beyond `sync.max_batch` rows (docs/replication.md). */
export class SyncBatchTooLargeError extends SvcError {
  constructor(limit: number) {
    super('SVC_ERR_SYNC_BATCH_TOO_LARGE', 413, `The log batch holds more than ${limit} rows.`);
  }
}

export class UnsupportedMediaTypeError extends SvcError {
  constructor() {
    super('SVC_ERR_UNSUPPORTED_MEDIA_TYPE', 415, 'The request body must be JSON (Content-Type: application/json).');
  }
}

export class RequestTimeoutError extends SvcError {
  constructor() {
    super('SVC_ERR_REQUEST_TIMEOUT', 408, 'Request timeout.');
  }
}

/** The relay guard (DESIGN §13) cannot read a request body, so cannot vouch for it. */
export class UninspectableBodyError extends SvcError {
  constructor(detail: string) {
    super('SVC_ERR_UNINSPECTABLE_BODY', 415, `The request body cannot be inspected for protected fields: ${detail}.`);
  }
}

export class HeaderTooLargeError extends SvcError {
  constructor() {
    super('SVC_ERR_HEADER_TOO_LARGE', 431, 'Request header fields too large.');
  }
}

/** Malformed JSON in a request body. `detail` names the problem and its byte offset. */
export class InvalidJsonError extends SvcError {
  constructor(detail: string) {
    super('SVC_ERR_INVALID_JSON', 400, `The request body is not valid JSON: ${detail}.`);
  }
}

/** A form body (`application/x-www-form-urlencoded`) that cannot be decoded. */
export class InvalidFormError extends SvcError {
  /** What is wrong, without the body's bytes. */
  readonly detail: string;

  constructor(detail: string) {
    super('SVC_ERR_INVALID_FORM', 400, `The request body is not a valid form: ${detail}.`);
    this.detail = detail;
  }
}

/** A query string that a route's or the relay guard's `query` rules must read but cannot decode. */
export class InvalidQueryError extends SvcError {
  constructor(detail: string) {
    super('SVC_ERR_INVALID_QUERY', 400, `The query string is not valid: ${detail}.`);
  }
}

export class DepthExceededError extends SvcError {
  constructor(maxDepth: number) {
    super('SVC_ERR_DEPTH_EXCEEDED', 400, `The request body exceeds the maximum depth of ${maxDepth}.`);
  }
}

/** A bad request header or query value that is not a validation of a resource body. */
export class BadRequestError extends SvcError {
  constructor(message: string) {
    super('SVC_ERR_BAD_REQUEST', 400, message);
  }
}

export class InvalidFieldPathsError extends SvcError {
  constructor(detail: string) {
    super('SVC_ERR_INVALID_FIELDS', 400, `The x-svc-fields header is invalid: ${detail}.`);
  }
}

/** Laravel-style validation failure: first message, then "(and N more errors)". */
export class ValidationError extends SvcError {
  readonly errors: ValidationErrors;

  constructor(errors: ValidationErrors, code = 'SVC_ERR_VALIDATION') {
    super(code, 422, summarize(errors));
    this.errors = errors;
  }

  override body(): Record<string, unknown> {
    return { message: this.message, errors: this.errors };
  }
}

/** Tokens that are malformed, tampered with, or belong to another configuration. */
export class InvalidTokenError extends ValidationError {
  constructor(errors: ValidationErrors) {
    super(errors, 'SVC_ERR_INVALID_TOKEN');
  }
}

/** The relay guard found a protected key with a plaintext value (`on_plaintext: refuse`). */
export class ProtectedFieldError extends ValidationError {
  constructor(errors: ValidationErrors) {
    super(errors, 'SVC_ERR_PROTECTED_FIELD');
  }
}

export function protectedFieldMessage(key: string): string {
  return `The request carries a protected field in plaintext: ${key}.`;
}

export class TooManyRequestsError extends SvcError {
  constructor(retryAfterSeconds: number) {
    super('SVC_ERR_TOO_MANY_REQUESTS', 429, 'Too many requests.', {
      headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) },
    });
  }
}

export class UpstreamUnreachableError extends SvcError {
  constructor(cause?: unknown) {
    super('SVC_ERR_UPSTREAM_UNREACHABLE', 502, 'The destination could not be reached.', { cause });
  }
}

/** A relay or egress route could not transform the upstream's answer: nothing of it is sent. */
export class UpstreamResponseError extends SvcError {
  constructor(cause?: unknown) {
    super('SVC_ERR_UPSTREAM_RESPONSE', 502, 'The upstream response could not be transformed.', { cause });
  }
}

export class UpstreamTimeoutError extends SvcError {
  constructor(cause?: unknown) {
    super('SVC_ERR_UPSTREAM_TIMEOUT', 504, 'The destination did not answer in time.', { cause });
  }
}

export class NotReadyError extends SvcError {
  constructor() {
    super('SVC_ERR_NOT_READY', 503, 'The service is not ready.');
  }
}

/**
 * The store's database cannot be reached (the connection was refused, lost or cut by the
 * server): the request that met it is answered as not ready rather than as a server
 * error, the cause is logged, and the next request tries again.
 */
export class StoreUnavailableError extends SvcError {
  constructor(cause: unknown) {
    super('SVC_ERR_STORE_UNAVAILABLE', 503, 'The service is not ready.', { cause });
    this.name = 'StoreUnavailableError';
  }
}

/**
 * A relay or egress route names a configuration or classification that is not in the
 * store (deleted or renamed at runtime): the deployment must be fixed, nothing is sent on.
 */
export class RouteUnavailableError extends SvcError {
  constructor(cause?: unknown) {
    super('SVC_ERR_ROUTE_UNAVAILABLE', 503, 'The route is not available.', { cause });
  }
}

/**
 * A data request (encrypt, decrypt, proxy, egress) sent to a control plane whose store is
 * PostgreSQL: those instances serve the management API and replication only (DESIGN §16).
 * 421 Misdirected Request: this server will not answer for the resource; another will.
 */
export class ControlPlaneOnlyError extends SvcError {
  constructor() {
    super('SVC_ERR_CONTROL_PLANE_ONLY', 421, 'This control plane serves no data requests: send them to a sidecar.');
  }
}

export class InternalError extends SvcError {
  constructor(cause?: unknown) {
    super('SVC_ERR_INTERNAL', 500, 'Server error.', { cause });
  }
}

// ---------------------------------------------------------------------------------------
// Errors that are never answered

/** The client went away mid-request: there is nobody left to answer. */
export class ClientGoneError extends Error {
  readonly code = 'SVC_ERR_CLIENT_GONE';
  constructor() {
    super('the client closed the connection before the exchange was complete');
  }
}

/**
 * A destination that must be public resolved to an address that is not (DESIGN §8): raised
 * inside the socket's DNS lookup, answered as DestinationNotAllowedError.
 */
export class AddressNotAllowedError extends Error {
  readonly code = 'SVC_ERR_ADDRESS_NOT_ALLOWED';
  constructor(host: string) {
    super(`${host} resolves to an address that is not public`);
    this.name = 'AddressNotAllowedError';
  }
}

/** A configured listener could not bind its address: the process does not start. */
export class ListenError extends Error {
  readonly code = 'SVC_ERR_LISTEN';
  constructor(listener: string, address: string, cause: unknown) {
    const reason = (cause as NodeJS.ErrnoException | null)?.code ?? (cause instanceof Error ? cause.message : String(cause));
    super(`The ${listener} listener cannot listen on ${address} (${reason}).`, { cause });
    this.name = 'ListenError';
  }
}

/** The egress proxy's CA files cannot be read, created or used: the process does not start. */
export class EgressCaError extends Error {
  readonly code = 'SVC_ERR_EGRESS_CA';
  constructor(certFile: string, keyFile: string, reason: string, cause?: unknown) {
    super(`The egress proxy CA (${certFile}, ${keyFile}) cannot be used: ${reason}.`, cause === undefined ? undefined : { cause });
    this.name = 'EgressCaError';
  }
}

/** The master key is not the one the store's keys are wrapped under: the process does not start. */
export class MasterKeyMismatchError extends Error {
  readonly code = 'SVC_ERR_MASTER_KEY_MISMATCH';
  constructor(storePath: string) {
    super(`The master key does not match the one this store was created with (store: ${storePath}).`);
    this.name = 'MasterKeyMismatchError';
  }
}

/** No master key is configured next to a store that holds keys wrapped under one. */
export class MasterKeyMissingError extends Error {
  readonly code = 'SVC_ERR_MASTER_KEY_MISSING';
  constructor(file: string) {
    super(
      `No master key was found (SVC_MASTER_KEY is not set and ${file} does not exist), but the store holds keys wrapped under one: ` +
        'restore the key file or set SVC_MASTER_KEY. A new key would not open them, so none is generated.',
    );
    this.name = 'MasterKeyMissingError';
  }
}

function summarize(errors: ValidationErrors): string {
  const messages = Object.values(errors).flat();
  const first = messages[0] ?? 'The given data was invalid.';
  const more = messages.length - 1;
  if (more <= 0) return first;
  return `${first} (and ${more} more ${more === 1 ? 'error' : 'errors'})`;
}
