/**
 * The relay guard (DESIGN §13). Routes say what to transform; the guard says what must
 * never reach the application in plaintext, whatever route, method, path spelling or
 * content type. Every request body the relay passes on goes through it: JSON (by content
 * type or by its first byte), NDJSON and forms are read whole-document, key by key at any
 * depth; a protected key's value that is not already a token of ours is encrypted (or the
 * request refused with 422); a body the guard cannot read is refused with 415 unless
 * `uninspectable: pass`.
 *
 * "Already a token" means a token that opens under the guard's configuration (or the
 * route's): a string merely shaped like one could carry plaintext inside, so it is
 * encrypted like any other value.
 */
import { unescape } from 'node:querystring';
import type { ProtectConfig } from '../config/schema.ts';
import { TokenError, type FieldEncryptor, type TokenCodec, type TokenHeader } from '../crypto/token.ts';
import {
  DepthExceededError,
  InvalidFormError,
  InvalidJsonError,
  ProtectedFieldError,
  protectedFieldMessage,
  RouteUnavailableError,
  UninspectableBodyError,
  ValidationError,
  ValueTooLargeError,
  type SvcError,
  type ValidationErrors,
} from '../errors.ts';
import { plaintextInEmbeddedJson } from '../fields/embedded-json.ts';
import { FormTransformer } from '../fields/form.ts';
import { declaredFormat, detectRequestFormat, FORM_FORMAT, SniffingTransformer, type BodyFormat } from '../fields/formats.ts';
import type { FieldMatcher } from '../fields/paths.ts';
import { protectedKeyOf, protectedKeysMatcher } from '../fields/protected-keys.ts';
import { transformQuery } from '../fields/query.ts';
import type { CaptureLimits, ChunkTransformer, FieldValue } from '../fields/value.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { stateOf } from '../store/state-view.ts';
import { recordUsage } from '../telemetry/usage.ts';
import type { CollectingHandler } from './body-transform.ts';
import { KeyInUse, recordFailure } from './field-handlers.ts';

export type GuardOutcome = 'encrypted' | 'refused' | 'passed';

export class RelayGuard {
  readonly settings: ProtectConfig;
  private readonly matcher: FieldMatcher;

  constructor(settings: ProtectConfig) {
    this.settings = settings;
    this.matcher = protectedKeysMatcher(settings.keys);
  }

  /**
   * The guard's pass over one request body. `route` is the codec of a route that
   * transformed the body first, and `minted` the tokens it wrote, which are kept as they are.
   */
  begin(ctx: RequestContext, services: Services, route: TokenCodec | null, minted: ReadonlySet<string> | null): GuardPass {
    const { handler, configuration } = this.handler(services, this.settings, route, minted);
    return new GuardPass(ctx, services, this.settings, this.matcher, handler, configuration);
  }

  /**
   * The guard over a request's query string (without its `?`), read as a form split at `&`
   * and `;`: a protected parameter's plaintext value is encrypted in place (or refused with
   * 422), so it never reaches the application in the target either. Returns the query to
   * send on. A query that does not decode is a 400 even with `uninspectable: pass`: every
   * application reads its query, and many decode a bad escape leniently. `ctx` null (a WebSocket upgrade, whose target cannot be
   * rewritten after the fact): a plaintext value is refused whatever `on_plaintext` says.
   */
  query(ctx: RequestContext | null, services: Services, query: string, route: TokenCodec | null = null, minted: ReadonlySet<string> | null = null): string {
    if (query === '') return query;
    const settings: ProtectConfig = ctx === null && this.settings.on_plaintext !== 'refuse' ? { ...this.settings, on_plaintext: 'refuse' } : this.settings;
    const { handler, configuration } = this.handler(services, settings, route, minted);
    let out: string;
    try {
      refuseEmbeddedPlaintext(query, this.settings.keys, handler);
      out = transformQuery(query, this.matcher, handler, services.limits.token);
    } catch (err) {
      services.metrics.countGuard('refused');
      throw err;
    }
    const failure = handler.failure();
    if (failure !== null) {
      services.metrics.countGuard('refused');
      throw failure;
    }
    if (handler.count === 0) return query;
    if (ctx !== null) recordUsage(ctx, services, configuration, 'encrypt', handler.count, query.length);
    services.metrics.countGuard('encrypted');
    return out;
  }

