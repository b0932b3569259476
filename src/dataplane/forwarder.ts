/**
 * Forwarding to a destination (DESIGN §8): undici Agents with keep-alive pools per origin,
 * request headers cleaned of `x-svc-*` and hop-by-hop headers, no redirects followed, and
 * the destination's answer relayed back as a stream. Failures map to gateway statuses
 * with the cause kept for the log and nothing internal in the body.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import { Agent, errors as undiciErrors } from '../http/undici.ts';
import type { SecureContext } from 'node:tls';
import type { Dispatcher } from 'undici';
import { AddressNotAllowedError, BadRequestError, ClientGoneError, DestinationNotAllowedError, SvcError, UpstreamTimeoutError, UpstreamUnreachableError } from '../errors.ts';
import { revealHeader } from '../fields/reveal.ts';
import type { RequestContext } from '../http/context.ts';
import { isOwnHeader } from '../http/svc-headers.ts';
import { publicOnlyLookup, type Resolver } from './address-policy.ts';
import type { Destination } from './destination.ts';
import type { Metrics } from '../telemetry/metrics.ts';

export interface ForwarderOptions {
  readonly connectTimeout: number;
  readonly headersTimeout: number;
  readonly bodyTimeout: number;
  /** DNS for destinations that must be public; the system resolver by default. */
  readonly resolve?: Resolver;
  readonly metrics?: Metrics;
}

/** RFC 9110 §7.6.1 hop-by-hop fields, plus the ones we set or strip ourselves. */
export const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']);
const NOT_FORWARDED = new Set([...HOP_BY_HOP, 'host', 'content-length', 'expect']);
/** Printable ASCII and tab: anything else (CR, LF, NUL, obs-text) never reaches a destination. */
const SAFE_VALUE = /^[\t\x20-\x7e]*$/;

export type ForwardBody = Buffer | AsyncIterable<Buffer> | null;

/** How relay and egress routes differ from `/proxy` (DESIGN §12); `/proxy` passes none. */
export interface ForwardOptions {
  /**
   * Pass the client's `authorization` on. On relay and egress routes it is the
   * application's own credential for the upstream, not one for svc-sidecar.
   */
  readonly keepAuthorization?: boolean;
  /** Keep the client's `host` (relay: the application sees the host it was called by). */
  readonly keepHost?: boolean;
  /** Set after cleaning, replacing what the client sent. */
  readonly setHeaders?: Readonly<Record<string, string>>;
  /** Request headers (lowercase) not passed on, beyond the hop-by-hop ones. */
  readonly dropHeaders?: ReadonlySet<string>;
  /**
   * Answers the client instead of relaying the response as-is (response transforms).
   * It must consume or destroy the response body.
   */
  readonly respond?: (ctx: RequestContext, response: Dispatcher.ResponseData, method: string) => Promise<void>;
  /**
   * Sends through these pools instead of the forwarder's own (the egress proxy's: vendor
   * CAs beside the system's, DESIGN §15); the destination still chooses which of the two.
   */
  readonly agents?: AgentPair;
}

/**
 * The two pools every forward goes through: one for hosts named exactly in an allowlist
 * (any address), one for wildcard matches (public addresses only, checked at connect time).
 */
export interface AgentPair {
  readonly trusted: Agent;
  readonly publicOnly: Agent;
}

export function agentPair(options: ForwarderOptions, connect: { readonly secureContext?: SecureContext } = {}): AgentPair {
  const common = { keepAliveTimeout: 10_000, connections: 256, headersTimeout: options.headersTimeout, bodyTimeout: options.bodyTimeout };
  const base = { ...connect, timeout: options.connectTimeout };
  return {
    trusted: new Agent({ ...common, connect: base }),
    publicOnly: new Agent({ ...common, connect: { ...base, lookup: publicOnlyLookup(options.resolve) } }),
  };
}

/** Closes both pools of a pair. */
export async function closeAgents(agents: AgentPair): Promise<void> {
  await Promise.all([agents.trusted.close(), agents.publicOnly.close()]);
}

const NO_OPTIONS: ForwardOptions = {};

export class Forwarder {
  private readonly agents: AgentPair;
  private readonly options: ForwarderOptions;

  constructor(options: ForwarderOptions) {
    this.options = options;
    this.agents = agentPair(options);
  }

