/**
 * What happens to each matched value: the transformer finds it, these turn it into a
 * token or back (DESIGN §5 plaintext rules). Per-field failures are collected and
 * reported together as 422, keyed by the value's path.
 */
import { PLAIN, type Reveal, type RevealPolicy } from '../auth/classification-access.ts';
import type { DecryptedToken, FieldEncryptor, TokenCodec, TokenHeader, TokenType } from '../crypto/token.ts';
import { TokenError } from '../crypto/token.ts';
import { ForbiddenError, InvalidTokenError, KeyDestroyedDuringRequestError, ValidationError, type SvcError, type ValidationErrors } from '../errors.ts';
import { emptyCounts, type Mask, type RevealCounts } from '../fields/reveal.ts';
import type { FieldValue, ValueHandler } from '../fields/value.ts';
import type { Store } from '../store/db.ts';
import { keyAliveEntry } from '../store/sqlite/connection.ts';
import type { KeyAliveEntry } from '../store/sqlite/key-alive.ts';
import { DecryptedPaths } from './echo-guard.ts';

abstract class CollectingHandler implements ValueHandler {
  /** Values replaced so far. */
  count = 0;
  errors: ValidationErrors | null = null;

  abstract replace(value: FieldValue): Buffer | null;

  /**
   * The error to answer with (422 when any value failed), else null. With `leaving` false
   * (nothing written so far leaves before the next check) the key version is not asked.
   */
  abstract failure(leaving?: boolean): SvcError | null;

  /**
   * Writes `value` as a token of `encryptor` (null is left alone), counted, and kept in
   * `minted` when given; 422 for a value with no UTF-8 form.
   */
  protected encryptValue(value: FieldValue, encryptor: FieldEncryptor, minted: Set<string> | null = null): Buffer | null {
    if (value.kind === 'z') return null;
    const plaintext = value.plaintext();
    if (plaintext === null) return this.fail(value, 'The value contains an unpaired surrogate and cannot be encrypted.');
    const token = encryptor.encrypt(plaintext, value.kind as TokenType);
    minted?.add(token);
    this.count++;
    return value.encodeToken(token);
  }

  protected fail(value: FieldValue, message: string): null {
    this.errors = recordFailure(this.errors, value, message);
    return null;
  }
}

/** At most this many field errors are reported (the request fails either way)... */
const MAX_REPORTED = 100;
/** ...each keyed by at most this much of its path. */
const MAX_PATH = 256;

/**
 * Adds a field's failure to `errors`, bounded: a body of many failing values, or values
 * under long keys, must not turn into an answer many times its size.
 */
export function recordFailure(errors: ValidationErrors | null, value: FieldValue, message: string): ValidationErrors {
  const into = errors ?? {};
  // Past the bound not even the path is built: it can be long, and there may be thousands.
  if (Object.keys(into).length >= MAX_REPORTED) return into;
  const path = value.path();
  const key = path.length > MAX_PATH ? `${path.slice(0, MAX_PATH)}…` : path;
  const list = into[key];
  if (list !== undefined) {
    if (list.length < MAX_REPORTED) list.push(message);
  } else if (Object.keys(into).length < MAX_REPORTED) {
    into[key] = [message];
  }
  return into;
}

/**
 * The key version a request writes tokens with, and whether it still exists (DESIGN §13:
 * key destruction is never a data-loss race). A version can be destroyed while a request
 * that took it as current is still encrypting: its tokens could never be decrypted, so
 * they must not leave. Every pipeline asks the handler's `failure()` after the last value
 * and before the answer or the forward completes (and, when streaming, after each chunk,
 * before that chunk leaves), which asks this.
 *
 * Each question is exact: a version destroyed by any connection, this process's or another's
 * (the CLI, another instance on the same file), fails the next check after its commit. It
 * costs a read of the store's WAL-index header; the row itself is read again only after
 * something was committed (store/sqlite/key-alive.ts), so a streamed body checked after
 * every chunk costs next to nothing.
 */
export class KeyInUse {
  readonly version: number;
  private readonly entry: KeyAliveEntry;

  constructor(store: Store, configurationId: string, codec: TokenCodec) {
    this.version = codec.keyring.current;
    this.entry = keyAliveEntry(store, configurationId, this.version);
  }

  destroyed(): boolean {
    return !this.entry.alive();
  }

