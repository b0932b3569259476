/**
 * The OpenAPI 3.1 document of the whole service, served at `GET /api/openapi.json` and
 * written to docs/openapi.json by scripts/write-openapi.ts. Written by hand: it is the
 * contract clients read, so it says what the API promises rather than what a generator
 * could infer. test/api/openapi.test.ts keeps it honest: every route is in it and every
 * response the test suite sees is checked against it.
 *
 * Paths are the listener's own (`/api/v3/...`, `/proxy/{slug}`), so one server URL serves
 * both the spec's `{base_url}` and `{account_url}`. Each operation names the permission it
 * needs in `x-permission` (null: any valid API key); `x-roles` lists what each built-in
 * role holds (DESIGN §9).
 */
import { PERMISSIONS } from '../config/schema.ts';
import type { RequestContext } from '../http/context.ts';
import { sendJson } from '../http/respond.ts';
import { components, parameterRef, REQUEST_ID_HEADERS, responseRef, schemaRef, type Json, type JsonObject } from './openapi-components.ts';
import { errors, json, managementPaths, op } from './openapi-operations.ts';

export type { Json, JsonObject };

// ---------------------------------------------------------------------------------------
// Data plane

const DATA_BODY: JsonObject = {
  required: true,
  description:
    'JSON (`application/json` or `application/*+json`, UTF-8; the root an object or an array; depth at most 32), NDJSON, or a form (`application/x-www-form-urlencoded`, UTF-8), whose parameter names are read as field paths (`card[number]` is `card.number`). The answer is in the request\'s format.',
  content: {
    'application/json': { schema: { type: ['object', 'array'], examples: [{ card: { number: '4111111111111111' } }] } },
    'application/x-ndjson': { schema: { type: 'string' } },
    'application/x-www-form-urlencoded': { schema: { type: 'string', examples: ['card%5Bnumber%5D=4111111111111111&amount=1000'] } },
  },
};

/** The headers of every transform's answer. */
const TRANSFORM_HEADERS: JsonObject = { ...REQUEST_ID_HEADERS, 'x-svc-fields-transformed': { $ref: '#/components/headers/FieldsTransformed' } };

/** `/proxy` takes a body with any method, GET and HEAD included; without one it only forwards. */
const PROXY_BODY: JsonObject = {
  ...DATA_BODY,
  required: false,
  description: `${String(DATA_BODY['description'])} Any method may carry one. Without a body there is nothing to transform: with \`x-svc-destination\` the request is forwarded as it is, else 400 (\`The request body is not valid JSON: the body is empty.\`).`,
};

/** An egress route transforms a body when the request has one, whatever the method. */
const EGRESS_BODY: JsonObject = {
  required: false,
  description: "Transformed as the route says when it is JSON (by type or first byte), NDJSON or a form; any other body is forwarded as it is. Any method may carry one.",
  content: { '*/*': { schema: {} } },
};

/** A forwarded answer says how many fields were transformed when the body was done before it. */
const FORWARDED_HEADERS: JsonObject = {
  ...REQUEST_ID_HEADERS,
  'x-svc-fields-transformed': { $ref: '#/components/headers/FieldsTransformedForwarded' },
  'x-svc-reveal': { $ref: '#/components/headers/Reveal' },
};

const dataResult = (description: string, headers: JsonObject = TRANSFORM_HEADERS): JsonObject => ({
  description,
  headers,
  content: {
    'application/json': { schema: { type: ['object', 'array'] } },
    'application/x-ndjson': { schema: { type: 'string' } },
    'application/x-www-form-urlencoded': { schema: { type: 'string' } },
  },
});

/** Where the request may be forwarded, a 200 may also be the destination's own, of any type. */
const forwardedResult = (description: string): JsonObject => {
  const result = dataResult(`${description} With \`x-svc-destination\`: the destination's 200, relayed as it is.`, FORWARDED_HEADERS);
  return { ...result, content: { ...(result['content'] as JsonObject), '*/*': { schema: {} } } };
};

/** With `x-svc-destination` the destination's answer comes back whatever it is. */
const RELAYED: JsonObject = {
  description: "With `x-svc-destination`: the destination's status, headers (minus hop-by-hop) and body, relayed as-is.",
  headers: FORWARDED_HEADERS,
  content: { '*/*': { schema: {} } },
};

