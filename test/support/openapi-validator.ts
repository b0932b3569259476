/**
 * A small JSON Schema validator for our OpenAPI 3.1 document, and the check that a response
 * is what the document promises. It knows exactly the keywords the document uses and
 * refuses any other, so a schema can never pass because a keyword was silently ignored.
 *
 * `validateResponse` finds the operation by matching the path against the document's
 * templates (static segments beat parameters, as in the router), then checks the status
 * is documented, the required response headers are there, the content type is one the
 * response lists, and a JSON body matches the schema.
 */
import { AssertionError } from 'node:assert';
import { openApiDocument } from '../../src/api/openapi.ts';

type Schema = Record<string, unknown>;

const VALIDATION_KEYWORDS = new Set([
  '$ref', 'type', 'enum', 'const', 'properties', 'required', 'additionalProperties', 'items',
  'pattern', 'format', 'allOf', 'oneOf', 'anyOf', 'minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems',
]);
const ANNOTATION_KEYWORDS = new Set(['description', 'title', 'default', 'examples', 'discriminator', 'deprecated', 'readOnly', 'writeOnly', '$comment']);
const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'object', 'array', 'null']);

const FORMATS: Record<string, (value: string) => boolean> = {
  'date-time': (v) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/.test(v) && !Number.isNaN(Date.parse(v)),
  uuid: (v) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v),
  email: (v) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(v),
  uri: (v) => /^[A-Za-z][A-Za-z0-9+.-]*:[^\s]*$/.test(v) && URL.canParse(v),
};

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'object':
      return isObject(value);
    default:
      return typeOf(value) === type;
  }
}

/** Deep equality of JSON values (for enum and const). */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return false;
}

const child = (at: string, key: string | number) => (typeof key === 'number' ? `${at}[${key}]` : /^[A-Za-z_$][\w$]*$/.test(key) ? `${at}.${key}` : `${at}[${JSON.stringify(key)}]`);

export class SchemaValidator {
  private readonly root: unknown;
  private readonly patterns = new Map<string, RegExp>();

  constructor(root: unknown) {
    this.root = root;
  }

  /** A local JSON pointer (`#/components/schemas/User`); throws when it leads nowhere. */
  resolve(ref: string): unknown {
    if (!ref.startsWith('#/')) throw new Error(`only local references are supported: ${ref}`);
    let at: unknown = this.root;
    for (const raw of ref.slice(2).split('/')) {
      const key = raw.replaceAll('~1', '/').replaceAll('~0', '~');
      if (!isObject(at) || !Object.hasOwn(at, key)) throw new Error(`unresolvable reference ${ref}`);
      at = at[key];
    }
    return at;
  }