  /**
   * The 409 for a handler that wrote `count` tokens with this version, if it is gone.
   * `leaving` false (nothing written leaves before the next check) asks nothing.
   */
  failure(count: number, leaving = true): SvcError | null {
    // No token written, no token lost: a body without matching values needs no lookup.
    return leaving && count > 0 && this.destroyed() ? new KeyDestroyedDuringRequestError() : null;
  }
}

export class EncryptHandler extends CollectingHandler {
  readonly protects = true;
  private readonly encryptor: FieldEncryptor;
  private readonly key: KeyInUse;
  /** The tokens written, when a later pass (the relay guard) must recognise them. */
  readonly minted: Set<string> | null;

  constructor(encryptor: FieldEncryptor, key: KeyInUse, recordMinted = false) {
    super();
    this.encryptor = encryptor;
    this.key = key;
    this.minted = recordMinted ? new Set() : null;
  }

  /** 422 for values that failed; else 409 if its tokens are of a version destroyed since. */
  failure(leaving = true): SvcError | null {
    if (this.errors !== null) return new ValidationError(this.errors);
    return this.key.failure(this.count, leaving);
  }

  replace(value: FieldValue): Buffer | null {
    return this.encryptValue(value, this.encryptor, this.minted);
  }
}

/**
 * Decrypts each token, then shows of it what the reader may see (DESIGN §14): the
 * plaintext, a mask of it, nothing (`redact`: JSON null, an empty form value) or the token
 * as it is. One token the reader is denied fails the whole request (403) before anything is
 * answered; a token shown only as itself or redacted (an object or array under a mask is
 * redacted) is not decrypted at all.
 */
export class DecryptHandler extends CollectingHandler {
  /** Tokens decrypted per key version, for the retirement census. */
  readonly versions = new Map<number, number>();
  /** Values answered at each level, for `x-svc-reveal`, the usage log and the metric. */
  readonly reveal: RevealCounts = emptyCounts();
  private readonly codec: TokenCodec;
  private readonly policy: RevealPolicy;
  private readonly required: number | null;
  /** Where each token was decrypted, and its classification, when an answer must re-encrypt them. */
  readonly decryptedAt: DecryptedPaths | null;
  /** What the reader gets of the token being read (set by checkHeader). */
  private current: Reveal = PLAIN;

  /**
   * `policy` decides what the reader sees of each classification (a `deny` is a 403);
   * `required` is the classification every token must carry (x-svc-classification), if given.
   */
  constructor(codec: TokenCodec, policy: RevealPolicy, required: number | null, recordPaths = false) {
    super();
    this.codec = codec;
    this.policy = policy;
    this.required = required;
    this.decryptedAt = recordPaths ? new DecryptedPaths() : null;
  }

  /**
   * Throws 403 for a token this request may not read: the whole request is refused.
   * Returns whether the token is to be decrypted: only what will be shown, whole or masked.
   */
  private readonly checkHeader = (header: TokenHeader): boolean => {
    if (this.required !== null && header.classificationId !== this.required) throw new ForbiddenError();
    const reveal = this.policy.decide(header.classificationId);
    if (reveal.level === 'deny') throw new ForbiddenError();
    this.current = reveal;
    // An object or array cannot be masked: it is redacted, so it is not decrypted either.
    return reveal.level === 'plain' || (reveal.level === 'mask' && header.type !== 'j');
  };

  failure(): ValidationError | null {
    return this.errors === null ? null : new InvalidTokenError(this.errors);
  }

  replace(value: FieldValue): Buffer | null {
    // A value that is not spelled as a token is left as it is (DESIGN §6).
    const token = value.token();
    if (token === null) return null;
    let decrypted: DecryptedToken;
    try {
      // The header is checked (classification) after parsing and before any decryption.
      decrypted = this.codec.decrypt(token, this.checkHeader);
    } catch (err) {
      if (err instanceof TokenError) return this.fail(value, err.message);
      throw err;
    }
    const reveal = this.current;
    switch (reveal.level) {
      case 'plain':
        this.opened(value, decrypted);
        this.decryptedAt?.remember(decrypted.plaintext, decrypted.type);
        this.count++;
        this.reveal.plain++;
        return value.encodePlain(decrypted.plaintext, decrypted.type);
      case 'mask':
        if (decrypted.type === 'j') return this.redacted(value);
        this.opened(value, decrypted);
        return this.masked(value, decrypted.plaintext, reveal.mask!);
      case 'redact':
        return this.redacted(value);
      default:
        // `token`: the value stays as it is (`deny` never gets here: checkHeader threw).
        this.reveal.token++;
        return null;
    }
  }

