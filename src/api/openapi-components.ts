/**
 * The reusable parts of the OpenAPI document (src/api/openapi.ts): the response shapes of
 * spec §2 as the presenters write them, request bodies, parameters and error responses.
 *
 * Response schemas are strict on purpose: every field the presenters always write is
 * `required` and fixed shapes reject other properties, so the test suite, which checks
 * every response against this document, notices a field that is added, renamed or
 * dropped. Request bodies stay open: the API ignores fields it does not know.
 */
import { DESTINATION_PATH_NOT_ALLOWED } from '../errors.ts';
import { METHODS } from '../http/node-http.ts';
import { BUILT_IN_ROLES, EGRESS_NAME_PATTERN, PERMISSIONS, PROXY_SLUG_PATTERN } from '../config/schema.ts';
import { DEFAULT_LEVELS, DEFAULT_MASK_CHAR, MASK_KEEP_MAX, MASK_PRESETS, MASK_SEPARATORS, REVEAL_LEVELS } from '../fields/reveal.ts';
import { CLASSIFICATION_SORTS, SORT_DIRECTIONS } from '../store/classifications.ts';
import { LOG_KINDS } from '../store/logs.ts';
import { MAX_CURSOR_LENGTH } from './log-cursor.ts';
import { DEFAULT_PER_PAGE, MAX_PER_PAGE } from './pagination.ts';
import { REVEAL_MAX } from './reveal-input.ts';
import { EMAIL_PATTERN } from './validation.ts';

export type Json = string | number | boolean | null | readonly Json[] | { readonly [key: string]: Json };
export type JsonObject = { readonly [key: string]: Json };

// ---------------------------------------------------------------------------------------
// Building blocks

export const schemaRef = (name: string): JsonObject => ({ $ref: `#/components/schemas/${name}` });
export const responseRef = (name: string): JsonObject => ({ $ref: `#/components/responses/${name}` });
export const parameterRef = (name: string): JsonObject => ({ $ref: `#/components/parameters/${name}` });

const orNull = (schema: JsonObject): JsonObject => ({ anyOf: [schema, { type: 'null' }] });
const arrayOf = (items: JsonObject, extra: JsonObject = {}): JsonObject => ({ type: 'array', items, ...extra });

/** A fixed shape: exactly these properties, all of them required unless `optional` names some. */
function shape(properties: Record<string, JsonObject>, optional: readonly string[] = [], extra: JsonObject = {}): JsonObject {
  return {
    type: 'object',
    additionalProperties: false,
    required: Object.keys(properties).filter((name) => !optional.includes(name)),
    properties,
    ...extra,
  };
}

