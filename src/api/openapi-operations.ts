/**
 * The operations of the management API in the OpenAPI document (src/api/openapi.ts), and
 * the small builders every operation of the document is written with: each names its
 * permission (`x-permission`) and every status it can answer, success and errors alike.
 */
import type { Permission } from '../config/schema.ts';
import { DIRECTIONS, parameterRef, REQUEST_ID_HEADERS, responseRef, schemaRef, SORTS, type JsonObject } from './openapi-components.ts';

type Status = 200 | 201 | 204 | 400 | 401 | 403 | 404 | 408 | 409 | 413 | 415 | 421 | 422 | 429 | 431 | 500 | 502 | 503 | 504;

const ERROR_RESPONSES: Partial<Record<Status, string>> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  408: 'RequestTimeout',
  409: 'ManagedByControlPlane',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  421: 'ControlPlaneOnly',
  422: 'ValidationFailed',
  429: 'TooManyRequests',
  431: 'RequestHeaderFieldsTooLarge',
  500: 'ServerError',
  502: 'BadGateway',
  503: 'NotReady',
  504: 'GatewayTimeout',
};

export function errors(...statuses: Status[]): Record<string, JsonObject> {
  const out: Record<string, JsonObject> = {};
  for (const status of statuses) out[String(status)] = responseRef(ERROR_RESPONSES[status] ?? 'ServerError');
  return out;
}

/** What a management endpoint can answer besides its success, by its kind. */
const READ = errors(401, 403, 500);
const LIST = errors(401, 403, 422, 500);
const ITEM = errors(401, 403, 404, 500);
const CREATE = errors(400, 401, 403, 409, 413, 415, 422, 500);
const UPDATE = errors(400, 401, 403, 404, 409, 413, 415, 422, 500);
const ACTION = errors(401, 403, 404, 409, 500);

export const json = (description: string, schema: JsonObject): JsonObject => ({
  description,
  headers: REQUEST_ID_HEADERS,
  content: { 'application/json': { schema } },
});

const body = (schema: string, description?: string): JsonObject => ({
  required: true,
  ...(description === undefined ? {} : { description }),
  content: { 'application/json': { schema: schemaRef(schema) } },
});

/** The mode-dependent permission of `/proxy`: by `x-svc-mode`. */
type ModePermission = { readonly encrypt: Permission; readonly decrypt: Permission };

interface OperationSpec {
  readonly id: string;
  readonly tag: string;
  readonly summary: string;
  readonly description?: string;
  /** null: any valid API key (or, with `security: 'none'`, no key at all). */
  readonly permission: Permission | ModePermission | null;
  readonly parameters?: readonly JsonObject[];
  readonly requestBody?: JsonObject;
  readonly responses: Record<string, JsonObject>;
  /** `none`: no credentials (health, this document, egress routes); `bearer`: an API key and a bearer token, both. */
  readonly security?: 'none' | 'bearer';
}

/** What the HTTP parser may answer to any request, before a route sees it. */
const PARSER_ERRORS = errors(408, 431);

/**
 * What any request may get when its instance cannot read the state it needs: a control
 * plane on PostgreSQL whose database is unreachable. An operation that documents a 503 of
 * its own keeps it.
 */
const STATE_UNREADABLE = errors(503);

/** Statuses in numeric order, `default` last: how a reader scans them. */
function sortedResponses(responses: Record<string, JsonObject>): Record<string, JsonObject> {
  const rank = (status: string) => (status === 'default' ? 1000 : Number.parseInt(status.replace('XX', '00'), 10));
  return Object.fromEntries(Object.entries(responses).sort(([a], [b]) => rank(a) - rank(b)));
}

export function op(spec: OperationSpec): JsonObject {
  return {
    operationId: spec.id,
    tags: [spec.tag],
    summary: spec.summary,
    ...(spec.description === undefined ? {} : { description: spec.description }),
    'x-permission': spec.permission,
    ...(spec.security === 'none' ? { security: [] } : spec.security === 'bearer' ? { security: [{ apiKey: [], bearer: [] }] } : {}),
    parameters: [...(spec.parameters ?? []), parameterRef('RequestId')],
    ...(spec.requestBody === undefined ? {} : { requestBody: spec.requestBody }),
    responses: sortedResponses({ ...STATE_UNREADABLE, ...spec.responses, ...PARSER_ERRORS }),
  };
}

// ---------------------------------------------------------------------------------------
// Management API