  /** Every way `value` fails `schema`, each as `<path>: <problem>`; empty when it passes. */
  validate(schema: unknown, value: unknown, at = '$'): string[] {
    if (schema === true || (isObject(schema) && Object.keys(schema).length === 0)) return [];
    if (schema === false) return [`${at}: no value is allowed here`];
    if (!isObject(schema)) throw new Error(`${at}: a schema must be an object or a boolean`);
    for (const keyword of Object.keys(schema)) {
      if (!VALIDATION_KEYWORDS.has(keyword) && !ANNOTATION_KEYWORDS.has(keyword) && !keyword.startsWith('x-')) {
        throw new Error(`unsupported schema keyword "${keyword}" (at ${at})`);
      }
    }
    const errors: string[] = [];
    const s = schema as Schema;
    if (typeof s['$ref'] === 'string') errors.push(...this.validate(this.resolve(s['$ref']), value, at));
    if (s['type'] !== undefined) {
      const types = Array.isArray(s['type']) ? (s['type'] as string[]) : [s['type'] as string];
      if (!types.some((t) => hasType(value, t))) {
        // The rest of the keywords would only repeat the mismatch in other words.
        return [...errors, `${at}: expected ${types.join(' or ')}, got ${typeOf(value)}`];
      }
    }
    if (Object.hasOwn(s, 'const') && !jsonEqual(value, s['const'])) errors.push(`${at}: must be ${JSON.stringify(s['const'])}, got ${JSON.stringify(value)}`);
    if (Array.isArray(s['enum']) && !s['enum'].some((allowed) => jsonEqual(value, allowed))) {
      errors.push(`${at}: must be one of ${JSON.stringify(s['enum'])}, got ${JSON.stringify(value)}`);
    }
    if (typeof value === 'string') errors.push(...this.stringErrors(s, value, at));
    if (typeof value === 'number') {
      if (typeof s['minimum'] === 'number' && value < s['minimum']) errors.push(`${at}: must be at least ${s['minimum']}, got ${value}`);
      if (typeof s['maximum'] === 'number' && value > s['maximum']) errors.push(`${at}: must be at most ${s['maximum']}, got ${value}`);
    }
    if (Array.isArray(value)) errors.push(...this.arrayErrors(s, value, at));
    if (isObject(value)) errors.push(...this.objectErrors(s, value, at));
    if (Array.isArray(s['allOf'])) for (const part of s['allOf']) errors.push(...this.validate(part, value, at));
    if (Array.isArray(s['anyOf'])) {
      const results = s['anyOf'].map((part) => this.validate(part, value, at));
      if (!results.some((r) => r.length === 0)) errors.push(...closest(results, `${at}: matches none of anyOf`));
    }
    if (Array.isArray(s['oneOf'])) errors.push(...this.oneOfErrors(s, value, at));
    return errors;
  }

  private stringErrors(s: Schema, value: string, at: string): string[] {
    const errors: string[] = [];
    const length = [...value].length;
    if (typeof s['minLength'] === 'number' && length < s['minLength']) errors.push(`${at}: must be at least ${s['minLength']} characters`);
    if (typeof s['maxLength'] === 'number' && length > s['maxLength']) errors.push(`${at}: must be at most ${s['maxLength']} characters, got ${length}`);
    if (typeof s['pattern'] === 'string' && !this.regex(s['pattern']).test(value)) errors.push(`${at}: ${JSON.stringify(value)} does not match ${s['pattern']}`);
    if (typeof s['format'] === 'string') {
      const check = FORMATS[s['format']];
      if (check === undefined) throw new Error(`unsupported format "${s['format']}" (at ${at})`);
      if (!check(value)) errors.push(`${at}: ${JSON.stringify(value)} is not a valid ${s['format']}`);
    }
    return errors;
  }

  private arrayErrors(s: Schema, value: unknown[], at: string): string[] {
    const errors: string[] = [];
    if (typeof s['minItems'] === 'number' && value.length < s['minItems']) errors.push(`${at}: must have at least ${s['minItems']} items, has ${value.length}`);
    if (typeof s['maxItems'] === 'number' && value.length > s['maxItems']) errors.push(`${at}: must have at most ${s['maxItems']} items, has ${value.length}`);
    if (s['items'] !== undefined) value.forEach((item, i) => errors.push(...this.validate(s['items'], item, child(at, i))));
    return errors;
  }

  private objectErrors(s: Schema, value: Record<string, unknown>, at: string): string[] {
    const errors: string[] = [];
    const properties = isObject(s['properties']) ? s['properties'] : {};
    if (Array.isArray(s['required'])) {
      for (const name of s['required'] as string[]) if (!Object.hasOwn(value, name)) errors.push(`${at}: missing required property "${name}"`);
    }
    for (const [name, item] of Object.entries(value)) {
      if (Object.hasOwn(properties, name)) errors.push(...this.validate(properties[name], item, child(at, name)));
      else if (s['additionalProperties'] === false) errors.push(`${at}: unexpected property "${name}"`);
      else if (isObject(s['additionalProperties'])) errors.push(...this.validate(s['additionalProperties'], item, child(at, name)));
    }
    return errors;
  }

