/**
 * Laravel-style validation (DESIGN §7): every failing field collects its messages, worded
 * as Laravel words them ("The name field must not be greater than 32 characters."), and
 * the request fails with all of them at once.
 */
import { BadRequestError, ValidationError, type ValidationErrors } from '../errors.ts';
import { hasInvisibleText, hasUnsafeText, normalizeEmail, unsafeTextMessage } from '../store/identity-text.ts';

/** Laravel shows `bg_color` as "bg color"; nested keys such as `users.0` stay as they are. */
export function attributeName(field: string): string {
  return field.replaceAll('_', ' ');
}

/**
 * What the API takes for an email: something, `@`, something with a dot, no whitespace.
 * The OpenAPI document states this same pattern, so clients see the rule that applies.
 */
export const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export interface StringRule {
  required?: boolean;
  nullable?: boolean;
  min?: number;
  max?: number;
  pattern?: RegExp;
  /**
   * Human-readable text (a name, a description): control characters and bidirectional
   * formatting characters are refused (DESIGN §13, "One identity per person").
   */
  text?: boolean;
}

export interface IntegerRule {
  required?: boolean;
  nullable?: boolean;
  min?: number;
  max?: number;
}

export class Validator {
  readonly input: Readonly<Record<string, unknown>>;
  private readonly errors: ValidationErrors = {};

  constructor(input: unknown) {
    if (input === null || typeof input !== 'object' || Array.isArray(input)) {
      throw new BadRequestError('The request body must be a JSON object.');
    }
    this.input = input as Record<string, unknown>;
  }

  /** Builds a validator over query parameters (single values; `x[]` lists are read by `list`). */
  static forQuery(query: URLSearchParams): Validator {
    const input: Record<string, unknown> = {};
    for (const [k, v] of query) if (!k.endsWith('[]')) input[k] = v;
    return new Validator(input);
  }

  has(field: string): boolean {
    return Object.hasOwn(this.input, field);
  }

  fail(field: string, message: string): void {
    (this.errors[field] ??= []).push(message);
  }

  failed(field: string): boolean {
    return this.errors[field] !== undefined;
  }

  private present(field: string, required: boolean | undefined, nullable: boolean | undefined): unknown {
    const value = this.input[field];
    if (value === undefined || (value === null && !nullable) || value === '') {
      if (required) this.fail(field, `The ${attributeName(field)} field is required.`);
      return undefined;
    }
    return value;
  }

  string(field: string, rule: StringRule = {}): string | null | undefined {
    const value = this.present(field, rule.required, rule.nullable);
    if (value === undefined) return undefined;
    if (value === null) return null;
    const name = attributeName(field);
    if (typeof value !== 'string') {
      this.fail(field, `The ${name} field must be a string.`);
      return undefined;
    }
    const length = [...value].length;
    if (rule.min !== undefined && length < rule.min) this.fail(field, `The ${name} field must be at least ${rule.min} characters.`);
    if (rule.max !== undefined && length > rule.max) this.fail(field, `The ${name} field must not be greater than ${rule.max} characters.`);
    if (rule.pattern !== undefined && !rule.pattern.test(value)) this.fail(field, `The ${name} field format is invalid.`);
    if (rule.text === true && hasUnsafeText(value)) this.fail(field, unsafeTextMessage(name));
    return this.failed(field) ? undefined : value;
  }

  /** Returns the email normalised (normalizeEmail): the form it is stored and compared in. */
  email(field: string, rule: { required?: boolean } = {}): string | undefined {
    const value = this.string(field, { required: rule.required, max: 255, text: true });
    if (typeof value !== 'string') return undefined;
    // The document's pattern holds for what was sent, and for the form it is stored in.
    const email = normalizeEmail(value);
    if (!EMAIL_PATTERN.test(value) || hasInvisibleText(value) || !EMAIL_PATTERN.test(email) || [...email].length > 255) {
      this.fail(field, `The ${attributeName(field)} field must be a valid email address.`);
      return undefined;
    }
    return email;
  }