const PAGE = [parameterRef('Page'), parameterRef('PerPage')];
const LOG_FILTERS = [parameterRef('LogUser'), parameterRef('LogUserId'), parameterRef('LogRequestId'), ...PAGE, parameterRef('LogCursor')];

const classificationPaths: Record<string, JsonObject> = {
  '/api/v3/classifications': {
    get: op({
      id: 'listClassifications',
      tag: 'classifications',
      summary: 'List classifications',
      permission: 'classifications.view',
      parameters: [
        { name: 'search', in: 'query', schema: { type: 'string', maxLength: 255 }, description: 'A case-insensitive substring of the name, slug or description.' },
        { name: 'sort', in: 'query', schema: { type: 'string', enum: [...SORTS], default: 'name' } },
        { name: 'direction', in: 'query', schema: { type: 'string', enum: [...DIRECTIONS], default: 'asc' } },
        { name: 'user', in: 'query', schema: { type: 'integer', minimum: 1 }, description: 'Classifications that list this user id.' },
        { name: 'roles', in: 'query', schema: { type: 'string', pattern: '^[0-9]+(,[0-9]+)*$', examples: ['1,2'] }, description: 'Role ids, comma-separated: classifications listing any of them.' },
        { name: 'roles[]', in: 'query', style: 'form', explode: true, schema: { type: 'array', items: { type: 'integer', minimum: 1 } }, description: 'Role ids, one per parameter.' },
        { name: 'providers', in: 'query', schema: { type: 'string' }, description: 'Provider configuration UUIDs (not integers), comma-separated.' },
        { name: 'providers[]', in: 'query', style: 'form', explode: true, schema: { type: 'array', items: { type: 'string', format: 'uuid' } }, description: 'Provider configuration UUIDs, one per parameter.' },
        ...PAGE,
      ],
      responses: { '200': json('A page of classifications.', schemaRef('ClassificationPage')), ...LIST },
    }),
    post: op({
      id: 'createClassification',
      tag: 'classifications',
      summary: 'Create a classification',
      description:
        'The slug is the lowercased name with each run of other characters than `a-z0-9` turned into `-` (`-2`, `-3`… on collision). ' +
        'Members (`users`, `roles`, provider `gws_groups`) decide who may decrypt; one that lists none admits nobody. Giving it members needs a caller who could decrypt it itself (`data.decrypt`, no configurations scope, admitted by those members), else 403 `This action is unauthorized.`; owners are exempt, and the activity log says so. Names and descriptions refuse control and bidirectional formatting characters (422).',
      permission: 'classifications.create',
      requestBody: body('ClassificationCreate'),
      responses: { '201': json('The created classification.', schemaRef('Classification')), ...CREATE },
    }),
  },
  '/api/v3/classifications/{id}': {
    parameters: [parameterRef('ClassificationId')],
    get: op({
      id: 'getClassification',
      tag: 'classifications',
      summary: 'Show a classification',
      permission: 'classifications.view',
      responses: { '200': json('The classification.', schemaRef('Classification')), ...ITEM },
    }),
    patch: op({
      id: 'updateClassification',
      tag: 'classifications',
      summary: 'Change a classification',
      description:
        'Changing its members (`users`, `roles`, `provider_container_id`, `gws_groups`) needs a caller admitted to it as it is, ' +
        'with `data.decrypt` and no configurations scope, else 403 `This action is unauthorized.`; owners are exempt, and the activity log says so. ' +
        'A classification whose last member goes admits nobody.',
      permission: 'classifications.update',
      requestBody: body('ClassificationUpdate'),
      responses: { '200': json('The changed classification.', schemaRef('Classification')), ...UPDATE },
    }),
    delete: op({
      id: 'deleteClassification',
      tag: 'classifications',
      summary: 'Delete a classification',
      description: 'Tokens that carry it can no longer be decrypted by anyone: ids are never reused, so no later classification takes them over.',
      permission: 'classifications.delete',
      responses: { '204': responseRef('NoContent'), ...ACTION },
    }),
  },
};