  private handler(services: Services, settings: ProtectConfig, route: TokenCodec | null, minted: ReadonlySet<string> | null): { handler: GuardHandler; configuration: Configuration } {
    const configuration = stateOf(services.store).configurationByName(this.settings.configuration);
    if (configuration === undefined || configuration.type !== 'encryption') {
      throw new RouteUnavailableError(new Error(`relay.protect names the configuration "${this.settings.configuration}", which is not an encryption configuration in the store`));
    }
    const codec = services.codecs.get(configuration);
    let classificationId = 0;
    if (this.settings.classification !== undefined) {
      const id = stateOf(services.store).classificationByIdOrSlug(this.settings.classification)?.id;
      if (id === undefined) throw new RouteUnavailableError(new Error(`relay.protect names the classification "${this.settings.classification}", which does not exist`));
      classificationId = id;
    }
    const verifiers = route === null || route === codec ? [codec] : [codec, route];
    const handler = new GuardHandler(settings, codec.encryptor(classificationId), classificationId, new KeyInUse(services.store, configuration.id, codec), verifiers, minted, services.limits.plaintext);
    return { handler, configuration };
  }
}

/**
 * A query parameter whose value is JSON holding a protected key in plaintext (fields/
 * embedded-json.ts) is refused with 422: the value is the application's to parse, so it
 * cannot be encrypted in place. Parameters are split as every server might split them: at
 * `&` alone (a raw `;` inside the JSON then stays in it) and at `;` too. Names and values
 * are decoded leniently, as Node's querystring does (bytes that are not UTF-8 become
 * U+FFFD): a value a server still parses as JSON is looked at; a name that does not decode
 * is left to transformQuery, which refuses it.
 */
function refuseEmbeddedPlaintext(query: string, keys: readonly string[], handler: GuardHandler): void {
  for (const part of query.split('&')) {
    refuseEmbeddedIn(part, keys, handler);
    // Split at `;` too, each piece once: a part without one was looked at whole just now.
    if (part.includes(';')) for (const piece of part.split(';')) refuseEmbeddedIn(piece, keys, handler);
  }
}

/** One `name=value` parameter of refuseEmbeddedPlaintext. */
function refuseEmbeddedIn(part: string, keys: readonly string[], handler: GuardHandler): void {
  const eq = part.indexOf('=');
  if (eq === -1) return;
  const value = unescape(part.slice(eq + 1).replaceAll('+', ' '));
  const key = plaintextInEmbeddedJson(value, keys, (text) => handler.keeps(text));
  if (key !== undefined) throw new ProtectedFieldError({ [unescape(part.slice(0, eq).replaceAll('+', ' '))]: [protectedFieldMessage(key)] });
}

/** Decides each protected value: kept (a token of ours), encrypted, or refused. */
export class GuardHandler implements CollectingHandler {
  readonly protects = true;
  /** Values encrypted. */
  count = 0;
  private readonly settings: ProtectConfig;
  private readonly encryptor: FieldEncryptor;
  /** The classification the guard binds: a client's token is kept only if it carries it. */
  private readonly classificationId: number;
  private readonly key: KeyInUse;
  private readonly verifiers: readonly TokenCodec[];
  private readonly minted: ReadonlySet<string> | null;
  private errors: ValidationErrors | null = null;
  private refusal: ValidationError | null = null;

  /**
   * The guard holds a protected value as long as a token may be; one that is not a token
   * of ours is plaintext, held to the limit of plaintext.
   */
  private readonly plaintextLimits: CaptureLimits;

  constructor(
    settings: ProtectConfig,
    encryptor: FieldEncryptor,
    classificationId: number,
    key: KeyInUse,
    verifiers: readonly TokenCodec[],
    minted: ReadonlySet<string> | null,
    plaintextLimits: CaptureLimits,
  ) {
    this.plaintextLimits = plaintextLimits;
    this.settings = settings;
    this.encryptor = encryptor;
    this.classificationId = classificationId;
    this.key = key;
    this.verifiers = verifiers;
    this.minted = minted;
  }