const DATA_ERRORS = { ...errors(400, 401), '403': responseRef('DataForbidden'), ...errors(404, 413, 415, 421, 422, 500) };
const FORWARD_ERRORS = errors(502, 504);
/** Whatever writes tokens can meet a key version destroyed while it ran. */
const KEY_DESTROYED = { '409': responseRef('KeyDestroyed') };

const encryptionPaths: Record<string, JsonObject> = {
  '/api/v3/encryption/{slug}/encrypt': {
    parameters: [parameterRef('ProxySlug')],
    post: op({
      id: 'encrypt',
      tag: 'data',
      summary: 'Encrypt fields (spec 4.4)',
      description:
        'Each listed field becomes a token `svc:<kv>:<meta>:<ct>:$`; everything else is copied byte for byte. Without `x-svc-fields` the configuration\'s `fields` are used (none: 400).',
      permission: 'data.encrypt',
      parameters: [parameterRef('Fields'), parameterRef('Classification'), parameterRef('Destination')],
      requestBody: DATA_BODY,
      responses: { '200': forwardedResult('The body with the listed fields encrypted.'), ...DATA_ERRORS, ...KEY_DESTROYED, ...FORWARD_ERRORS, default: RELAYED },
    }),
  },
  '/api/v3/encryption/{slug}/decrypt': {
    parameters: [parameterRef('ProxySlug')],
    post: op({
      id: 'decrypt',
      tag: 'data',
      summary: 'Decrypt fields (spec 4.5)',
      description:
        'Without `x-svc-fields` every string that is a token is decrypted. Each token shows what its classification reveals to the acting user (DESIGN §14): members see the plaintext, others what its reveal grants or its `default` say — the value masked, redacted (`null`) or the token as it is; `x-svc-reveal` counts them. One token the user is denied (no grant and a `deny` default, or a classification that no longer exists) fails the request with 403 and nothing is decrypted.',
      permission: 'data.decrypt',
      parameters: [parameterRef('Fields'), parameterRef('Classification'), parameterRef('Destination')],
      requestBody: DATA_BODY,
      responses: { '200': forwardedResult('The body with its tokens decrypted.'), ...DATA_ERRORS, ...FORWARD_ERRORS, default: RELAYED },
    }),
  },
  '/api/v3/encryption/{slug}/rewrap': {
    parameters: [parameterRef('ProxySlug')],
    post: op({
      id: 'rewrap',
      tag: 'data',
      summary: "Re-encrypt tokens under the configuration's newest key version",
      description: 'No plaintext leaves the service and every token keeps its classification. Neither forwards nor takes `x-svc-classification` (400).',
      permission: 'configurations.rotate',
      parameters: [parameterRef('Fields')],
      requestBody: DATA_BODY,
      responses: {
        '200': dataResult('The body with every token at the newest key version.', { ...TRANSFORM_HEADERS, 'x-svc-key-version': { $ref: '#/components/headers/KeyVersion' } }),
        ...DATA_ERRORS,
        ...KEY_DESTROYED,
      },
    }),
  },
};

const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options'] as const;

function proxyPath(): JsonObject {
  const item: Record<string, Json> = { parameters: [parameterRef('ProxySlug')] };
  for (const method of METHODS) {
    item[method] = op({
      id: `proxy${method[0]!.toUpperCase()}${method.slice(1)}`,
      tag: 'data',
      summary: `Encrypt or decrypt by x-svc-mode, optionally forwarding (spec 4.6), ${method.toUpperCase()}`,
      description: 'Lives at `{account_url}/proxy/{slug}`, outside `/api`. Any method; with `x-svc-destination` the method is preserved.',
      permission: { encrypt: 'data.encrypt', decrypt: 'data.decrypt' },
      parameters: [parameterRef('Mode'), parameterRef('Fields'), parameterRef('Classification'), parameterRef('Destination')],
      requestBody: PROXY_BODY,
      responses: bodiless(method, { '200': forwardedResult('The transformed body.'), ...DATA_ERRORS, ...KEY_DESTROYED, ...FORWARD_ERRORS, ...errors(503), default: RELAYED }),
    });
  }
  return item;
}

