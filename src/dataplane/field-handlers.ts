/**
 * What happens to each matched value: the transformer finds it, these turn it into a
 * token or back (DESIGN §5 plaintext rules). Per-field failures are collected and
 * reported together as 422, keyed by the value's path.
 */
import type { FieldEncryptor, TokenCodec, TokenHeader, TokenType } from '../crypto/token.ts';
import { TokenError } from '../crypto/token.ts';
import { ForbiddenError, InvalidTokenError, ValidationError, type ValidationErrors } from '../errors.ts';
import type { FieldValue, ValueHandler } from '../fields/value.ts';

abstract class CollectingHandler implements ValueHandler {
  /** Values replaced so far. */
  count = 0;
  errors: ValidationErrors | null = null;

  abstract replace(value: FieldValue): Buffer | null;

  /** The 422 to answer with when any value failed, else null. */
  abstract failure(): ValidationError | null;

  protected fail(value: FieldValue, message: string): null {
    this.errors ??= {};
    (this.errors[value.path()] ??= []).push(message);
    return null;
  }
}

export class EncryptHandler extends CollectingHandler {
  private readonly encryptor: FieldEncryptor;
  /** The tokens written, when a later pass (the relay guard) must recognise them. */
  readonly minted: Set<string> | null;

  constructor(encryptor: FieldEncryptor, recordMinted = false) {
    super();
    this.encryptor = encryptor;
    this.minted = recordMinted ? new Set() : null;
  }

  failure(): ValidationError | null {
    return this.errors === null ? null : new ValidationError(this.errors);
  }

  replace(value: FieldValue): Buffer | null {
    if (value.kind === 'z') return null;
    const plaintext = value.plaintext();
    if (plaintext === null) return this.fail(value, 'The value contains an unpaired surrogate and cannot be encrypted.');
    const token = this.encryptor.encrypt(plaintext, value.kind as TokenType);
    this.minted?.add(token);
    this.count++;
    return value.encodeToken(token);
  }
}

export class DecryptHandler extends CollectingHandler {
  /** Tokens decrypted per key version, for the retirement census. */
  readonly versions = new Map<number, number>();
  private readonly codec: TokenCodec;
  private readonly checkAccess: (classificationId: number) => void;
  private readonly required: number | null;
  /** Where each token was decrypted, and its classification, when an answer must re-encrypt them. */
  readonly decryptedAt: Map<string, number> | null;

  /**
   * `checkAccess` throws 403 when the caller may not read a classification; `required`
   * is the classification every token must carry (x-svc-classification), if given.
   */
  constructor(codec: TokenCodec, checkAccess: (classificationId: number) => void, required: number | null, recordPaths = false) {
    super();
    this.codec = codec;
    this.checkAccess = checkAccess;
    this.required = required;
    this.decryptedAt = recordPaths ? new Map() : null;
  }

  /** Throws 403 for a token this request may not read: the whole request is refused. */
  private readonly checkHeader = (header: TokenHeader): void => {
    if (this.required !== null && header.classificationId !== this.required) throw new ForbiddenError();
    if (header.classificationId !== 0) this.checkAccess(header.classificationId);
  };

  failure(): ValidationError | null {
    return this.errors === null ? null : new InvalidTokenError(this.errors);
  }

  replace(value: FieldValue): Buffer | null {
    // A value that is not spelled as a token is left as it is (DESIGN §6).
    const token = value.token();
    if (token === null) return null;
    let plaintext: Buffer;
    let type: TokenType;
    try {
      // The header is checked (classification) after parsing and before any decryption.
      const decrypted = this.codec.decrypt(token, this.checkHeader);
      plaintext = decrypted.plaintext;
      type = decrypted.type;
      this.versions.set(decrypted.version, (this.versions.get(decrypted.version) ?? 0) + 1);
      this.decryptedAt?.set(value.path(), decrypted.classificationId);
    } catch (err) {
      if (err instanceof TokenError) return this.fail(value, err.message);
      throw err;
    }
    this.count++;
    return value.encodePlain(plaintext, type);
  }
}

/**
 * Encrypts the values of an answer found where the request's tokens were decrypted (an
 * egress vendor echoing them, DESIGN §13), each under the classification its token had.
 */
export class EchoHandler extends CollectingHandler {
  private readonly codec: TokenCodec;
  private readonly decryptedAt: ReadonlyMap<string, number>;
  private readonly encryptors = new Map<number, FieldEncryptor>();

  constructor(codec: TokenCodec, decryptedAt: ReadonlyMap<string, number>) {
    super();
    this.codec = codec;
    this.decryptedAt = decryptedAt;
  }

  failure(): ValidationError | null {
    return this.errors === null ? null : new ValidationError(this.errors);
  }

  replace(value: FieldValue): Buffer | null {
    if (value.kind === 'z') return null;
    const plaintext = value.plaintext();
    if (plaintext === null) return this.fail(value, 'The value contains an unpaired surrogate and cannot be encrypted.');
    const classificationId = this.decryptedAt.get(value.path()) ?? 0;
    let encryptor = this.encryptors.get(classificationId);
    if (encryptor === undefined) {
      encryptor = this.codec.encryptor(classificationId);
      this.encryptors.set(classificationId, encryptor);
    }
    this.count++;
    return value.encodeToken(encryptor.encrypt(plaintext, value.kind as TokenType));
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
  private readonly current: number;
  /** One encryptor per classification met in this document (each binds its id). */
  private readonly encryptors = new Map<number, FieldEncryptor>();
  /** Tokens found already at the newest version and left as they were. */
  kept = 0;

  constructor(codec: TokenCodec) {
    super();
    this.codec = codec;
    this.current = codec.keyring.current;
  }

  /** The version every token of the output carries. */
  get version(): number {
    return this.current;
  }

  failure(): ValidationError | null {
    return this.errors === null ? null : new InvalidTokenError(this.errors);
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