  /** Accepts JSON integers and, for query strings, decimal digit strings. */
  integer(field: string, rule: IntegerRule = {}): number | null | undefined {
    const value = this.present(field, rule.required, rule.nullable);
    if (value === undefined) return undefined;
    if (value === null) return null;
    const name = attributeName(field);
    const n = typeof value === 'number' ? value : typeof value === 'string' && /^-?\d{1,15}$/.test(value) ? Number(value) : NaN;
    if (!Number.isSafeInteger(n)) {
      this.fail(field, `The ${name} field must be an integer.`);
      return undefined;
    }
    if (rule.min !== undefined && n < rule.min) this.fail(field, `The ${name} field must be at least ${rule.min}.`);
    if (rule.max !== undefined && n > rule.max) this.fail(field, `The ${name} field must not be greater than ${rule.max}.`);
    return this.failed(field) ? undefined : n;
  }

  boolean(field: string, rule: { required?: boolean } = {}): boolean | undefined {
    const value = this.present(field, rule.required, false);
    if (value === undefined) return undefined;
    if (typeof value === 'boolean') return value;
    if (value === 'true' || value === '1' || value === 1) return true;
    if (value === 'false' || value === '0' || value === 0) return false;
    this.fail(field, `The ${attributeName(field)} field must be true or false.`);
    return undefined;
  }

  /** One of `allowed`, else "The selected x is invalid." */
  oneOf<T extends string>(field: string, allowed: readonly T[], rule: { required?: boolean } = {}): T | undefined {
    const value = this.present(field, rule.required, false);
    if (value === undefined) return undefined;
    if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
      this.fail(field, `The selected ${attributeName(field)} is invalid.`);
      return undefined;
    }
    return value as T;
  }

  /** An array of items; each item is checked by `item`, which reports under `field.i`. */
  array<T>(field: string, item: (value: unknown, key: string) => T | undefined, rule: { required?: boolean; max?: number } = {}): T[] | undefined {
    const value = this.present(field, rule.required, false);
    if (value === undefined) return undefined;
    if (!Array.isArray(value)) {
      this.fail(field, `The ${attributeName(field)} field must be an array.`);
      return undefined;
    }
    if (rule.max !== undefined && value.length > rule.max) {
      this.fail(field, `The ${attributeName(field)} field must not have more than ${rule.max} items.`);
      return undefined;
    }
    const out: T[] = [];
    value.forEach((v, i) => {
      const checked = item(v, `${field}.${i}`);
      if (checked !== undefined) out.push(checked);
    });
    return out;
  }

  /** An item check for `array`: integers that `exists` accepts. */
  existingId(exists: (id: number) => boolean): (value: unknown, key: string) => number | undefined {
    return (value, key) => {
      if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
        this.fail(key, `The ${attributeName(key)} field must be an integer.`);
        return undefined;
      }
      if (!exists(value)) {
        this.fail(key, `The selected ${attributeName(key)} is invalid.`);
        return undefined;
      }
      return value;
    };
  }

  /** Throws the collected 422, if any. */
  check(): void {
    if (Object.keys(this.errors).length > 0) throw new ValidationError(this.errors);
  }
}

/**
 * Integer lists in a query string, given as `roles=1,2` or `roles[]=1&roles[]=2`.
 * Anything that is not a positive integer is a validation error on that parameter.
 */
export function queryIntegerList(query: URLSearchParams, name: string, v: Validator): number[] | undefined {
  const raw = [...query.getAll(`${name}[]`), ...query.getAll(name).flatMap((s) => s.split(','))].map((s) => s.trim()).filter((s) => s !== '');
  if (raw.length === 0) return undefined;
  const out: number[] = [];
  for (const item of raw) {
    if (!/^\d{1,15}$/.test(item)) {
      v.fail(name, `The ${attributeName(name)} field must be an array of integers.`);
      return undefined;
    }
    out.push(Number(item));
  }
  return out;
}