function egressPath(): JsonObject {
  const item: Record<string, Json> = { parameters: [parameterRef('EgressName'), parameterRef('EgressRest')], 'x-svc-rest-parameter': 'rest' };
  for (const method of METHODS) {
    item[method] = op({
      id: `egress${method[0]!.toUpperCase()}${method.slice(1)}`,
      tag: 'relay',
      summary: `Egress route to a vendor (DESIGN §12), ${method.toUpperCase()}`,
      description:
        "Forwards to the route's destination + `/{rest}` + query, transforming the body (and, with the route's `query` rules, the named query parameters) as the route says. Authenticated by the route's configuration, " +
        'not by an API key (the pod is the trust boundary). `{rest}` spans the rest of the path, slashes included.',
      permission: null,
      security: 'none',
      requestBody: EGRESS_BODY,
      responses: bodiless(method, {
        '2XX': { ...RELAYED, description: "The destination's answer, its body transformed back as the route says." },
        ...errors(400),
        '403': responseRef('DataForbidden'),
        ...errors(404, 413, 415, 421, 422),
        ...KEY_DESTROYED,
        ...errors(500, 502),
        '503': responseRef('RouteUnavailable'),
        ...errors(504),
        default: RELAYED,
      }),
    });
  }
  return item;
}

// ---------------------------------------------------------------------------------------
// Operations

const ADMIN_SERVER: JsonObject = {
  url: '{admin}',
  description: 'The admin listener (`server.admin_listen`), never exposed publicly.',
  variables: { admin: { default: 'http://127.0.0.1:9090' } },
};

const operationPaths: Record<string, JsonObject> = {
  '/healthz': {
    get: op({
      id: 'healthz',
      tag: 'operations',
      summary: 'Liveness',
      description: 'Served on the main and the admin listener.',
      permission: null,
      security: 'none',
      responses: { '200': json('Alive.', schemaRef('Health')), ...errors(500) },
    }),
  },
  '/readyz': {
    get: op({
      id: 'readyz',
      tag: 'operations',
      summary: 'Readiness',
      description: 'Served on the main and the admin listener; 503 while starting or shutting down, or when the store does not answer.',
      permission: null,
      security: 'none',
      responses: { '200': json('Ready.', schemaRef('Ready')), ...errors(500, 503) },
    }),
  },
  '/metrics': {
    servers: [ADMIN_SERVER],
    get: op({
      id: 'metrics',
      tag: 'operations',
      summary: 'Prometheus metrics',
      description: 'Admin listener only.',
      permission: null,
      security: 'none',
      responses: {
        '200': { description: 'The Prometheus text format.', headers: REQUEST_ID_HEADERS, content: { 'text/plain': { schema: { type: 'string' } } } },
        ...errors(500),
      },
    }),
  },
  '/api/openapi.json': {
    get: op({
      id: 'getOpenApiDocument',
      tag: 'operations',
      summary: 'This document',
      permission: null,
      security: 'none',
      responses: { '200': json('The OpenAPI 3.1 document.', {
          type: 'object',
          required: ['openapi', 'info', 'paths', 'components'],
          properties: { openapi: { const: '3.1.0' }, info: { type: 'object' }, paths: { type: 'object' }, components: { type: 'object' } },
        }), ...errors(500) },
    }),
  },
};

// ---------------------------------------------------------------------------------------
// HEAD

/** A response as HEAD gets it: the same description and headers, no content. */
function headResponse(response: JsonObject): JsonObject {
  const ref = response['$ref'];
  const resolved = typeof ref === 'string' ? ((components['responses'] as JsonObject)[ref.split('/').pop()!] as JsonObject) : response;
  return {
    description: resolved['description']!,
    ...(resolved['headers'] === undefined ? {} : { headers: resolved['headers'] }),
  };
}

/**
 * HEAD answers have no body: for `head`, each response keeps its description and headers
 * only. The HTTP parser's 408 and 431 are the exception: it answers before it knows the
 * method, so they are sent whole.
 */
function bodiless(method: string, responses: Record<string, JsonObject>): Record<string, JsonObject> {
  if (method !== 'head') return responses;
  return Object.fromEntries(Object.entries(responses).map(([status, response]) => [status, PARSER_STATUSES.has(status) ? response : headResponse(response)]));
}

const PARSER_STATUSES = new Set(['408', '431']);