const configurationPaths: Record<string, JsonObject> = {
  '/api/v3/configurations': {
    get: op({
      id: 'listConfigurations',
      tag: 'configurations',
      summary: 'List configurations',
      description: "A key limited to some configurations lists only those.",
      permission: 'configurations.view',
      parameters: PAGE,
      responses: { '200': json('A page of configurations.', schemaRef('ConfigurationPage')), ...LIST },
    }),
    post: op({
      id: 'createConfiguration',
      tag: 'configurations',
      summary: 'Create a configuration',
      description: 'An encryption configuration gets key version 1 and, unless `values` gives one, a generated 16-character `proxy_slug`.',
      permission: 'configurations.create',
      requestBody: body('ConfigurationCreate'),
      responses: { '201': json('The created configuration.', schemaRef('Configuration')), ...CREATE },
    }),
  },
  '/api/v3/configurations/{id}': {
    parameters: [parameterRef('ConfigurationId')],
    get: op({
      id: 'getConfiguration',
      tag: 'configurations',
      summary: 'Show a configuration',
      permission: 'configurations.view',
      responses: { '200': json('The configuration.', schemaRef('Configuration')), ...ITEM },
    }),
    put: op({
      id: 'updateConfiguration',
      tag: 'configurations',
      summary: 'Change a configuration',
      permission: 'configurations.update',
      requestBody: body('ConfigurationUpdate'),
      responses: { '200': json('The changed configuration.', schemaRef('Configuration')), ...UPDATE },
    }),
    delete: op({
      id: 'deleteConfiguration',
      tag: 'configurations',
      summary: 'Delete a configuration',
      description: 'Its keys go with it: its tokens can never be decrypted again.',
      permission: 'configurations.delete',
      responses: { '204': responseRef('NoContent'), ...ACTION },
    }),
  },
  '/api/v3/configurations/{id}/rotate': {
    parameters: [parameterRef('ConfigurationId')],
    post: op({
      id: 'rotateConfigurationKey',
      tag: 'configurations',
      summary: 'Rotate the key of an encryption configuration',
      description: 'Adds key version N+1; new tokens use it at once, older versions keep decrypting down to `min_decryption_version`. 422 for a provider configuration.',
      permission: 'configurations.rotate',
      responses: { '200': json('The configuration with its new key version.', schemaRef('Configuration')), ...errors(401, 403, 404, 409, 422, 500) },
    }),
  },
  '/api/v3/configurations/{id}/keys': {
    parameters: [parameterRef('ConfigurationId')],
    get: op({
      id: 'listConfigurationKeys',
      tag: 'configurations',
      summary: 'List the key versions of an encryption configuration',
      description: 'A plain array, oldest first. 422 for a provider configuration.',
      permission: 'configurations.view',
      responses: { '200': json('The key versions.', { type: 'array', items: schemaRef('KeyVersion') }), ...errors(401, 403, 404, 422, 500) },
    }),
  },
  '/api/v3/configurations/{id}/keys/{version}/destroy': {
    parameters: [parameterRef('ConfigurationId'), parameterRef('KeyVersion')],
    post: op({
      id: 'destroyConfigurationKey',
      tag: 'configurations',
      summary: 'Destroy a key version (crypto-shredding)',
      description:
        'Irreversible: tokens of that version can never be decrypted again. The current version cannot be destroyed (rotate first), nor one that was current ' +
        'less than `keys.destroy_after` ago (409) unless the body says `force: true`.',
      permission: 'configurations.rotate',
      requestBody: body('KeyDestroy'),
      responses: { '200': json('The destroyed key version.', schemaRef('KeyVersion')), ...UPDATE, '409': responseRef('KeyDestroyConflict') },
    }),
  },
};

const apiKeyPaths: Record<string, JsonObject> = {
  '/api/v3/api-keys': {
    get: op({
      id: 'listApiKeys',
      tag: 'api-keys',
      summary: 'List API keys',
      description: 'A plain array, not a page envelope (spec 4.10). A key limited to some configurations lists only the keys limited within its scope (and gets 403 for any other key on show, revoke and rotate).',
      permission: 'api-keys.view',
      responses: { '200': json('Every API key.', { type: 'array', items: schemaRef('ApiKey') }), ...READ },
    }),
    post: op({
      id: 'createApiKey',
      tag: 'api-keys',
      summary: 'Create an API key',
      description:
        'No key may mint a key that can do more than itself (403 `This action is unauthorized.`): no permission the caller lacks, ' +
        "no configuration outside the caller's scope, nothing to decrypt that the caller cannot (classification admission through the key user's " +
        'id, roles and provider groups). Owners are exempt from the last, and the activity log says so.',
      permission: 'api-keys.create',
      requestBody: body('ApiKeyCreate'),
      responses: { '201': json('The key, with its secret shown this once.', schemaRef('ApiKeyCreated')), ...CREATE },
    }),
  },
  '/api/v3/api-keys/{id}': {
    parameters: [parameterRef('ApiKeyId')],
    get: op({
      id: 'getApiKey',
      tag: 'api-keys',
      summary: 'Show an API key',
      permission: 'api-keys.view',
      responses: { '200': json('The API key.', schemaRef('ApiKey')), ...ITEM },
    }),
  },
  '/api/v3/api-keys/{id}/revoke': {
    parameters: [parameterRef('ApiKeyId')],
    post: op({
      id: 'revokeApiKey',
      tag: 'api-keys',
      summary: 'Revoke an API key',
      description: 'The key gets 401 from its very next request. Idempotent.',
      permission: 'api-keys.revoke',
      responses: { '204': responseRef('NoContent'), ...ACTION },
    }),
  },
  '/api/v3/api-keys/{id}/rotate': {
    parameters: [parameterRef('ApiKeyId')],
    post: op({
      id: 'rotateApiKey',
      tag: 'api-keys',
      summary: 'Replace the secret of an API key',
      description:
        'The old secret fails from the next request on. 422 for a revoked key. Only a caller who could have created the key may rotate it ' +
        '(403 `This action is unauthorized.`, as for create).',
      permission: 'api-keys.rotate',
      responses: { '200': json('The new secret, shown this once.', schemaRef('ApiKeySecret')), ...errors(401, 403, 404, 409, 422, 500) },
    }),
  },
};