  /** With a discriminator the branch it names explains a failure best; else the closest branch. */
  private oneOfErrors(s: Schema, value: unknown, at: string): string[] {
    const branches = s['oneOf'] as unknown[];
    const results = branches.map((part) => this.validate(part, value, at));
    const passing = results.filter((r) => r.length === 0).length;
    if (passing === 1) return [];
    if (passing > 1) return [`${at}: matches ${passing} schemas of oneOf, must match exactly one`];
    const discriminator = s['discriminator'];
    if (isObject(discriminator) && isObject(value) && isObject(discriminator['mapping'])) {
      const tag = value[discriminator['propertyName'] as string];
      const target = typeof tag === 'string' ? discriminator['mapping'][tag] : undefined;
      const index = branches.findIndex((b) => isObject(b) && b['$ref'] === target);
      if (index !== -1) return results[index]!;
      return [`${at}: ${String(discriminator['propertyName'])} ${JSON.stringify(tag)} names none of the oneOf schemas`];
    }
    return closest(results, `${at}: matches none of oneOf`);
  }

  private regex(pattern: string): RegExp {
    let re = this.patterns.get(pattern);
    if (re === undefined) {
      re = new RegExp(pattern, 'u');
      this.patterns.set(pattern, re);
    }
    return re;
  }

  /** Problems with a schema itself: unknown keywords or formats, bad types, bad patterns, dangling references. */
  check(schema: unknown, at: string): string[] {
    if (typeof schema === 'boolean') return [];
    if (!isObject(schema)) return [`${at}: a schema must be an object or a boolean`];
    const problems: string[] = [];
    for (const [keyword, value] of Object.entries(schema)) {
      if (keyword.startsWith('x-') || ANNOTATION_KEYWORDS.has(keyword)) continue;
      if (!VALIDATION_KEYWORDS.has(keyword)) {
        problems.push(`${at}: unsupported keyword "${keyword}"`);
        continue;
      }
      switch (keyword) {
        case '$ref':
          try {
            this.resolve(String(value));
          } catch (err) {
            problems.push(`${at}: ${(err as Error).message}`);
          }
          break;
        case 'type': {
          const types = Array.isArray(value) ? value : [value];
          for (const t of types) if (typeof t !== 'string' || !TYPES.has(t)) problems.push(`${at}: unknown type ${JSON.stringify(t)}`);
          break;
        }
        case 'format':
          if (typeof value !== 'string' || FORMATS[value] === undefined) problems.push(`${at}: unsupported format ${JSON.stringify(value)}`);
          break;
        case 'pattern':
          try {
            new RegExp(String(value), 'u');
          } catch {
            problems.push(`${at}: invalid pattern ${JSON.stringify(value)}`);
          }
          break;
        case 'properties':
          if (!isObject(value)) problems.push(`${at}: properties must be an object`);
          else for (const [name, sub] of Object.entries(value)) problems.push(...this.check(sub, `${at}.properties.${name}`));
          break;
        case 'required':
          if (!Array.isArray(value)) problems.push(`${at}: required must be an array`);
          else for (const name of value) if (!isObject(schema['properties']) || !Object.hasOwn(schema['properties'], name)) problems.push(`${at}: required "${name}" is not a property`);
          break;
        case 'items':
        case 'additionalProperties':
          problems.push(...this.check(value, `${at}.${keyword}`));
          break;
        case 'allOf':
        case 'anyOf':
        case 'oneOf':
          if (!Array.isArray(value) || value.length === 0) problems.push(`${at}: ${keyword} must be a non-empty array`);
          else value.forEach((sub, i) => problems.push(...this.check(sub, `${at}.${keyword}[${i}]`)));
          break;
        case 'enum':
          if (!Array.isArray(value) || value.length === 0) problems.push(`${at}: enum must be a non-empty array`);
          break;
        case 'minimum':
        case 'maximum':
        case 'minLength':
        case 'maxLength':
        case 'minItems':
        case 'maxItems':
          if (typeof value !== 'number') problems.push(`${at}: ${keyword} must be a number`);
          break;
      }
    }
    return problems;
  }
}