  /**
   * Sends the request and relays the answer to `ctx.res`. Resolves when the relay is
   * done; rejects (before anything was sent to the client) with a gateway error.
   */
  async forward(ctx: RequestContext, destination: Destination, body: ForwardBody, options: ForwardOptions = NO_OPTIONS): Promise<void> {
    const request: Dispatcher.DispatchOptions = {
      origin: destination.origin,
      path: destination.path,
      method: (ctx.req.method ?? 'GET') as Dispatcher.HttpMethod,
      headers: forwardedHeaders(ctx.req.headers, destination, options),
      body: body === null || Buffer.isBuffer(body) ? body : Readable.from(body, { objectMode: false }),
      headersTimeout: this.options.headersTimeout,
      bodyTimeout: this.options.bodyTimeout,
    };
    const agents = options.agents ?? this.agents;
    const dispatcher = destination.trusted ? agents.trusted : agents.publicOnly;
    if (options.respond === undefined) {
      await this.relayDirect(ctx, destination, dispatcher, request);
      return;
    }
    const abort = new AbortController();
    const onClientGone = () => {
      if (!ctx.res.writableFinished) abort.abort();
    };
    ctx.res.once('close', onClientGone);
    let response: Dispatcher.ResponseData;
    const started = performance.now();
    try {
      response = await dispatcher.request({ ...request, signal: abort.signal });
    } catch (err) {
      ctx.res.off('close', onClientGone);
      // The client left while the destination was still to answer: nobody to answer, no upstream fault.
      if (abort.signal.aborted) throw new ClientGoneError();
      throw this.failed(err, destination);
    }
    this.options.metrics?.observeForward(destination.entry, response.statusCode, (performance.now() - started) / 1000);
    try {
      await options.respond(ctx, response, request.method);
    } finally {
      ctx.res.off('close', onClientGone);
    }
  }

  /**
   * The plain relay, on undici's handler interface: the destination's chunks go straight
   * to the client's socket with backpressure both ways, without a response stream, an
   * abort signal or a promise per chunk in between. Rejects only before the client has
   * been sent anything; after that a failure can only cut the client's connection.
   */
  private relayDirect(ctx: RequestContext, destination: Destination, dispatcher: Dispatcher, request: Dispatcher.DispatchOptions): Promise<void> {
    const res = ctx.res;
    const metrics = this.options.metrics;
    const started = performance.now();
    return new Promise<void>((resolve, reject) => {
      let controller: Dispatcher.DispatchController | null = null;
      let relaying = false;
      let settled = false;
      const onDrain = () => controller?.resume();
      const onClose = () => {
        if (!res.writableFinished) controller?.abort(new ClientGoneError());
      };
      const settle = (err: Error | null) => {
        if (settled) return;
        settled = true;
        res.off('drain', onDrain);
        res.off('close', onClose);
        if (err === null) resolve();
        else reject(err);
      };
      res.on('drain', onDrain);
      res.on('close', onClose);
      dispatcher.dispatch(request, {
        onRequestStart(c) {
          controller = c;
          if (res.destroyed) c.abort(new ClientGoneError());
        },
        onResponseStart(_c, statusCode, headers) {
          // 1xx answers are the destination's business; Node answers the client's own `expect`.
          if (statusCode < 200) return;
          metrics?.observeForward(destination.entry, statusCode, (performance.now() - started) / 1000);
          relaying = true;
          copyResponseHeaders(ctx, statusCode, headers);
        },
        onResponseData(c, chunk) {
          if (!res.write(chunk)) c.pause();
        },
        onResponseEnd() {
          res.end();
          settle(null);
        },
        onResponseError: (_c, err) => {
          if (relaying) {
            res.destroy();
            settle(null);
          } else if (err instanceof ClientGoneError || err.cause instanceof ClientGoneError) {
            settle(new ClientGoneError());
          } else {
            settle(this.failed(err, destination));
          }
        },
      });
    });
  }

  /** The gateway error for a request that got no answer, counted by allowlist entry. */
  private failed(err: unknown, destination: Destination): SvcError {
    const mapped = mapUpstreamError(err, destination);
    this.options.metrics?.countForwardError(destination.entry, mapped.status === 504 ? 'timeout' : mapped.status === 403 ? 'refused' : 'unreachable');
    return mapped;
  }

  async close(): Promise<void> {
    await closeAgents(this.agents);
  }
}

/**
 * On `/proxy` a `Bearer` authorization is the caller's access token for svc-sidecar
 * itself and is never passed on; other schemes (`Basic`, vendor schemes) are the client's
 * credentials for the destination and go through. `keepAuthorization` (relay, egress)
 * passes any scheme. `user:pass@` in the destination URL replaces it with basic auth.
 */
function forwardedHeaders(incoming: IncomingHttpHeaders, destination: Destination, options: ForwardOptions): Record<string, string | string[]> {
  const listed = connectionTokens(incoming['connection']);
  const out: Record<string, string | string[]> = {};
  // for-in rather than Object.entries: no pair array per header on every request.
  for (const name in incoming) {
    const value = incoming[name];
    if (value === undefined || isOwnHeader(name) || NOT_FORWARDED.has(name) || listed.has(name) || options.dropHeaders?.has(name) === true) continue;
    if (name === 'authorization' && options.keepAuthorization !== true && isBearer(value)) continue;
    if (!isSafeValue(value)) throw unforwardableHeaderError(name);
    out[name] = value;
  }
  if (options.keepHost === true && incoming.host !== undefined && SAFE_VALUE.test(incoming.host)) out['host'] = incoming.host;
  if (options.setHeaders !== undefined) Object.assign(out, options.setHeaders);
  if (destination.authorization !== null) out['authorization'] = destination.authorization;
  return out;
}