const userPaths: Record<string, JsonObject> = {
  '/api/v3/users': {
    get: op({
      id: 'listUsers',
      tag: 'users',
      summary: 'List users',
      permission: 'users.view',
      parameters: PAGE,
      responses: { '200': json('A page of users.', schemaRef('UserPage')), ...LIST },
    }),
    post: op({
      id: 'createUser',
      tag: 'users',
      summary: 'Create a user',
      description:
        'Nobody creates a user who could do more than the caller (403 `This action is unauthorized.`): no permission the caller lacks, and nothing ' +
        "to decrypt that the caller cannot (classifications admitting the user's roles, or provider groups listing its email; a caller limited to " +
        'some configurations cannot create a user who decrypts). Owners are exempt from the second, and the activity log says so. The email is stored ' +
        'after NFKC normalisation and case folding; one that is taken in that form is 422.',
      permission: 'users.manage',
      requestBody: body('UserCreate'),
      responses: { '201': json('The created user.', schemaRef('User')), ...CREATE },
    }),
  },
  '/api/v3/roles': {
    get: op({
      id: 'listRoles',
      tag: 'users',
      summary: 'List the built-in roles',
      description: 'A plain array of the four built-in roles with their permissions.',
      permission: 'roles.view',
      responses: { '200': json('The roles.', { type: 'array', items: schemaRef('Role') }), ...READ },
    }),
  },
};

/** Every log list spans every configuration. */
const LOG_SCOPE = 'A key limited to some configurations gets 403: the list spans every configuration, in its rows and in the configuration records it shows.';

const logPaths: Record<string, JsonObject> = {
  '/api/v3/logs/unified': {
    get: op({
      id: 'listUnifiedLogs',
      tag: 'logs',
      summary: 'Activity, api and usage logs together, newest first',
      description: LOG_SCOPE,
      permission: 'logs.view',
      parameters: [
        { name: 'log_type', in: 'query', schema: { type: 'string', enum: ['activity', 'api', 'usage'] }, description: 'One kind only.' },
        { name: 'type', in: 'query', schema: { type: 'string', enum: ['activity', 'api', 'usage'] }, description: 'Same as `log_type`; given together they must agree.' },
        ...LOG_FILTERS,
      ],
      responses: { '200': json('A page of log entries.', schemaRef('UnifiedLogPage')), ...LIST },
    }),
  },
  '/api/v3/logs/activity': {
    get: op({
      id: 'listActivityLogs',
      tag: 'logs',
      summary: 'Management actions and logins, newest first',
      description: LOG_SCOPE,
      permission: 'logs.view',
      parameters: LOG_FILTERS,
      responses: { '200': json('A page of activity entries.', schemaRef('ActivityLogPage')), ...LIST },
    }),
  },
  '/api/v3/logs/api': {
    get: op({
      id: 'listApiLogs',
      tag: 'logs',
      summary: 'Every /api and /proxy request, newest first',
      description: LOG_SCOPE,
      permission: 'logs.view',
      parameters: LOG_FILTERS,
      responses: { '200': json('A page of api entries.', schemaRef('ApiLogPage')), ...LIST },
    }),
  },
  '/api/v3/logs/usage': {
    get: op({
      id: 'listUsageLogs',
      tag: 'logs',
      summary: 'Every encrypt and decrypt, newest first',
      description: LOG_SCOPE,
      permission: 'logs.view',
      parameters: LOG_FILTERS,
      responses: { '200': json('A page of usage entries.', schemaRef('UsageLogPage')), ...LIST },
    }),
  },
};