function closest(results: string[][], headline: string): string[] {
  const best = results.reduce((a, b) => (b.length < a.length ? b : a));
  return [headline, ...best];
}

// ---------------------------------------------------------------------------------------
// The document

export const HTTP_METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options', 'trace'] as const;

type Segment = { kind: 'static'; value: string } | { kind: 'param'; name: string } | { kind: 'rest'; name: string };

interface Template {
  readonly path: string;
  readonly segments: readonly Segment[];
  readonly item: Record<string, unknown>;
}

/** Path templates of a document; a path item's `x-svc-rest-parameter` spans the rest of the path. */
export function templatesOf(doc: Record<string, unknown>): Template[] {
  const paths = doc['paths'];
  if (!isObject(paths)) return [];
  return Object.entries(paths).map(([path, item]) => {
    const itemObject = isObject(item) ? item : {};
    const rest = itemObject['x-svc-rest-parameter'];
    const segments: Segment[] = path
      .split('/')
      .slice(1)
      .map((raw) => {
        const m = /^\{([^}]+)\}$/.exec(raw);
        if (m === null) return { kind: 'static', value: raw };
        return m[1] === rest ? { kind: 'rest', name: m[1]! } : { kind: 'param', name: m[1]! };
      });
    return { path, segments, item: itemObject };
  });
}

const RANK = { static: 2, param: 1, rest: 0 } as const;

function matches(template: Template, parts: readonly string[]): boolean {
  const { segments } = template;
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i]!;
    // The rest of the path, however many segments, none included (`/egress/x`), as in the router.
    if (segment.kind === 'rest') return true;
    const part = parts[i];
    if (part === undefined) return false;
    if (segment.kind === 'static' ? part !== segment.value : part === '') return false;
  }
  return parts.length === segments.length;
}

/** The template `path` (without query) falls under, the most specific one when several do. */
export function findPathTemplate(doc: Record<string, unknown>, path: string, templates = templatesOf(doc)): Template | undefined {
  const parts = path.split('/').slice(1);
  const candidates = templates.filter((t) => matches(t, parts));
  candidates.sort((a, b) => {
    for (let i = 0; i < Math.max(a.segments.length, b.segments.length); i++) {
      const ra = a.segments[i] === undefined ? -1 : RANK[a.segments[i]!.kind];
      const rb = b.segments[i] === undefined ? -1 : RANK[b.segments[i]!.kind];
      if (ra !== rb) return rb - ra;
    }
    return 0;
  });
  return candidates[0];
}

// ---------------------------------------------------------------------------------------
// Responses

const DOCUMENT = openApiDocument as Record<string, unknown>;
const validator = new SchemaValidator(DOCUMENT);
const TEMPLATES = templatesOf(DOCUMENT);

function deref(value: unknown): Record<string, unknown> {
  let at = value;
  while (isObject(at) && typeof at['$ref'] === 'string') at = validator.resolve(at['$ref']);
  if (!isObject(at)) throw new Error('expected an object');
  return at;
}

function mediaTypeOf(contentType: string): string {
  return contentType.split(';')[0]!.trim().toLowerCase();
}

function isJsonMedia(media: string): boolean {
  return media === 'application/json' || media.endsWith('+json');
}

/** The documented media type `actual` falls under: exact, then `type/*`, then `*\/*`. */
function documentedMedia(content: Record<string, unknown>, actual: string): string | undefined {
  if (Object.hasOwn(content, actual)) return actual;
  const wildcard = `${actual.split('/')[0]}/*`;
  if (Object.hasOwn(content, wildcard)) return wildcard;
  return Object.hasOwn(content, '*/*') ? '*/*' : undefined;
}

