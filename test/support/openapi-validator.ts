/**
 * The OpenAPI document (src/api/openapi.ts) as a checker of real traffic: `call()` in
 * test/support/app.ts runs every response a test sees through `assertDocumentedResponse`,
 * and test/api/openapi-contract.test.ts checks its requests with `schemaErrors` too.
 *
 * Schemas are JSON Schema 2020-12, checked by ajv in strict mode: a keyword, format or type
 * ajv does not know is an error when the schema compiles, so no schema can pass because
 * part of it was silently ignored. The only keyword added is OpenAPI's `discriminator`, an
 * annotation: the `oneOf` it sits on decides, its mapping only picks whose errors to show.
 *
 * `validateResponse` finds the operation by matching the path against the document's
 * templates (static segments beat parameters, as in the router), then checks that the
 * status is documented, every documented header is there when required and matches its
 * schema, no undocumented `x-svc-*` header came, the content type is one the response
 * lists, and a JSON body matches its schema. A method the path does not list must be the
 * document's `x-svc-other-methods` answer (405 with `Allow`).
 */
import { AssertionError } from 'node:assert';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsPlugin from 'ajv-formats';
import { openApiDocument } from '../../src/api/openapi.ts';

export type Obj = Record<string, unknown>;

export function isObject(value: unknown): value is Obj {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export const DOCUMENT = openApiDocument as Obj;

/** The formats the document may use; ajv refuses any other at compile time. */
const FORMATS = ['date-time', 'uuid', 'uri'] as const;

// ajv-formats is CommonJS: its default export arrives as the module object's `default`.
const addFormats = ((addFormatsPlugin as unknown as { default?: typeof addFormatsPlugin }).default ?? addFormatsPlugin) as unknown as (
  ajv: Ajv2020,
  formats: readonly string[],
) => Ajv2020;

/**
 * A strict 2020-12 validator that knows the document's formats and OpenAPI's discriminator.
 * `explain: false` gives one that only answers yes or no, several times faster on large values.
 */
export function createAjv({ explain = true } = {}): Ajv2020 {
  const ajv = new Ajv2020({ strict: true, strictTypes: true, allErrors: explain, allowUnionTypes: true, verbose: explain });
  addFormats(ajv, FORMATS);
  ajv.addKeyword({ keyword: 'discriminator', schemaType: 'object' });
  return ajv;
}

// ---------------------------------------------------------------------------------------
// Pointers into the document

/** An RFC 6901 JSON pointer of `keys`. */
export function pointer(...keys: ReadonlyArray<string | number>): string {
  return keys.map((k) => `/${String(k).replaceAll('~', '~0').replaceAll('/', '~1')}`).join('');
}

function keysOf(ptr: string): string[] {
  if (ptr === '') return [];
  if (!ptr.startsWith('/')) throw new Error(`not a JSON pointer: ${ptr}`);
  return ptr
    .slice(1)
    .split('/')
    .map((k) => k.replaceAll('~1', '/').replaceAll('~0', '~'));
}

/** The value at `ptr` in the document; throws when nothing is there. */
export function at(ptr: string): unknown {
  let value: unknown = DOCUMENT;
  for (const key of keysOf(ptr)) {
    if (!isObject(value) && !Array.isArray(value)) throw new Error(`nothing at ${ptr}`);
    if (!Object.hasOwn(value, key)) throw new Error(`nothing at ${ptr}`);
    value = (value as Obj)[key];
  }
  return value;
}

/** `#/components/...` as a pointer. */
export function refPointer(ref: string): string {
  if (!ref.startsWith('#')) throw new Error(`only local references are used: ${ref}`);
  return ref.slice(1);
}

/** Follows `$ref`s from `ptr`: the object found, and where it is. */
export function follow(ptr: string): { ptr: string; value: Obj } {
  let current = ptr;
  for (let hops = 0; hops < 16; hops++) {
    const value = at(current);
    if (!isObject(value)) throw new Error(`expected an object at ${current}`);
    if (typeof value['$ref'] !== 'string') return { ptr: current, value };
    current = refPointer(value['$ref']);
  }
  throw new Error(`a $ref cycle from ${ptr}`);
}

// ---------------------------------------------------------------------------------------
// Schemas

const DOCUMENT_ID = 'urn:svc-sidecar:openapi';

/** An ajv holding the document. Only the parts that hold schemas are registered: the root is
 * compiled as a schema when a reference into it is first resolved, and `paths` and
 * `components` are opaque to it. */
function withDocument(ajv: Ajv2020): Ajv2020 {
  ajv.addKeyword({ keyword: 'paths', schemaType: 'object' });
  ajv.addKeyword({ keyword: 'components', schemaType: 'object' });
  ajv.addSchema({ $id: DOCUMENT_ID, paths: DOCUMENT['paths'], components: DOCUMENT['components'] });
  return ajv;
}

const ajv = withDocument(createAjv());
const judge = withDocument(createAjv({ explain: false }));

const fragment = (ptr: string) => keysOf(ptr).map((k) => `/${encodeURIComponent(k.replaceAll('~', '~0').replaceAll('/', '~1'))}`).join('');

function compiledIn(instance: Ajv2020, ptr: string): ValidateFunction {
  const validate = instance.getSchema(`${DOCUMENT_ID}#${fragment(ptr)}`);
  if (validate === undefined) throw new Error(`no schema at ${ptr}`);
  return validate;
}

/** The compiled schema at `ptr` (compiled once); throws when it does not compile. */
export function compiled(ptr: string): ValidateFunction {
  return compiledIn(ajv, ptr);
}

/** Whether `value` passes the schema at `ptr`, without saying why not. */
export function schemaAccepts(ptr: string, value: unknown): boolean {
  return compiledIn(judge, ptr)(value) === true;
}

/** Every way `value` fails the schema at `ptr`, each as `<where>: <problem>`; empty when it passes. */
export function schemaErrors(ptr: string, value: unknown, label = '$'): string[] {
  const validate = compiled(ptr);
  if (validate(value)) return [];
  return focus(validate.errors ?? []).map((e) => describe(e, label));
}

/**
 * Where a discriminated `oneOf` fails, only the branch the discriminator names explains
 * it: the other branches' errors are dropped. (`verbose` gives each error its schema and data.)
 */
function focus(errors: readonly ErrorObject[]): ErrorObject[] {
  const dropped = new Set<ErrorObject>();
  for (const error of errors) {
    if (error.keyword !== 'oneOf' || !isObject(error.parentSchema)) continue;
    const discriminator = error.parentSchema['discriminator'];
    if (!isObject(discriminator) || !isObject(discriminator['mapping']) || !isObject(error.data)) continue;
    const tag = error.data[String(discriminator['propertyName'])];
    const target = typeof tag === 'string' ? discriminator['mapping'][tag] : undefined;
    if (typeof target !== 'string') continue;
    const branches = (error.parentSchema['oneOf'] as Obj[]).map((b) => b['$ref']).filter((r): r is string => typeof r === 'string');
    for (const other of errors) {
      if (other === error || !other.instancePath.startsWith(error.instancePath)) continue;
      if (branches.some((b) => b !== target && other.schemaPath.startsWith(`${b}/`))) dropped.add(other);
    }
    dropped.add(error);
  }
  const kept = errors.filter((e) => !dropped.has(e));
  return kept.length > 0 ? kept : [...errors];
}

function where(label: string, instancePath: string): string {
  return label + keysOf(instancePath).map((k) => (/^\d+$/.test(k) ? `[${k}]` : /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`)).join('');
}

function describe(error: ErrorObject, label: string): string {
  const place = where(label, error.instancePath);
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return `${place}: missing required property "${String(params['missingProperty'])}"`;
    case 'additionalProperties':
      return `${place}: unexpected property "${String(params['additionalProperty'])}"`;
    case 'enum':
      return `${place}: must be one of ${JSON.stringify(params['allowedValues'])}, got ${JSON.stringify(error.data)}`;
    case 'const':
      return `${place}: must be ${JSON.stringify(params['allowedValue'])}, got ${JSON.stringify(error.data)}`;
    case 'type':
      return `${place}: must be ${String(params['type'])}, got ${JSON.stringify(error.data)}`;
    case 'format':
    case 'pattern':
      return `${place}: ${JSON.stringify(error.data)} ${error.message}`;
    default:
      return `${place}: ${error.message}`;
  }
}

// ---------------------------------------------------------------------------------------
// Paths and operations

export const HTTP_METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options', 'trace'] as const;

type Segment = { kind: 'static'; value: string } | { kind: 'param'; name: string } | { kind: 'rest'; name: string };

export interface Template {
  readonly path: string;
  readonly segments: readonly Segment[];
  readonly item: Obj;
}

/** Path templates of a document; a path item's `x-svc-rest-parameter` spans the rest of the path. */
export function templatesOf(doc: Obj): Template[] {
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
export function findPathTemplate(doc: Obj, path: string, templates = templatesOf(doc)): Template | undefined {
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

export interface Operation {
  readonly method: (typeof HTTP_METHODS)[number];
  readonly path: string;
  /** Pointer to the operation object. */
  readonly ptr: string;
  readonly op: Obj;
  readonly item: Obj;
}

/** Every operation of the document, in its order. */
export function operations(): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(DOCUMENT['paths'] as Record<string, Obj>)) {
    for (const method of HTTP_METHODS) if (isObject(item[method])) out.push({ method, path, ptr: pointer('paths', path, method), op: item[method], item });
  }
  return out;
}

/** The parameters of an operation (path item's, then its own), each followed to its definition. */
export function parametersOf(operation: Operation): Array<{ ptr: string; value: Obj }> {
  const itemParams = (operation.item['parameters'] as unknown[] | undefined) ?? [];
  const opParams = (operation.op['parameters'] as unknown[] | undefined) ?? [];
  return [
    ...itemParams.map((_, i) => follow(pointer('paths', operation.path, 'parameters', i))),
    ...opParams.map((_, i) => follow(`${operation.ptr}${pointer('parameters', i)}`)),
  ];
}

// ---------------------------------------------------------------------------------------
// Responses

const TEMPLATES = templatesOf(DOCUMENT);

function mediaTypeOf(contentType: string): string {
  return contentType.split(';')[0]!.trim().toLowerCase();
}

export function isJsonMedia(media: string): boolean {
  return media === 'application/json' || media.endsWith('+json');
}

/** The documented media type `actual` falls under: exact, then `type/*`, then `*\/*`. */
function documentedMedia(content: Obj, actual: string): string | undefined {
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

/** The documented answer for `status` under `responsesPtr`: exact, then `4XX`, then `default`. */
function documentedResponse(responsesPtr: string, status: number): { ptr: string; value: Obj } | undefined {
  const responses = at(responsesPtr) as Obj;
  for (const key of [String(status), `${String(status)[0]}XX`, 'default']) {
    if (Object.hasOwn(responses, key)) return follow(`${responsesPtr}${pointer(key)}`);
  }
  return undefined;
}

/** The headers of a response: required ones present, every documented one valid, no stray `x-svc-*`. */
function headerErrors(response: { ptr: string; value: Obj }, headers: Headers, relayed: boolean): string[] {
  const errors: string[] = [];
  const documented = isObject(response.value['headers']) ? response.value['headers'] : {};
  for (const name of Object.keys(documented)) {
    const header = follow(`${response.ptr}${pointer('headers', name)}`);
    const value = headers.get(name);
    if (value === null) {
      if (header.value['required'] === true) errors.push(`missing response header ${name}`);
    } else if (header.value['schema'] !== undefined) {
      errors.push(...schemaErrors(`${header.ptr}/schema`, value, `header ${name}`));
    }
  }
  // A relayed answer carries the destination's own headers; ours are all documented.
  if (!relayed) {
    const known = new Set(Object.keys(documented).map((n) => n.toLowerCase()));
    for (const [name] of headers) if (name.startsWith('x-svc-') && !known.has(name)) errors.push(`undocumented response header ${name}`);
  }
  return errors;
}

/**
 * Checks one response against the document. `body` is the parsed JSON body (undefined when
 * there was none or it was not JSON); `headers`, when given, are checked as documented.
 */
export function validateResponse(method: string, path: string, status: number, contentType: string | null, body: unknown, headers?: Headers): ResponseCheck {
  const bare = path.split('?')[0]!.split('#')[0]!;
  const template = findPathTemplate(DOCUMENT, bare, TEMPLATES);
  if (template === undefined) return { operation: null, errors: [] };
  const upper = method.toUpperCase();
  const lower = upper.toLowerCase();
  const name = `${upper} ${template.path}`;
  const head = upper === 'HEAD';
  let response: { ptr: string; value: Obj } | undefined;
  if (isObject(template.item[lower])) {
    response = documentedResponse(`${pointer('paths', template.path, lower)}/responses`, status);
    if (response === undefined) {
      const listed = Object.keys((template.item[lower] as Obj)['responses'] as Obj).join(', ');
      return { operation: name, errors: [`status ${status} is not documented (documented: ${listed})`] };
    }
  } else {
    // A method the path does not list: the listener's 405, as the document's root says.
    const other = follow(pointer('x-svc-other-methods'));
    if (status !== 405) return { operation: name, errors: [`${name} is not documented, yet answered ${status}`] };
    response = other;
  }
  const errors: string[] = [];
  const content = isObject(response.value['content']) ? response.value['content'] : undefined;
  const relayed = content !== undefined && Object.hasOwn(content, '*/*');
  if (headers !== undefined) errors.push(...headerErrors(response, headers, relayed));
  // HEAD answers carry GET's headers (content-type included) and never a body.
  if (head) {
    if (body !== undefined) errors.push('a HEAD answer with a body');
    return { operation: name, errors };
  }
  if (content === undefined) {
    if (body !== undefined || contentType !== null) errors.push(`status ${status} documents no body, yet one came (${contentType ?? 'no content-type'})`);
    return { operation: name, errors };
  }
  if (contentType === null) {
    if (!relayed) errors.push(`no content-type; documented: ${Object.keys(content).join(', ')}`);
    return { operation: name, errors };
  }
  const media = mediaTypeOf(contentType);
  const key = documentedMedia(content, media);
  if (key === undefined) {
    errors.push(`content-type ${media} is not documented for ${status} (documented: ${Object.keys(content).join(', ')})`);
    return { operation: name, errors };
  }
  const mediaObject = follow(`${response.ptr}${pointer('content', key)}`);
  if (isJsonMedia(key) && mediaObject.value['schema'] !== undefined) {
    if (body === undefined) errors.push(`the ${media} body is not JSON`);
    else errors.push(...schemaErrors(`${mediaObject.ptr}/schema`, body));
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