  private opened(value: FieldValue, decrypted: DecryptedToken): void {
    this.versions.set(decrypted.version, (this.versions.get(decrypted.version) ?? 0) + 1);
    this.decryptedAt?.set(value.path(), decrypted.classificationId);
  }

  private redacted(value: FieldValue): Buffer {
    this.count++;
    this.reveal.redact++;
    return value.encodeNull();
  }

  /**
   * A string, number or boolean becomes a string of its text masked (`1234` → `"••34"`
   * under a mask keeping two); the plaintext is zeroed once the mask is written.
   */
  private masked(value: FieldValue, plaintext: Buffer, mask: Mask): Buffer {
    this.count++;
    this.reveal.mask++;
    try {
      return value.encodePlain(Buffer.from(mask.apply(plaintext.toString('utf8')), 'utf8'), 's');
    } finally {
      plaintext.fill(0);
    }
  }
}

/**
 * Encrypts the values of an answer found where the request's tokens were decrypted (an
 * egress vendor echoing them, DESIGN §13), each under the classification its token had.
 */
export class EchoHandler extends CollectingHandler {
  readonly protects = true;
  private readonly codec: TokenCodec;
  private readonly key: KeyInUse;
  private readonly decryptedAt: ReadonlyMap<string, number>;
  private readonly encryptors = new Map<number, FieldEncryptor>();

  constructor(codec: TokenCodec, key: KeyInUse, decryptedAt: ReadonlyMap<string, number>) {
    super();
    this.codec = codec;
    this.key = key;
    this.decryptedAt = decryptedAt;
  }

  failure(leaving = true): SvcError | null {
    if (this.errors !== null) return new ValidationError(this.errors);
    return this.key.failure(this.count, leaving);
  }

  replace(value: FieldValue): Buffer | null {
    const classificationId = this.decryptedAt.get(value.path()) ?? 0;
    let encryptor = this.encryptors.get(classificationId);
    if (encryptor === undefined) {
      encryptor = this.codec.encryptor(classificationId);
      this.encryptors.set(classificationId, encryptor);
    }
    return this.encryptValue(value, encryptor);
  }
}

/**
 * Re-encrypts each token under the configuration's newest key version, keeping its type
 * and classification; the plaintext exists only between the two calls and is zeroed
 * after. Tokens already at the newest version are authenticated and kept byte for byte,
 * so rewrapping twice changes nothing the second time. A token that does not open (other
 * configuration, altered, retired or destroyed version) fails the request like decrypt.
 */
export class RewrapHandler extends CollectingHandler {
  private readonly codec: TokenCodec;
  private readonly key: KeyInUse;
  private readonly current: number;
  /** One encryptor per classification met in this document (each binds its id). */
  private readonly encryptors = new Map<number, FieldEncryptor>();
  /** Tokens found already at the newest version and left as they were. */
  kept = 0;

  constructor(codec: TokenCodec, key: KeyInUse) {
    super();
    this.codec = codec;
    this.key = key;
    this.current = codec.keyring.current;
  }

  /** The version every token of the output carries. */
  get version(): number {
    return this.current;
  }

  failure(leaving = true): SvcError | null {
    if (this.errors !== null) return new InvalidTokenError(this.errors);
    return this.key.failure(this.count, leaving);
  }

  replace(value: FieldValue): Buffer | null {
    const token = value.token();
    if (token === null) return null;
    let decrypted;
    try {
      decrypted = this.codec.decrypt(token);
    } catch (err) {
      if (err instanceof TokenError) return this.fail(value, err.message);
      throw err;
    }
    try {
      if (decrypted.version === this.current) {
        this.kept++;
        return null;
      }
      let encryptor = this.encryptors.get(decrypted.classificationId);
      if (encryptor === undefined) {
        encryptor = this.codec.encryptor(decrypted.classificationId);
        this.encryptors.set(decrypted.classificationId, encryptor);
      }
      this.count++;
      return value.encodeToken(encryptor.encrypt(decrypted.plaintext, decrypted.type));
    } finally {
      decrypted.plaintext.fill(0);
    }
  }
}