/** Where a response sits in the document, when its path is documented at all. */
export interface ResponseCheck {
  /** `GET /api/v3/classifications/{id}`; null when the path is not documented (nothing checked). */
  readonly operation: string | null;
  readonly errors: string[];
}

/**
 * Checks one response against the document. `body` is the parsed JSON body (undefined when
 * there was none or it was not JSON); `headers`, when given, are checked for the required
 * response headers.
 */
export function validateResponse(method: string, path: string, status: number, contentType: string | null, body: unknown, headers?: Headers): ResponseCheck {
  const bare = path.split('?')[0]!.split('#')[0]!;
  const template = findPathTemplate(DOCUMENT, bare, TEMPLATES);
  if (template === undefined) return { operation: null, errors: [] };
  const upper = method.toUpperCase();
  const operation = template.item[upper.toLowerCase()] ?? (upper === 'HEAD' ? template.item['get'] : undefined);
  const name = `${upper} ${template.path}`;
  if (!isObject(operation)) {
    // The router answers any method it has no route for with 405 and `Allow`.
    if (status !== 405) return { operation: name, errors: [`${name} is not documented, yet answered ${status}`] };
    const errors = upper === 'HEAD' ? [] : validator.validate({ $ref: '#/components/schemas/Error' }, body, '$');
    if (headers !== undefined && headers.get('allow') === null) errors.push('a 405 without an Allow header');
    return { operation: name, errors };
  }
  const responses = isObject(operation['responses']) ? operation['responses'] : {};
  const documented = responses[String(status)] ?? responses[`${String(status)[0]}XX`] ?? responses['default'];
  if (documented === undefined) return { operation: name, errors: [`status ${status} is not documented (documented: ${Object.keys(responses).join(', ')})`] };
  const response = deref(documented);
  const errors: string[] = [];
  if (headers !== undefined && isObject(response['headers'])) {
    for (const [header, spec] of Object.entries(response['headers'])) {
      const definition = deref(spec);
      const value = headers.get(header);
      if (value === null) {
        if (definition['required'] === true) errors.push(`missing response header ${header}`);
      } else if (definition['schema'] !== undefined) {
        errors.push(...validator.validate(definition['schema'], value, `header ${header}`));
      }
    }
  }
  const content = isObject(response['content']) ? response['content'] : undefined;
  if (content === undefined) {
    if (body !== undefined || contentType !== null) errors.push(`status ${status} documents no body, yet one came (${contentType ?? 'no content-type'})`);
    return { operation: name, errors };
  }
  if (upper === 'HEAD') return { operation: name, errors };
  if (contentType === null) {
    if (!Object.hasOwn(content, '*/*')) errors.push(`no content-type; documented: ${Object.keys(content).join(', ')}`);
    return { operation: name, errors };
  }
  const media = mediaTypeOf(contentType);
  const key = documentedMedia(content, media);
  if (key === undefined) {
    errors.push(`content-type ${media} is not documented for ${status} (documented: ${Object.keys(content).join(', ')})`);
    return { operation: name, errors };
  }
  const mediaObject = deref(content[key]);
  if (isJsonMedia(key) && mediaObject['schema'] !== undefined) {
    if (body === undefined) errors.push(`the ${media} body is not JSON`);
    else errors.push(...validator.validate(mediaObject['schema'], body, '$'));
  }
  return { operation: name, errors };
}

/** validateResponse that throws an AssertionError naming the request, the status and the first problem. */
export function assertDocumentedResponse(method: string, path: string, status: number, contentType: string | null, body: unknown, headers?: Headers): void {
  const { operation, errors } = validateResponse(method, path, status, contentType, body, headers);
  if (errors.length === 0) return;
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more: ${errors.slice(1, 4).join('; ')})` : '';
  throw new AssertionError({
    message: `${method.toUpperCase()} ${path} → ${status} does not match the OpenAPI document (${operation}): ${errors[0]}${more}`,
    actual: body,
    expected: operation,
    operator: 'openapi',
  });
}

export { isObject };