  failure(leaving = true): SvcError | null {
    return this.refusal ?? this.key.failure(this.count, leaving);
  }

  replace(value: FieldValue): Buffer | null {
    if (value.kind === 'z') return null;
    const token = value.token();
    if (token !== null && (this.minted?.has(token) === true || this.opens(token))) return null;
    if (value.raw.length > this.plaintextLimits.capture) throw new ValueTooLargeError(this.plaintextLimits.value);
    if (this.settings.on_plaintext === 'refuse') return this.fail(value, protectedFieldMessage(this.keyOf(value)));
    const plaintext = value.plaintext();
    if (plaintext === null) return this.fail(value, 'The value contains an unpaired surrogate and cannot be encrypted.');
    this.count++;
    return value.encodeToken(this.encryptor.encrypt(plaintext, value.kind));
  }

  /** Whether `text` is a token this guard keeps as it is (minted for this request, or one of ours of its classification). */
  keeps(text: string): boolean {
    return this.minted?.has(text) === true || this.opens(text);
  }

  /**
   * A token the client sent is kept when it opens and carries the guard's classification:
   * a token of another field (a `dob` the application shows) or of a lesser classification
   * placed under a protected key is encrypted again, never taken as the protected value.
   */
  private opens(token: string): boolean {
    for (const codec of this.verifiers) {
      try {
        codec.decrypt(token, this.sameClassification).plaintext.fill(0);
        return true;
      } catch (err) {
        if (!(err instanceof TokenError)) throw err;
      }
    }
    return false;
  }

  private readonly sameClassification = (header: TokenHeader): void => {
    if (header.classificationId !== this.classificationId) throw new TokenError('authentication');
  };

  private fail(value: FieldValue, message: string): null {
    this.errors = recordFailure(this.errors, value, message);
    this.refusal = this.settings.on_plaintext === 'refuse' ? new ProtectedFieldError(this.errors) : new ValidationError(this.errors);
    return null;
  }

  /** The configured key a value's path reached it by (its last segment that is one). */
  private keyOf(value: FieldValue): string {
    const segments = value.path().split(/(?<!\\)\./).map((s) => s.replace(/\\(.)/g, '$1'));
    for (let i = segments.length - 1; i >= 0; i--) {
      const key = protectedKeyOf(this.settings.keys, segments[i]!);
      if (key !== undefined) return key;
    }
    return this.settings.keys[0]!;
  }
}

/**
 * One body through the guard, as a transformer: it reads the format off the headers and
 * the first byte, turns what it cannot read into a 415 (or, with `uninspectable: pass`,
 * into the body passed on untouched), and counts the outcome once.
 */
export class GuardPass implements ChunkTransformer {
  readonly handler: GuardHandler;
  private readonly ctx: RequestContext;
  private readonly services: Services;
  private readonly settings: ProtectConfig;
  private readonly configuration: Configuration;
  private readonly inner: ChunkTransformer;
  private outcome: GuardOutcome | null = null;
  /** The rest of the body passes untouched (`uninspectable: pass`). */
  private passing = false;
  /**
   * The body is declared in a format the guard reads: if it cannot read it after all, it is
   * refused even with `uninspectable: pass` (an application reads it as declared).
   */
  private readonly declaredReadable: boolean;
  /**
   * While nothing was replaced the output is a prefix of the input: the input not yet
   * written out (a value or key being held) is kept here, so that a body found unreadable
   * halfway can still pass whole. Bounded by what the transformer may hold.
   */
  private pending: Buffer[] = [];
  private pendingStart = 0;
  private consumed = 0;
  private emitted = 0;

