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
import type { ProtectConfig } from '../config/schema.ts';
import { TokenError, type FieldEncryptor, type TokenCodec } from '../crypto/token.ts';
import {
  DepthExceededError,
  InvalidFormError,
  InvalidJsonError,
  ProtectedFieldError,
  protectedFieldMessage,
  RouteUnavailableError,
  UninspectableBodyError,
  ValidationError,
  type SvcError,
  type ValidationErrors,
} from '../errors.ts';
import { FormTransformer } from '../fields/form.ts';
import { detectFormat, FORM_FORMAT, isIdentity, SniffingTransformer, type BodyFormat } from '../fields/formats.ts';
import type { FieldMatcher } from '../fields/paths.ts';
import { protectedKeyOf, protectedKeysMatcher } from '../fields/protected-keys.ts';
import type { ChunkTransformer, FieldValue } from '../fields/value.ts';
import type { RequestContext } from '../http/context.ts';
import type { Services } from '../services.ts';
import type { Configuration } from '../store/configurations.ts';
import { classificationIdOf } from '../store/stamped-cache.ts';
import { recordUsage } from '../telemetry/usage.ts';
import type { CollectingHandler } from './body-transform.ts';
import { KeyInUse } from './field-handlers.ts';

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
    const configuration = services.store.configurations.findByName(this.settings.configuration);
    if (configuration === undefined || configuration.type !== 'encryption') {
      throw new RouteUnavailableError(new Error(`relay.protect names the configuration "${this.settings.configuration}", which is not an encryption configuration in the store`));
    }
    const codec = services.codecs.get(configuration);
    let classificationId = 0;
    if (this.settings.classification !== undefined) {
      const id = classificationIdOf(services.store, this.settings.classification);
      if (id === undefined) throw new RouteUnavailableError(new Error(`relay.protect names the classification "${this.settings.classification}", which does not exist`));
      classificationId = id;
    }
    const verifiers = route === null || route === codec ? [codec] : [codec, route];
    const handler = new GuardHandler(this.settings, codec.encryptor(classificationId), new KeyInUse(services.store, configuration.id, codec), verifiers, minted);
    return new GuardPass(ctx, services, this.settings, this.matcher, handler, configuration);
  }
}

/** Decides each protected value: kept (a token of ours), encrypted, or refused. */
export class GuardHandler implements CollectingHandler {
  /** Values encrypted. */
  count = 0;
  private readonly settings: ProtectConfig;
  private readonly encryptor: FieldEncryptor;
  private readonly key: KeyInUse;
  private readonly verifiers: readonly TokenCodec[];
  private readonly minted: ReadonlySet<string> | null;
  private errors: ValidationErrors | null = null;
  private refusal: ValidationError | null = null;

  constructor(settings: ProtectConfig, encryptor: FieldEncryptor, key: KeyInUse, verifiers: readonly TokenCodec[], minted: ReadonlySet<string> | null) {
    this.settings = settings;
    this.encryptor = encryptor;
    this.key = key;
    this.verifiers = verifiers;
    this.minted = minted;
  }

  failure(): SvcError | null {
    return this.refusal ?? this.key.failure(this.count);
  }

  replace(value: FieldValue): Buffer | null {
    if (value.kind === 'z') return null;
    const token = value.token();
    if (token !== null && (this.minted?.has(token) === true || this.opens(token))) return null;
    if (this.settings.on_plaintext === 'refuse') return this.fail(value, protectedFieldMessage(this.keyOf(value)));
    const plaintext = value.plaintext();
    if (plaintext === null) return this.fail(value, 'The value contains an unpaired surrogate and cannot be encrypted.');
    this.count++;
    return value.encodeToken(this.encryptor.encrypt(plaintext, value.kind));
  }

  private opens(token: string): boolean {
    for (const codec of this.verifiers) {
      try {
        codec.decrypt(token).plaintext.fill(0);
        return true;
      } catch (err) {
        if (!(err instanceof TokenError)) throw err;
      }
    }
    return false;
  }

  private fail(value: FieldValue, message: string): null {
    this.errors ??= {};
    (this.errors[value.path()] ??= []).push(message);
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
    const headers = ctx.req.headers;
    const detected = detectFormat(headers['content-type'], headers['content-encoding']);
    let declared: BodyFormat | null = typeof detected === 'string' ? null : detected;
    if (detected === 'unreadable' || !isIdentity(headers['content-encoding'])) {
      this.uninspectable('it is compressed or not UTF-8');
      declared = null;
    }
    this.inner = new SniffingTransformer(
      declared,
      // A form is read as the laxest decoder would read it: a raw `;` ends a pair too.
      (format) => (format === FORM_FORMAT ? new FormTransformer(matcher, handler, services.limits.token, { semicolons: true }) : format.create(matcher, handler, services.limits.token)),
      (format) => {
        if (format === null) this.uninspectable('it is not JSON, NDJSON or a form');
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
    if (this.settings.uninspectable === 'pass' && this.handler.count === 0) {
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
    if (this.settings.uninspectable === 'pass') {
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