const text: JsonObject = { type: 'string' };
const id: JsonObject = { type: 'integer', minimum: 1 };
const count: JsonObject = { type: 'integer', minimum: 0 };
const dateTime: JsonObject = { type: 'string', format: 'date-time' };
const uuid: JsonObject = { type: 'string', format: 'uuid' };
/** The API's own rule (src/api/validation.ts), not RFC 5322: what it takes is what it may show. */
const email: JsonObject = { type: 'string', pattern: EMAIL_PATTERN.source, examples: ['ada@example.com'] };
const nullableEmail: JsonObject = { type: ['string', 'null'], pattern: EMAIL_PATTERN.source };
const color: JsonObject = { type: 'string', pattern: '^#[0-9A-Fa-f]{6}$', examples: ['#aa0000'] };
const apiKeySecret: JsonObject = { type: 'string', pattern: '^svc_[A-Za-z0-9]{40}$', description: 'The full API key. Shown once: only its SHA-256 is stored.' };
const apiKeyPrefix: JsonObject = { type: 'string', pattern: '^svc_[A-Za-z0-9]{8}$', description: 'The first 12 characters of the key.' };
/** A JavaScript RegExp's source is also an ECMA-262 pattern, which is what JSON Schema uses. */
const proxySlug: JsonObject = { type: 'string', pattern: PROXY_SLUG_PATTERN.source };
const requestId: JsonObject = { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$' };
const sha256Hex: JsonObject = { type: 'string', pattern: '^[0-9a-f]{64}$' };
/** Every method Node's HTTP parser accepts: what a request, and so a log row, can carry. */
const httpMethod: JsonObject = { type: 'string', enum: [...METHODS], examples: ['POST'] };
const statusCode: JsonObject = { type: 'integer', minimum: 100, maximum: 599 };
/** The wire names of a snapshot's sections (docs/replication.md). */
const SNAPSHOT_SECTIONS = ['roles', 'users', 'configurations', 'classifications', 'api_keys'];

// ---------------------------------------------------------------------------------------
// Response shapes (spec §2)

const permission = shape({ name: { type: 'string', enum: [...PERMISSIONS] } });

const role = shape({
  id,
  name: { type: 'string', enum: [...BUILT_IN_ROLES] },
  description: { type: ['string', 'null'] },
  permissions: arrayOf(schemaRef('Permission')),
});

const user = shape({
  id,
  name: text,
  email,
  two_factor_enabled: { type: 'boolean' },
  created_at: dateTime,
  updated_at: dateTime,
  roles: arrayOf(schemaRef('Role')),
});

const groupRef = shape({ id: { type: 'string', minLength: 1 }, name: text, email }, ['name', 'email']);

const provider = shape({
  uuid: { ...uuid, description: 'The provider configuration.' },
  name: { type: 'string', description: 'The provider configuration\'s name.' },
  gws_groups: arrayOf(schemaRef('GroupRef')),
});

// Reveal levels (DESIGN §14; api/reveal-input.ts).

const customMask = shape(
  {
    keep_first: { type: 'integer', minimum: 0, maximum: MASK_KEEP_MAX, description: 'Characters kept at the start (separators not counted).' },
    keep_last: { type: 'integer', minimum: 0, maximum: MASK_KEEP_MAX, description: 'Characters kept at the end (separators not counted).' },
    char: { type: 'string', minLength: 1, maxLength: 1, description: `What every other character becomes. Default \`${DEFAULT_MASK_CHAR}\`.` },
  },
  ['keep_first', 'keep_last', 'char'],
);
const maskSpec: JsonObject = {
  anyOf: [{ type: 'string', enum: [...MASK_PRESETS] }, customMask],
  description:
    `A preset (\`last4\`, \`first6last4\`, \`email\`: \`a•••@example.com\`, \`ssn\`: \`•••-••-6789\`) or \`{keep_first, keep_last, char}\`. ` +
    `Separators (\`${MASK_SEPARATORS}\`) are kept; a value with no more characters than the mask keeps is hidden whole.`,
};

const revealGrant = shape(
  {
    to: shape({ users: arrayOf(schemaRef('User')), roles: arrayOf(schemaRef('Role')), groups: arrayOf({ type: 'string', minLength: 1 }) }),
    level: { type: 'string', enum: [...REVEAL_LEVELS] },
    mask: orNull(maskSpec),
  },
  [],
  { description: 'Whom it names (users and roles shown as the members are; groups by provider group id), what they see, and for `mask` how.' },
);

const classification = shape({
  id,
  name: { type: 'string', minLength: 1, maxLength: 32 },
  slug: { type: 'string', pattern: '^[a-z0-9]+(?:-[a-z0-9]+)*$' },
  description: { type: ['string', 'null'], maxLength: 255 },
  bg_color: color,
  fg_color: color,
  emoji: { type: ['string', 'null'] },
  provider_container_id: { type: ['string', 'null'], format: 'uuid', description: 'The UUID of the provider configuration whose groups are listed in `providers`.' },
  providers: arrayOf(schemaRef('Provider')),
  users: arrayOf(schemaRef('User')),
  roles: arrayOf(schemaRef('Role')),
  reveal: { ...arrayOf(schemaRef('RevealGrant')), description: 'What readers who are not members see (DESIGN §14): the most revealing grant that names them.' },
  default: { type: 'string', enum: [...DEFAULT_LEVELS], description: 'What a reader no grant names sees.' },
  default_mask: { ...orNull(maskSpec), description: 'The mask of `default: mask`; null otherwise.' },
  created_at: dateTime,
  updated_at: dateTime,
});

const ENCRYPTION_VALUE_KEYS = ['proxy_slug', 'key_version', 'min_decryption_version', 'deterministic', 'destinations', 'fields'];

const encryptionConfiguration = shape(
  {
    id: uuid,
    name: { type: 'string', minLength: 1 },
    type: { const: 'encryption' },
    provider: { type: 'null' },
    values: arrayOf(shape({ key: { type: 'string', enum: ENCRYPTION_VALUE_KEYS }, value: text }), { minItems: 6, maxItems: 6 }),
    created_at: dateTime,
    updated_at: dateTime,
  },
  [],
  {
    description:
      'An encryption configuration. `values`, all strings: `proxy_slug`, `key_version` (the version new tokens use), `min_decryption_version`, ' +
      '`deterministic` (`true`/`false`), `destinations` and `fields` (comma-separated lists).',
  },
);

const providerConfiguration = shape(
  {
    id: uuid,
    name: { type: 'string', minLength: 1 },
    type: { const: 'provider' },
    provider: { type: 'string', enum: ['google'] },
    values: arrayOf(shape({ key: text, value: text }), { minItems: 1 }),
    created_at: dateTime,
    updated_at: dateTime,
  },
  [],
  { description: 'A provider configuration (a directory of groups). `values` starts with `provider`; group member lists are never shown.' },
);

const configuration: JsonObject = {
  oneOf: [schemaRef('EncryptionConfiguration'), schemaRef('ProviderConfiguration')],
  discriminator: {
    propertyName: 'type',
    mapping: { encryption: '#/components/schemas/EncryptionConfiguration', provider: '#/components/schemas/ProviderConfiguration' },
  },
};

const apiKeyFields = {
  id: uuid,
  name: { type: 'string', minLength: 1 },
  prefix: apiKeyPrefix,
  status: { type: 'string', enum: ['active', 'revoked'] },
  created_at: dateTime,
  updated_at: dateTime,
  revoked_at: { type: ['string', 'null'], format: 'date-time' },
  user: orNull(schemaRef('User')),
  configurations: { ...arrayOf(schemaRef('Configuration')), description: 'The configurations the key is limited to; empty: all.' },
  permissions: { ...arrayOf(schemaRef('Permission')), description: "The key's permission scope; empty: all of its user's permissions." },
} satisfies Record<string, JsonObject>;

const apiKeyRef = shape({ id: uuid, prefix: apiKeyPrefix });

const keyVersion = shape({
  version: id,
  status: {
    type: 'string',
    enum: ['current', 'active', 'retired', 'destroyed'],
    description: '`current` writes new tokens; `active` still decrypts; `retired` is below `min_decryption_version`; `destroyed` is gone for good.',
  },
  created_at: dateTime,
  destroyed_at: { type: ['string', 'null'], format: 'date-time' },
});

const logUser = orNull(schemaRef('User'));
const logConfiguration = orNull(schemaRef('Configuration'));

const activityLogEntry = shape({
  id,
  action: { type: 'string', description: 'e.g. `classification.created`, `auth.login`.' },
  description: text,
  ip: text,
  when: { type: 'string', description: 'Relative time, e.g. `5 minutes ago`.' },
  timestamp: dateTime,
  user: logUser,
  causer_email: nullableEmail,
  request_id: { type: ['string', 'null'] },
});

/** The relay's end user (docs/reveal.md "End users behind the relay"). */
const endUser: JsonObject = {
  type: 'string',
  minLength: 1,
  maxLength: 256,
  description: "The relay's end user: the subject (`sub`, else the user claim) of the JWT the request carried, never the token. Present only on relay rows that identified one (`relay.identity`).",
};

const apiLogEntry = shape({
  id,
  request_id: text,
  method: httpMethod,
  path: text,
  status_code: statusCode,
  api_key: orNull(schemaRef('ApiKeyRef')),
  configuration: logConfiguration,
  destination: { type: ['string', 'null'], description: 'The origin a request was forwarded to.' },
  duration_ms: { type: 'number', minimum: 0, description: 'Whole milliseconds here; rows shipped by replicas may carry fractions.' },
  ip: text,
  timestamp: dateTime,
  user: logUser,
  end_user: endUser,
}, ['end_user']);

const usageLogEntry = shape({
  id,
  request_id: text,
  configuration: logConfiguration,
  mode: { type: 'string', enum: ['encrypt', 'decrypt'] },
  field_count: count,
  bytes: count,
  reveal: { ...orNull(schemaRef('RevealCounts')), description: "A decrypt's values per reveal level; null for an encrypt, and for entries written before reveal levels." },
  timestamp: dateTime,
  user: logUser,
  api_key: orNull(schemaRef('ApiKeyRef')),
});

const unifiedLogEntry = shape({
  id,
  log_type: { type: 'string', enum: [...LOG_KINDS] },
  action: text,
  description: text,
  details: { type: 'string', description: "The kind's own fields as JSON text." },
  causer_email: nullableEmail,
  status_code: { type: ['integer', 'null'], minimum: 100, maximum: 599 },
  request_id: { type: ['string', 'null'] },
  timestamp: dateTime,
  configuration: logConfiguration,
  user: logUser,
  full_log: shape({ action: text, description: text, ip: text, when: text, timestamp: dateTime, user: logUser }),
  end_user: { ...endUser, description: 'On api entries of relay requests that identified an end user: as `end_user` in the api list (also in `details`).' },
}, ['end_user']);

/** A time as log rows store it (Date#toISOString), at most 10 minutes ahead of the control plane's clock. */
const logTime: JsonObject = { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$', examples: ['2026-01-01T00:00:00.000Z'], description: 'UTC, milliseconds, `Z`; at most 10 minutes ahead of the control plane\'s clock.' };
const shippedRowId: JsonObject = { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER, description: 'The row\'s id on the replica.' };
const shippedUserId: JsonObject = { type: ['integer', 'null'], minimum: 1, description: 'A user of the control plane, or null.' };
const shippedKeyId: JsonObject = { ...orNull(uuid), description: 'An API key of the control plane, or null.' };

/** A row of `POST /api/v3/sync/logs`: an api log row as the replica stores it. */
const syncApiRow = shape({
  id: shippedRowId,
  request_id: requestId,
  method: { type: 'string', enum: [...METHODS] },
  path: { type: 'string', minLength: 1, maxLength: 1024 },
  status_code: { type: 'integer', minimum: 100, maximum: 599 },
  api_key_id: shippedKeyId,
  user_id: shippedUserId,
  configuration_id: { ...orNull(uuid), description: 'A configuration of the control plane (within the key\'s scope), or null.' },
  destination: { type: ['string', 'null'], minLength: 1, maxLength: 2048 },
  duration_ms: { type: 'number', minimum: 0, maximum: 30 * 24 * 60 * 60 * 1000 },
  ip: { type: 'string', pattern: '^(|[0-9.]{7,15}|[0-9A-Fa-f:.]{2,45})$', examples: ['10.0.0.1', '::1', ''], description: 'An IPv4 or IPv6 address, or empty.' },
  created_at: logTime,
  end_user: { type: ['string', 'null'], minLength: 1, maxLength: 256, description: "The relay's end user (the JWT's subject, no control or bidirectional formatting characters); sent only when set." },
}, ['end_user']);

/** A row of `POST /api/v3/sync/logs`: a usage log row as the replica stores it. */
const syncUsageRow = shape({
  id: shippedRowId,
  request_id: requestId,
  configuration_id: { ...uuid, description: 'A configuration of the control plane, within the key\'s scope.' },
  api_key_id: shippedKeyId,
  user_id: shippedUserId,
  mode: { type: 'string', enum: ['encrypt', 'decrypt'] },
  field_count: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
  bytes: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
  reveal: { ...orNull(schemaRef('RevealCounts')), description: 'A decrypt\'s values per reveal level; null or absent for an encrypt (absent from replicas of earlier builds).' },
  created_at: logTime,
}, ['reveal']);

const pageUrl: JsonObject = { type: 'string', format: 'uri' };
const nextCursor: JsonObject = {
  type: ['string', 'null'],
  maxLength: MAX_CURSOR_LENGTH,
  description: 'Log lists only: the `cursor` of the next page, null on the last page. Opaque; valid with the same filters and `per_page`.',
};
const nextCursorUrl: JsonObject = { type: ['string', 'null'], format: 'uri', description: 'Log lists only: the next page by cursor, null on the last page.' };

const pageEnvelope = shape(
  {
    current_page: { type: 'integer', minimum: 1 },
    data: { type: 'array' },
    first_page_url: pageUrl,
    from: { type: ['integer', 'null'], minimum: 1 },
    last_page: { type: 'integer', minimum: 1 },
    last_page_url: pageUrl,
    links: arrayOf(
      shape({
        url: { type: ['string', 'null'], format: 'uri' },
        label: text,
        page: { type: ['integer', 'null'], minimum: 1 },
        active: { type: 'boolean' },
      }),
      { minItems: 3 },
    ),
    next_page_url: { type: ['string', 'null'], format: 'uri' },
    path: pageUrl,
    per_page: { type: 'integer', minimum: 1, maximum: MAX_PER_PAGE },
    prev_page_url: { type: ['string', 'null'], format: 'uri' },
    to: { type: ['integer', 'null'], minimum: 1 },
    total: count,
    next_cursor: nextCursor,
    next_cursor_url: nextCursorUrl,
  },
  ['next_cursor', 'next_cursor_url'],
  { description: 'The page envelope of spec 2.11; log lists add `next_cursor` and `next_cursor_url`. Each list narrows `data` with allOf.' },
);

/** A page envelope whose `data` holds `item`s. */
const pageOf = (item: string): JsonObject => ({
  allOf: [schemaRef('PageEnvelope'), { type: 'object', properties: { data: arrayOf(schemaRef(item)) } }],
});

/** A log list's page: the envelope with its cursor fields always present. */
const logPageOf = (item: string): JsonObject => ({
  allOf: [
    schemaRef('PageEnvelope'),
    { type: 'object', required: ['next_cursor', 'next_cursor_url'], properties: { data: arrayOf(schemaRef(item)), next_cursor: nextCursor, next_cursor_url: nextCursorUrl } },
  ],
});

const error = shape({ message: text }, [], { description: 'Every error body (DESIGN §7).' });
const validationError = shape(
  {
    message: { type: 'string', description: 'The first message, then ` (and N more errors)`.' },
    errors: {
      type: 'object',
      description: 'Every failing field (dot notation for nested ones) with its messages.',
      additionalProperties: arrayOf(text, { minItems: 1 }),
    },
  },
  [],
  { description: 'A Laravel-style validation failure.' },
);

/** An Error whose message is one of `messages`. */
const errorSaying = (...messages: string[]): JsonObject => ({
  allOf: [schemaRef('Error'), { type: 'object', properties: { message: { type: 'string', enum: messages } } }],
});

const FORBIDDEN = 'User does not have the right permissions.';
const ACTION_UNAUTHORIZED = 'This action is unauthorized.';

// ---------------------------------------------------------------------------------------
// Request bodies

/** A group as a request names it: like GroupRef, with empty or null `name` and `email` read as absent. */
const groupText: JsonObject = { type: ['string', 'null'], maxLength: 255 };
const groupRefInput: JsonObject = {
  type: 'object',
  required: ['id'],
  properties: {
    id: { type: 'string', minLength: 1, maxLength: 255 },
    name: groupText,
    email: { anyOf: [{ ...email, maxLength: 255 }, { const: '' }, { type: 'null' }] },
  },
};
const gwsGroupsInput: JsonObject = { type: ['array', 'null'], maxItems: 1000, items: schemaRef('GroupRefInput') };
const memberIds: JsonObject = { type: 'array', maxItems: 1000, items: id };

const maskSpecInput: JsonObject = {
  anyOf: [
    { type: 'string', enum: [...MASK_PRESETS] },
    {
      type: 'object',
      additionalProperties: false,
      properties: {
        keep_first: { type: 'integer', minimum: 0, maximum: MASK_KEEP_MAX, default: 0 },
        keep_last: { type: 'integer', minimum: 0, maximum: MASK_KEEP_MAX, default: 0 },
        char: { type: 'string', minLength: 1, maxLength: 1, default: DEFAULT_MASK_CHAR, description: 'One visible character.' },
      },
    },
  ],
};
/** Whom a grant names: at least one user, role or group. */
const revealAudienceInput: JsonObject = {
  type: 'object',
  additionalProperties: false,
  properties: {
    users: { ...memberIds, description: 'User ids.' },
    roles: { ...memberIds, description: 'Role ids.' },
    groups: { type: 'array', maxItems: 1000, items: { type: 'string', minLength: 1, maxLength: 255 }, description: 'Provider group ids.' },
  },
  not: { type: 'object', properties: { users: { type: 'array', maxItems: 0 }, roles: { type: 'array', maxItems: 0 }, groups: { type: 'array', maxItems: 0 } } },
};
const revealGrantInput: JsonObject = {
  type: 'object',
  additionalProperties: false,
  required: ['to', 'level'],
  properties: {
    to: revealAudienceInput,
    level: { type: 'string', enum: [...REVEAL_LEVELS], description: 'plain > mask > token > redact > deny: the most revealing grant that names a reader wins.' },
    mask: { anyOf: [maskSpecInput, { type: 'null' }], description: 'Required with `level: mask`; null or absent otherwise.' },
  },
  if: { type: 'object', required: ['level'], properties: { level: { const: 'mask' } } },
  then: { type: 'object', required: ['mask'], properties: { mask: maskSpecInput } },
  else: { type: 'object', properties: { mask: { type: 'null' } } },
  examples: [{ to: { groups: ['g-nurses'] }, level: 'mask', mask: 'last4' }],
};
const classificationFields = {
  name: { type: 'string', minLength: 1, maxLength: 32 },
  bg_color: color,
  fg_color: color,
  description: { type: ['string', 'null'], maxLength: 255 },
  emoji: { type: ['string', 'null'], maxLength: 32 },
  provider_container_id: {
    type: ['string', 'null'],
    format: 'uuid',
    description: 'The UUID of a provider configuration (not an integer: configurations are named by UUID). Required when `gws_groups` holds any group; null clears it and its groups.',
  },
  gws_groups: { ...gwsGroupsInput, description: 'Groups of the provider named by `provider_container_id`.' },
  users: { ...memberIds, description: 'User ids.' },
  roles: { ...memberIds, description: 'Role ids.' },
  reveal: {
    type: ['array', 'null'],
    maxItems: REVEAL_MAX,
    items: schemaRef('RevealGrantInput'),
    description: 'Reveal grants; sent, it replaces the list whole (null: not sent). Changing them needs a caller admitted to the classification, as changing its members does.',
  },
  default: {
    type: ['string', 'null'],
    enum: [...DEFAULT_LEVELS, null],
    examples: ['mask'],
    description: 'What a reader no grant names sees: `deny` (403 for the whole request; the default), `token`, `redact` or `mask`. Never `plain`.',
  },
  default_mask: { anyOf: [maskSpecInput, { type: 'null' }], description: 'With `default: mask`, and only with it: the mask.' },
} satisfies Record<string, JsonObject>;

/** `default_mask` goes with `default: mask` in the same request, and that needs one. */
const DEFAULT_MASK_RULE: JsonObject = {
  dependentSchemas: {
    default: {
      anyOf: [
        { type: 'object', properties: { default: { not: { const: 'mask' } } } },
        { type: 'object', required: ['default_mask'], properties: { default_mask: { not: { type: 'null' } } } },
      ],
    },
    default_mask: {
      anyOf: [
        { type: 'object', properties: { default_mask: { type: 'null' } } },
        { type: 'object', required: ['default'], properties: { default: { const: 'mask' } } },
      ],
    },
  },
};

const configurationValue: JsonObject = {
  anyOf: [{ type: 'string' }, { type: 'integer' }, { type: 'boolean' }, arrayOf(text)],
  description: 'Taken as text: integers and booleans as written, a list of strings joined with commas.',
};
const configurationValues: JsonObject = {
  description:
    'Settings of an encryption configuration, as the `{key, value}` array GET shows or as an object. Settable: `destinations`, `fields`, ' +
    '`min_decryption_version`; on create also `deterministic` and `proxy_slug`. Fixed keys may be sent back unchanged.',
  anyOf: [arrayOf({ type: 'object', required: ['key', 'value'], properties: { key: text, value: configurationValue } }), { type: 'object', additionalProperties: configurationValue }],
};

/** Laravel's `required_with`: groups name their provider, in the same request. */
const GROUPS_NEED_CONTAINER: JsonObject = {
  if: { type: 'object', required: ['gws_groups'], properties: { gws_groups: { type: 'array', minItems: 1 } } },
  then: { type: 'object', required: ['provider_container_id'], properties: { provider_container_id: { type: 'string', minLength: 1 } } },
};

// ---------------------------------------------------------------------------------------
// The components object

const requestIdHeader: JsonObject = {
  description: "The request's id: the caller's `x-svc-request-id` when it is sane, else a new UUIDv7. Every log entry of the request carries it.",
  required: true,
  schema: requestId,
};

/** Every response of the service carries `x-svc-request-id`. */
export const REQUEST_ID_HEADERS: JsonObject = { 'x-svc-request-id': { $ref: '#/components/headers/RequestId' } };

const errorResponse = (description: string, schema: JsonObject, headers: JsonObject = REQUEST_ID_HEADERS): JsonObject => ({
  description,
  headers,
  content: { 'application/json': { schema } },
});

export const components: JsonObject = {
  securitySchemes: {
    apiKey: { type: 'apiKey', in: 'header', name: 'x-svc-authorization', description: 'An API key, `svc_` followed by 40 letters or digits. Required on every `/api` and `/proxy` request.' },
    bearer: {
      type: 'http',
      scheme: 'bearer',
      bearerFormat: 'JWT',
      description: 'An access token from `POST /api/v2/auth/login`, sent with an API key: its user becomes the acting user; the key still applies its scopes.',
    },
  },
  headers: {
    RequestId: requestIdHeader,
    RetryAfter: { description: 'Seconds until another attempt may succeed.', required: true, schema: { type: 'string', pattern: '^[1-9][0-9]*$' } },
    ETag: { description: "The snapshot's digest, quoted.", required: true, schema: { type: 'string', pattern: '^"[0-9a-f]{64}"$' } },
    KeyVersion: { description: 'The key version every returned token carries.', required: true, schema: { type: 'string', pattern: '^[1-9][0-9]*$' } },
    FieldsTransformed: {
      description: "How many field values the request's transform replaced (encrypted, decrypted — shown plain, masked or redacted — or rewrapped); 0 when none matched.",
      required: true,
      schema: { type: 'string', pattern: '^(0|[1-9][0-9]*)$' },
    },
    Reveal: {
      description:
        "On a decrypt's answer (DESIGN §14): how many values it showed at each level — the plaintext, masked, redacted (null) or the token as it was. Set when the body was decrypted whole before the answer (always, unless a destination answers before reading the whole body).",
      schema: { type: 'string', pattern: '^plain=(0|[1-9][0-9]*), mask=(0|[1-9][0-9]*), redact=(0|[1-9][0-9]*), token=(0|[1-9][0-9]*)$', examples: ['plain=3, mask=1, redact=0, token=0'] },
    },
    FieldsTransformedForwarded: {
      description: "How many field values the request's transform replaced, when the body was transformed whole before the destination answered (always, unless the destination answers before reading the whole body).",
      schema: { type: 'string', pattern: '^(0|[1-9][0-9]*)$' },
    },
  },
  parameters: {
    ClassificationId: { name: 'id', in: 'path', required: true, schema: id },
    ConfigurationId: { name: 'id', in: 'path', required: true, schema: uuid, description: 'A configuration UUID.' },
    ApiKeyId: { name: 'id', in: 'path', required: true, schema: uuid },
    KeyVersion: { name: 'version', in: 'path', required: true, schema: id },
    ProxySlug: { name: 'slug', in: 'path', required: true, schema: proxySlug, description: 'The `proxy_slug` of an encryption configuration.' },
    EgressName: { name: 'name', in: 'path', required: true, schema: { type: 'string', pattern: EGRESS_NAME_PATTERN.source }, description: 'An `egress` route name from the configuration file.' },
    EgressRest: {
      name: 'rest',
      in: 'path',
      required: true,
      schema: { type: 'string' },
      description: "The rest of the path, slashes included (possibly empty), appended to the route's destination.",
    },
    Page: { name: 'page', in: 'query', schema: { type: 'integer', minimum: 1, default: 1 } },
    PerPage: { name: 'per_page', in: 'query', schema: { type: 'integer', minimum: 1, maximum: MAX_PER_PAGE, default: DEFAULT_PER_PAGE }, description: `At most ${MAX_PER_PAGE}: 422 beyond.` },
    LogUser: { name: 'user', in: 'query', schema: id, description: "The acting user's id." },
    LogUserId: { name: 'user_id', in: 'query', schema: id, description: 'Same as `user`; given together they must agree.' },
    LogCursor: {
      name: 'cursor',
      in: 'query',
      schema: { type: 'string', maxLength: MAX_CURSOR_LENGTH },
      description:
        "The previous page's `next_cursor`: the page right after it, at the same cost however deep. Only with the filters and `per_page` it was issued for " +
        '(422 otherwise, or when altered); `page`, if given too, must be the page it leads to.',
    },
    LogRequestId: { name: 'request_id', in: 'query', schema: { type: 'string', maxLength: 128 }, description: "One request's entries, by its `x-svc-request-id`." },
    RequestId: {
      name: 'x-svc-request-id',
      in: 'header',
      schema: { type: 'string' },
      description: 'Your id for the request: kept when it matches `^[A-Za-z0-9._:-]{1,128}$`, else replaced by a new one.',
    },
    Fields: {
      name: 'x-svc-fields',
      in: 'header',
      schema: { type: 'string', maxLength: 8192 },
      description:
        'Comma-separated field paths: `.` descends, an all-digit segment also names an array index, `*` matches every key or index, `\\.` `\\*` `\\\\` escape. ' +
        'At most 128 paths of 64 segments.',
    },
    Classification: {
      name: 'x-svc-classification',
      in: 'header',
      schema: { type: 'string', maxLength: 128 },
      description: 'A classification id or slug. On encrypt it is bound into each token; on decrypt every token must carry it (else 403).',
    },
    Destination: {
      name: 'x-svc-destination',
      in: 'header',
      schema: { type: 'string', format: 'uri' },
      description: "An absolute http(s) URL to forward the result to; it must match the configuration's `destinations`. Given once: two of them → 400. The destination's answer is relayed as-is.",
    },
    Mode: { name: 'x-svc-mode', in: 'header', schema: { type: 'string', enum: ['encrypt', 'decrypt'], default: 'encrypt' }, description: 'Case-insensitive; other values → 400.' },
  },
  schemas: {
    Permission: permission,
    Role: role,
    User: user,
    GroupRef: groupRef,
    GroupRefInput: groupRefInput,
    Provider: provider,
    Classification: classification,
    Configuration: configuration,
    EncryptionConfiguration: encryptionConfiguration,
    ProviderConfiguration: providerConfiguration,
    ApiKey: shape(apiKeyFields, [], { description: 'An API key as listed (spec 2.8). The key itself is never part of it.' }),
    ApiKeyCreated: shape({ ...apiKeyFields, key: apiKeySecret }, [], { description: 'A new API key: the listing shape plus `key`, shown only in this response.' }),
    ApiKeyRef: apiKeyRef,
    ApiKeySecret: shape({ key: apiKeySecret }),
    KeyVersion: keyVersion,
    ActivityLogEntry: activityLogEntry,
    ApiLogEntry: apiLogEntry,
    UsageLogEntry: usageLogEntry,
    UnifiedLogEntry: unifiedLogEntry,
    PageEnvelope: pageEnvelope,
    ClassificationPage: pageOf('Classification'),
    ConfigurationPage: pageOf('Configuration'),
    UserPage: pageOf('User'),
    UnifiedLogPage: logPageOf('UnifiedLogEntry'),
    ActivityLogPage: logPageOf('ActivityLogEntry'),
    ApiLogPage: logPageOf('ApiLogEntry'),
    UsageLogPage: logPageOf('UsageLogEntry'),
    AccessToken: shape({
      access_token: { type: 'string', pattern: '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$', description: 'An HS256 JWT.' },
      token_type: { const: 'bearer' },
      expires_in: { type: 'integer', minimum: 1, description: 'Seconds.' },
    }),
    Snapshot: shape(
      {
        digest: sha256Hex,
        format: { const: 2 },
        mac: { ...sha256Hex, description: 'HMAC-SHA256, under a key derived from the master key (HKDF, info `svc snapshot v1`), of the canonical JSON of this body without `mac`.' },
        sections: shape(Object.fromEntries(SNAPSHOT_SECTIONS.map((name) => [name, sha256Hex]))),
        state: shape(Object.fromEntries(SNAPSHOT_SECTIONS.map((name) => [name, arrayOf({ type: 'object' })]))),
        version: { type: 'integer', minimum: 1 },
      },
      [],
      {
        description:
          'The state a replica applies: every section with its SHA-256, all covered by `digest`, the whole body by `mac` ' +
          '(docs/replication.md, "The snapshot format"). Users carry no password hash.',
      },
    ),
    SyncLogBatch: {
      type: 'object',
      additionalProperties: false,
      required: ['replica', 'instance'],
      description: 'At most `sync.max_batch` rows (default 5,000), api and usage together: more is 413.',
      properties: {
        replica: { type: 'string', minLength: 1, maxLength: 128, description: 'The replica\'s name, shown in the logs. No control characters or bidi overrides.' },
        instance: { type: 'string', pattern: '^[0-9a-f]{32}$', examples: ['5f0c6f1e9b2d4a7c8e3f1a2b3c4d5e6f'], description: 'The replica\'s instance id: 128 random bits made at its first start. Rows are kept once per (instance, id).' },
        api: arrayOf(schemaRef('SyncApiLogRow')),
        usage: arrayOf(schemaRef('SyncUsageLogRow')),
      },
    },
    SyncApiLogRow: { ...syncApiRow, description: "An api log row as the replica's store holds it." },
    SyncUsageLogRow: { ...syncUsageRow, description: "A usage log row as the replica's store holds it." },
    SyncLogsReceived: shape({ stored: count, duplicates: { ...count, description: 'Rows received before (a retried batch): skipped.' } }),
    Health: shape({ status: { const: 'ok' } }),
    Ready: shape({ status: { const: 'ready' } }),
    Error: error,
    ValidationError: validationError,
    ClassificationCreate: { type: 'object', required: ['name', 'bg_color', 'fg_color'], properties: classificationFields, ...GROUPS_NEED_CONTAINER, ...DEFAULT_MASK_RULE },
    ClassificationUpdate: {
      type: 'object',
      description: 'Any subset of the create fields; a field that is sent is checked as on create.',
      properties: classificationFields,
      ...GROUPS_NEED_CONTAINER,
      ...DEFAULT_MASK_RULE,
    },
    RevealGrant: revealGrant,
    RevealCounts: shape(
      {
        plain: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
        mask: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
        redact: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
        token: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
      },
      [],
      { description: 'Values a decrypt showed at each level (DESIGN §14), as `x-svc-reveal` says.' },
    ),
    RevealGrantInput: revealGrantInput,
    ConfigurationCreate: {
      type: 'object',
      required: ['name'],
      properties: {
        name: { type: 'string', minLength: 1, maxLength: 64 },
        type: { type: 'string', enum: ['encryption', 'provider'], description: 'Default: `provider` when `provider` is given, else `encryption`.' },
        provider: { type: 'string', enum: ['google'], description: 'Required for (and only for) provider configurations.' },
        values: configurationValues,
      },
    },
    ConfigurationUpdate: {
      type: 'object',
      description: '`type` and `provider` cannot change (sending them back unchanged is fine).',
      properties: { name: { type: 'string', minLength: 1, maxLength: 64 }, type: text, provider: text, values: configurationValues },
    },
    KeyDestroy: {
      type: 'object',
      required: ['confirm'],
      properties: {
        confirm: { type: 'string', description: 'Exactly `<configuration name>/v<version>`.' },
        force: {
          type: 'boolean',
          default: false,
          description: '`true` destroys a version that was current less than `keys.destroy_after` ago (409 otherwise). A JSON boolean only.',
        },
      },
    },
    ApiKeyCreate: {
      type: 'object',
      required: ['name'],
      properties: {
        name: { type: 'string', minLength: 1, maxLength: 64 },
        user_id: { ...id, description: 'Whose key it is; default the acting user. Another user needs `users.manage`.' },
        permissions: arrayOf({ type: 'string', enum: [...PERMISSIONS] }, { maxItems: PERMISSIONS.length, description: "A scope within the user's permissions; empty: all of them." }),
        configurations: arrayOf(uuid, { maxItems: 256, description: 'Configuration UUIDs the key is limited to; empty: all.' }),
      },
    },
    UserCreate: {
      type: 'object',
      required: ['name', 'email'],
      properties: {
        name: { type: 'string', minLength: 1, maxLength: 255 },
        email: { ...email, maxLength: 255 },
        password: { type: 'string', minLength: 12, maxLength: 1024, description: 'Without one the user cannot log in.' },
        roles: arrayOf({ anyOf: [{ type: 'string', enum: [...BUILT_IN_ROLES] }, id] }, { maxItems: 16, description: 'Role names or ids; none the caller could not grant itself.' }),
      },
    },
    Login: { type: 'object', required: ['email', 'password'], properties: { email: { ...email, maxLength: 255 }, password: { type: 'string', minLength: 1, maxLength: 1024 } } },
    UnauthorizedError: errorSaying('Unauthorized.'),
    ForbiddenError: errorSaying(FORBIDDEN, ACTION_UNAUTHORIZED),
    NotFoundError: errorSaying('Not found.'),
    DataForbiddenError: {
      allOf: [
        schemaRef('Error'),
        {
          type: 'object',
          properties: { message: { anyOf: [{ enum: [FORBIDDEN, ACTION_UNAUTHORIZED] }, { type: 'string', pattern: '^The destination host .+ is not allowed for this configuration\\.$' }, { enum: [DESTINATION_PATH_NOT_ALLOWED] }] } },
        },
      ],
    },
  },
  responses: {
    NoContent: { description: 'Done; no body.', headers: REQUEST_ID_HEADERS },
    BadRequest: errorResponse('The body is not valid JSON, not a JSON object, or a header cannot be used.', schemaRef('Error')),
    Unauthorized: errorResponse('The API key is missing, unknown or revoked, or the bearer token is invalid or expired.', schemaRef('UnauthorizedError')),
    Forbidden: errorResponse(
      "The acting user (or the key's scope) lacks the permission (`User does not have the right permissions.`), the configuration is outside the key's scope, " +
        'a data-plane key was sent with a bearer token, or the action would give a credential more than the caller has (`This action is unauthorized.`).',
      schemaRef('ForbiddenError'),
    ),
    DataForbidden: errorResponse(
      "As Forbidden; also a token whose classification does not admit the acting user, or no longer exists (nothing is decrypted), or a destination outside the configuration's `destinations`.",
      schemaRef('DataForbiddenError'),
    ),
    NotFound: errorResponse('No such resource.', schemaRef('NotFoundError')),
    ControlPlaneOnly: errorResponse(
      'A data request sent to a control plane whose store is PostgreSQL (`store.url`): those instances serve the management API, login and replication; the sidecars serve the data.',
      errorSaying('This control plane serves no data requests: send them to a sidecar.'),
    ),
    ManagedByControlPlane: errorResponse('State comes from a control plane: management writes and password logins are refused.', errorSaying('Managed by the control plane.')),
    KeyDestroyConflict: errorResponse(
      'A replica refuses management writes; or the version was current less than `keys.destroy_after` ago and the request did not say `force: true`.',
      {
        allOf: [
          schemaRef('Error'),
          {
            type: 'object',
            properties: {
              message: {
                anyOf: [
                  { const: 'Managed by the control plane.' },
                  { type: 'string', pattern: '^Key version [1-9][0-9]* was current less than keys\\.destroy_after ago and may still be in use: it can be destroyed from .+, or now with force: true\\.$' },
                ],
              },
            },
          },
        ],
      },
    ),
    KeyDestroyed: errorResponse(
      'The key version the request encrypted with was destroyed before it finished: no token is returned, and a streamed body is aborted instead.',
      errorSaying('The key version was destroyed during the request.'),
    ),
    PayloadTooLarge: errorResponse('The body is larger than the limit.', schemaRef('Error')),
    UnsupportedMediaType: errorResponse('The body is not JSON.', errorSaying('The request body must be JSON (Content-Type: application/json).')),
    ValidationFailed: errorResponse('Validation failed.', schemaRef('ValidationError')),
    TooManyRequests: errorResponse('Too many attempts.', errorSaying('Too many requests.'), { ...REQUEST_ID_HEADERS, 'retry-after': { $ref: '#/components/headers/RetryAfter' } }),
    MethodNotAllowed: errorResponse('The path exists for other methods only; `Allow` lists them.', errorSaying('Method not allowed.'), {
      ...REQUEST_ID_HEADERS,
      allow: { description: 'The methods the path takes.', required: true, schema: { type: 'string', pattern: '^[A-Z]+(, [A-Z]+)*$' } },
    }),
    RequestTimeout: errorResponse(
      "The request's headers or body did not arrive within `server.headers_timeout` or `server.request_timeout`. Sent by the HTTP parser before any route runs: no request id; the connection is closed.",
      errorSaying('Request timeout.'),
      {},
    ),
    RequestHeaderFieldsTooLarge: errorResponse(
      'The request\'s headers exceed `server.max_header_size`. Sent by the HTTP parser before any route runs: no request id; the connection is closed.',
      errorSaying('Request header fields too large.'),
      {},
    ),
    ServerError: errorResponse('An unexpected error; the stack is logged with the request id.', errorSaying('Server error.')),
    BadGateway: errorResponse('The destination could not be reached, or its answer could not be transformed.', schemaRef('Error')),
    GatewayTimeout: errorResponse('The destination did not answer in time.', errorSaying('The destination did not answer in time.')),
    NotReady: errorResponse('Not ready to take traffic.', errorSaying('The service is not ready.')),
    RouteUnavailable: errorResponse(
      'The route names a configuration or classification that is not in the store (deleted or renamed while running): nothing is sent on.',
      errorSaying('The route is not available.'),
    ),
  },
};

export const SORTS: readonly string[] = CLASSIFICATION_SORTS;
export const DIRECTIONS: readonly string[] = SORT_DIRECTIONS;
export { FORBIDDEN, ACTION_UNAUTHORIZED };