  constructor(ctx: RequestContext, services: Services, settings: ProtectConfig, matcher: FieldMatcher, handler: GuardHandler, configuration: Configuration) {
    this.ctx = ctx;
    this.services = services;
    this.settings = settings;
    this.handler = handler;
    this.configuration = configuration;
    const detected = detectRequestFormat(ctx.req.headers['content-type'], ctx.req.headers['content-encoding']);
    // Declared as the most lenient servers read a content type (`…urlencoded, text/plain`
    // is a form to PHP): a body an application may parse as a form is read as one.
    const declaredType = declaredFormat(ctx.req.headers['content-type']);
    const declared: BodyFormat | null = detected === 'unreadable' ? null : declaredType;
    // Declared JSON, NDJSON or a form is read as such by the application, compressed or in
    // another charset too (common parsers inflate and decode both).
    this.declaredReadable = declaredType !== null;
    if (detected === 'unreadable') this.uninspectable('it is compressed or not UTF-8');
    this.inner = new SniffingTransformer(
      declared,
      // A form is read as every server might split it, at `;` too (the handler protects);
      // without FORM_FORMAT's NotJson wrapper, since the callback below decides a "form"
      // that reads as JSON.
      (format) => (format === FORM_FORMAT ? new FormTransformer(matcher, handler, services.limits.token, { semicolons: handler.protects }) : format.create(matcher, handler, services.limits.token)),
      (format, first) => {
        if (format === null) this.uninspectable('it is not JSON, NDJSON or a form');
        // A "form" that reads as JSON: the application may take it as either; the guard
        // cannot vouch for both readings.
        else if (format.name === 'form' && (first === 0x7b || first === 0x5b)) this.uninspectable('it is declared a form but reads as JSON');
      },
    );
  }

  push(chunk: Buffer, out: Buffer[]): void {
    if (this.passing) {
      out.push(chunk);
      return;
    }
    const before = out.length;
    this.guarded(() => this.inner.push(chunk, out), chunk, out, before);
  }

  end(out: Buffer[]): void {
    if (!this.passing) this.guarded(() => this.inner.end(out), null, out, out.length);
    this.finish(this.passing || this.handler.count === 0 ? 'passed' : 'encrypted');
    if (this.handler.count > 0) recordUsage(this.ctx, this.services, this.configuration, 'encrypt', this.handler.count, this.consumed);
  }

  private guarded(step: () => void, chunk: Buffer | null, out: Buffer[], before: number): void {
    if (chunk !== null) {
      this.consumed += chunk.length;
      if (this.handler.count === 0) this.pending.push(chunk);
    }
    try {
      step();
    } catch (err) {
      if (err instanceof InvalidJsonError || err instanceof InvalidFormError || err instanceof DepthExceededError) {
        this.unreadableMidway(err.message, out, before);
        return;
      }
      this.finish('refused');
      throw err;
    }
    const failure = this.handler.failure();
    if (failure !== null) {
      this.finish('refused');
      throw failure;
    }
    this.track(out, before);
  }

  /** Drops from `pending` what has now been written out, while output still equals input. */
  private track(out: Buffer[], before: number): void {
    if (this.handler.count > 0) {
      this.pending = [];
      return;
    }
    for (let i = before; i < out.length; i++) this.emitted += out[i]!.length;
    while (this.pending.length > 0 && this.pendingStart + this.pending[0]!.length <= this.emitted) {
      this.pendingStart += this.pending.shift()!.length;
    }
  }

  private unreadableMidway(detail: string, out: Buffer[], before: number): void {
    // What the transformer appended for this chunk before failing is dropped: the body
    // from the last byte written out goes on as it came, or not at all.
    const reason = detail.replace(/^The request body (?:is not valid JSON|is not a valid form|exceeds)[:]? ?/, '').replace(/\.$/, '');
    if (this.settings.uninspectable === 'pass' && !this.declaredReadable && this.handler.count === 0) {
      out.length = before;
      const rest = Buffer.concat(this.pending).subarray(this.emitted - this.pendingStart);
      if (rest.length > 0) out.push(rest);
      this.pending = [];
      this.passing = true;
      return;
    }
    this.finish('refused');
    throw new UninspectableBodyError(reason === '' ? 'it is not valid' : reason);
  }

  private uninspectable(reason: string): void {
    if (this.settings.uninspectable === 'pass' && !this.declaredReadable) {
      this.passing = true;
      return;
    }
    this.finish('refused');
    throw new UninspectableBodyError(reason);
  }

  private finish(outcome: GuardOutcome): void {
    if (this.outcome !== null) return;
    this.outcome = outcome;
    this.services.metrics.countGuard(outcome);
  }
}