const authPaths: Record<string, JsonObject> = {
  '/api/v2/auth/login': {
    post: op({
      id: 'login',
      tag: 'auth',
      summary: 'Exchange email and password for an access token',
      description:
        'Needs a valid API key (no permission). Wrong credentials: 401 `Unauthenticated.`; a disabled user, a data-plane key or a ' +
        'replicas\' key: 403 `This action is unauthorized.`; on a replica: 409 `Managed by the control plane.`; 5 failures per email ' +
        'in 15 minutes: 429.',
      permission: null,
      requestBody: body('Login'),
      responses: {
        '200': json('Logged in.', schemaRef('AccessToken')),
        ...errors(400),
        '401': {
          description: 'No valid API key (`Unauthorized.`), or a wrong email or password (`Unauthenticated.`).',
          headers: REQUEST_ID_HEADERS,
          content: { 'application/json': { schema: { allOf: [schemaRef('Error'), { type: 'object', properties: { message: { type: 'string', enum: ['Unauthorized.', 'Unauthenticated.'] } } }] } } },
        },
        ...errors(403, 409, 413, 415, 422, 429, 500),
      },
    }),
  },
  '/api/v2/auth/logout': {
    post: op({
      id: 'logout',
      tag: 'auth',
      summary: 'Revoke the bearer access token of the request',
      description: 'Needs the API key and the bearer token to revoke; without a bearer token: 401.',
      permission: null,
      security: 'bearer',
      responses: { '204': responseRef('NoContent'), ...errors(401, 403, 500) },
    }),
  },
  '/api/v2/auth/userdetails': {
    get: op({
      id: 'getUserDetails',
      tag: 'auth',
      summary: 'The acting user',
      description: "The bearer token's user, else the API key's user, with roles and permissions.",
      permission: null,
      responses: { '200': json('The acting user.', schemaRef('User')), ...errors(401, 403, 500) },
    }),
  },
};

const syncPaths: Record<string, JsonObject> = {
  '/api/v3/sync/snapshot': {
    get: op({
      id: 'getSyncSnapshot',
      tag: 'sync',
      summary: 'The state snapshot replicas pull',
      description:
        'Gzip-encoded when `Accept-Encoding` allows it. Holds API key hashes and wrapped data keys, never password hashes; ' +
        'a key limited to configurations receives only those and what may name them (docs/replication.md, "Scoped replicas"). ' +
        '`sync.read` belongs to owner and administrator only.',
      permission: 'sync.read',
      parameters: [{ name: 'if-none-match', in: 'header', schema: { type: 'string' }, description: 'The ETag of the snapshot the replica holds, or `*`.' }],
      responses: {
        '200': {
          description: 'The current snapshot.',
          headers: { ...REQUEST_ID_HEADERS, etag: { $ref: '#/components/headers/ETag' } },
          content: { 'application/json': { schema: schemaRef('Snapshot') } },
        },
        '304': { description: '`If-None-Match` names the current snapshot.', headers: { ...REQUEST_ID_HEADERS, etag: { $ref: '#/components/headers/ETag' } } },
        ...READ,
      },
    }),
  },
  '/api/v3/sync/logs': {
    post: op({
      id: 'receiveSyncLogs',
      tag: 'sync',
      summary: "A replica's api and usage logs",
      description:
        'Idempotent: rows received before from the same instance (same instance and row id) are counted as duplicates and skipped. ' +
        'At most `sync.max_batch` rows (413 beyond) and 32 MiB. 422 when any row does not fit its schema, names an id that does not ' +
        'exist (or a configuration outside the key\'s scope), or is dated more than 10 minutes ahead of the control plane\'s clock; ' +
        'nothing of such a batch is stored.',
      permission: 'sync.write',
      requestBody: body('SyncLogBatch'),
      responses: { '200': json('Stored.', schemaRef('SyncLogsReceived')), ...CREATE },
    }),
  },
};

/** Every path of the management API, in the order the document lists them. */
export const managementPaths: Record<string, JsonObject> = {
  ...classificationPaths,
  ...configurationPaths,
  ...apiKeyPaths,
  ...userPaths,
  ...logPaths,
  ...authPaths,
  ...syncPaths,
};