function isSafeValue(value: string | string[]): boolean {
  return Array.isArray(value) ? value.every((v) => SAFE_VALUE.test(v)) : SAFE_VALUE.test(value);
}

/** The first header whose value holds bytes that may not be forwarded (see SAFE_VALUE), or null. */
export function unforwardableHeader(headers: IncomingHttpHeaders): string | null {
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !isSafeValue(value)) return name;
  }
  return null;
}

/** The 400 for a header `unforwardableHeader` names. */
export function unforwardableHeaderError(name: string): BadRequestError {
  return new BadRequestError(`The ${name} header holds characters that cannot be forwarded.`);
}

function isBearer(value: string | string[]): boolean {
  return /^\s*bearer(\s|$)/i.test(Array.isArray(value) ? (value[0] ?? '') : value);
}

/** Header names listed in a `connection` header: hop-by-hop for this message (RFC 9110 §7.6.1). */
const NO_TOKENS: ReadonlySet<string> = new Set();

function connectionTokens(value: string | string[] | undefined): ReadonlySet<string> {
  // `keep-alive` and `close` name no header: the common case allocates nothing.
  if (value === undefined || value === 'keep-alive' || value === 'close') return NO_TOKENS;
  const tokens = new Set<string>();
  for (const token of String(value ?? '').split(',')) {
    const name = token.trim().toLowerCase();
    if (name !== '') tokens.add(name);
  }
  return tokens;
}

/**
 * The destination's status and end-to-end headers onto the client's response, plus the
 * request id; `skip` names headers the caller rewrites itself.
 */
export function copyResponseHeaders(ctx: RequestContext, statusCode: number, headers: IncomingHttpHeaders, skip?: ReadonlySet<string>): void {
  const res = ctx.res;
  res.statusCode = statusCode;
  const listed = connectionTokens(headers['connection']);
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name) || skip?.has(name) === true) continue;
    res.setHeader(name, value);
  }
  res.setHeader('x-svc-request-id', ctx.id);
  setTransformHeaders(ctx);
}

/** How many fields the request's transform replaced (DESIGN §13), on every transform's answer. */
export const FIELDS_TRANSFORMED = 'x-svc-fields-transformed';
/** How many values a decrypt showed at each level (DESIGN §14), on every decrypt's answer. */
export const REVEAL = 'x-svc-reveal';

/** `x-svc-fields-transformed`, and on a decrypt `x-svc-reveal`, once the request's body has been transformed whole. */
export function setTransformHeaders(ctx: RequestContext): void {
  if (ctx.fieldsTransformed !== null) ctx.res.setHeader(FIELDS_TRANSFORMED, ctx.fieldsTransformed);
  if (ctx.reveal !== null) ctx.res.setHeader(REVEAL, revealHeader(ctx.reveal));
}

/** Relays the destination's answer as-is, streamed (DESIGN §8). */
export async function relay(ctx: RequestContext, response: Dispatcher.ResponseData, method: string): Promise<void> {
  const res = ctx.res;
  copyResponseHeaders(ctx, response.statusCode, response.headers);
  if (method === 'HEAD' || response.statusCode === 204 || response.statusCode === 304) {
    response.body.resume();
    res.end();
    return;
  }
  await pump(response.body, res);
}

/**
 * Copies the destination's body to the client with backpressure. A destination that
 * resets mid-body leaves a half-sent response: the client's socket is destroyed, the only
 * honest signal once the status line is gone. A client that leaves stops the download.
 * (Written out rather than `stream.pipeline`, which allocates an abort error per call.)
 */
function pump(body: Dispatcher.ResponseData['body'], res: RequestContext['res']): Promise<void> {
  return new Promise<void>((resolve) => {
    const onData = (chunk: Buffer) => {
      if (!res.write(chunk)) body.pause();
    };
    const onDrain = () => body.resume();
    const finish = () => {
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', onError);
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve();
    };
    const onEnd = () => {
      res.end();
      finish();
    };
    const onError = () => {
      res.destroy();
      finish();
    };
    const onClose = () => {
      if (!res.writableFinished) body.destroy();
      finish();
    };
    body.on('data', onData);
    body.on('end', onEnd);
    body.on('error', onError);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

export function mapUpstreamError(err: unknown, destination: Destination): SvcError {
  if (err instanceof SvcError) return err;
  // A failure of our own request body (bad JSON, over the limit) surfaces wrapped.
  if (err instanceof Error && err.cause instanceof SvcError) return err.cause;
  const cause = err instanceof Error ? err : new Error(String(err));
  const code = (cause as NodeJS.ErrnoException).code;
  if (cause instanceof AddressNotAllowedError || (cause.cause instanceof AddressNotAllowedError)) {
    return new DestinationNotAllowedError(destination.url.host);
  }
  if (cause instanceof undiciErrors.HeadersTimeoutError || cause instanceof undiciErrors.ConnectTimeoutError || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') {
    return new UpstreamTimeoutError(cause);
  }
  return new UpstreamUnreachableError(cause);
}