/** The HEAD twin of a GET operation (the router answers HEAD wherever it answers GET). */
function headOf(get: JsonObject): JsonObject {
  return {
    ...get,
    operationId: `${String(get['operationId'])}Head`,
    summary: `${String(get['summary'])} (headers only)`,
    description: 'As GET, with the same status and headers, and no body.',
    responses: bodiless('head', get['responses'] as Record<string, JsonObject>),
  };
}

/** Every path with a GET but no HEAD of its own gets the HEAD the router serves there. */
function withHeads(paths: Record<string, JsonObject>): Record<string, JsonObject> {
  const out: Record<string, JsonObject> = {};
  for (const [path, item] of Object.entries(paths)) {
    const get = item['get'];
    if (get === undefined || item['head'] !== undefined) {
      out[path] = item;
      continue;
    }
    const withHead: Record<string, Json> = {};
    for (const [key, value] of Object.entries(item)) {
      withHead[key] = value;
      if (key === 'get') withHead['head'] = headOf(get as JsonObject);
    }
    out[path] = withHead;
  }
  return out;
}

/**
 * What each built-in role holds (DESIGN §9): owner and administrator everything,
 * developer `data.*`, every `.view` and `api-keys.create`, viewer every `.view`.
 */
function roleTable(): JsonObject {
  const all = [...PERMISSIONS];
  return {
    owner: all,
    administrator: all,
    developer: all.filter((p) => p.startsWith('data.') || p.endsWith('.view') || p === 'api-keys.create'),
    viewer: all.filter((p) => p.endsWith('.view')),
  };
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

export const openApiDocument: JsonObject = deepFreeze<JsonObject>({
  openapi: '3.1.0',
  info: {
    title: 'svc-sidecar',
    version: '3.0.0',
    summary: 'Field encryption, classification-gated decryption, and the management API around them.',
    description:
      'Every `/api` and `/proxy` request carries an API key in `x-svc-authorization`; an access token from login, sent as ' +
      '`authorization: Bearer`, makes its user the acting user. Effective permissions are the key\'s scope ∩ the acting user\'s role permissions; ' +
      'each operation names the one it needs in `x-permission`. Errors are `{message}`, plus `errors` on 422. Every path answers HEAD wherever it answers GET, and ' +
      'a method it does not list with 405 and `Allow` (`x-svc-other-methods`); a path that is not here answers 404. See docs/api.md.',
    license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
  },
  servers: [
    {
      url: '{origin}',
      description: 'The main listener. `{base_url}` is `{origin}/api`, `{account_url}` is `{origin}`.',
      variables: { origin: { default: 'http://localhost:8080', description: '`server.public_url`, or the scheme, host and port of `server.listen`.' } },
    },
  ],
  security: [{ apiKey: [], bearer: [] }, { apiKey: [] }],
  tags: [
    { name: 'classifications', description: 'Labels for encrypted data that decide who may decrypt it.' },
    { name: 'configurations', description: 'Encryption configurations (keyrings, slugs, destinations) and provider configurations (groups).' },
    { name: 'api-keys', description: 'API keys: shown once, stored hashed.' },
    { name: 'users', description: 'Users and the built-in roles.' },
    { name: 'logs', description: 'Activity, api and usage logs.' },
    { name: 'auth', description: 'Login, logout and the acting user.' },
    { name: 'sync', description: 'Replication: the snapshot replicas pull and the logs they ship (docs/replication.md).' },
    { name: 'data', description: 'The data plane: encrypt, decrypt, rewrap and the proxy route.' },
    { name: 'relay', description: 'Egress routes configured in the file.' },
    { name: 'operations', description: 'Health, metrics and this document.' },
  ],
  'x-roles': roleTable(),
  /** The answer to a method a path does not list (the router's, on every listener). */
  'x-svc-other-methods': responseRef('MethodNotAllowed'),
  paths: withHeads({
    ...managementPaths,
    ...encryptionPaths,
    '/proxy/{slug}': proxyPath(),
    '/egress/{name}/{rest}': egressPath(),
    ...operationPaths,
  }),
  components,
});

/** Serialized once: the document never changes while the process runs. */
const BODY = Buffer.from(JSON.stringify(openApiDocument));

/** `GET /api/openapi.json`: no credentials needed, it only describes the API. */
export function openApiRoute(ctx: RequestContext): void {
  sendJson(ctx, 200, BODY);
}
