/**
 * The config file's one schema (DESIGN §11, §12). Every object is strict, so a misspelt key
 * is an error rather than a silently ignored setting; every default lives here. Durations
 * and sizes come out as milliseconds and bytes.
 *
 * Values that went through `${VAR}` interpolation are strings, so the numeric and boolean
 * fields also accept their canonical spelling as a string ("500", "true").
 */

import { postgresUrl } from '../store/postgres/url.ts';
import { z } from 'zod';
import { InvalidFieldPathsError } from '../errors.ts';
import { compileFieldPaths } from '../fields/paths.ts';
import { DEFAULT_LEVELS, DEFAULT_MASK_CHAR, MASK_KEEP_MAX, MASK_PRESETS, REVEAL_LEVELS } from '../fields/reveal.ts';
import { hasInvisibleText, hasUnsafeText } from '../store/identity-text.ts';
import { parseHostMatch } from '../util/canonical-host.ts';
import { crossCheck } from './cross-checks.ts';
import { fileProblems, storeIsNew } from './files.ts';
import { readCaFile, readJwksFile, readSecretFile, type Read } from './jwt-key-files.ts';
import { LISTEN_HINT, parseListen, portAloneMessage } from './listen.ts';
import { parseDuration, parseSize } from './units.ts';

/** DESIGN §9: roles are built in, the seed can only refer to them. */
export const BUILT_IN_ROLES = ['owner', 'administrator', 'developer', 'viewer'] as const;

/** DESIGN §9, plus `sync.*` for replication (docs/replication.md). */
export const PERMISSIONS = [
  'classifications.view',
  'classifications.create',
  'classifications.update',
  'classifications.delete',
  'configurations.view',
  'configurations.create',
  'configurations.update',
  'configurations.delete',
  'configurations.rotate',
  'data.encrypt',
  'data.decrypt',
  'logs.view',
  'api-keys.view',
  'api-keys.create',
  'api-keys.revoke',
  'api-keys.rotate',
  'users.view',
  'users.manage',
  'roles.view',
  'sync.read',
  'sync.write',
] as const;

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export const STATE_SOURCES = ['local', 'file', 'control-plane'] as const;

export const API_KEY_PATTERN = /^svc_[A-Za-z0-9]{40}$/;
export const PROXY_SLUG_PATTERN = /^[a-z0-9][a-z0-9-]{2,63}$/;
export const EGRESS_NAME_PATTERN = /^[a-z0-9][a-z0-9-]*$/;
const CLASSIFICATION_SLUG_PATTERN = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;
const COLOR_PATTERN = /^#[0-9A-Fa-f]{6}$/;

// ---------------------------------------------------------------------------------------
// Building blocks

const text = z.string().min(1, 'must not be empty');
// A message given as a string would also replace "required" for a missing email.
const email = z.email({ error: (issue) => (issue.input === undefined ? 'required' : 'expected an email address') });
const role = z.enum(BUILT_IN_ROLES);
const color = z.string().regex(COLOR_PATTERN, 'expected a colour like #aa0000');
const apiKey = z.string().regex(API_KEY_PATTERN, 'expected svc_ followed by 40 letters or digits');

const httpUrl = z.string().refine(isHttpUrl, 'expected an absolute http(s) URL');

function isHttpUrl(value: string): boolean {
  const url = URL.parse(value);
  return url !== null && (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
}

/**
 * `listen: 8080` is a YAML number, which would otherwise get zod's "expected string": the
 * operator needs to hear that a host is missing, as for the string "8080".
 */
function listenAddress(or = '') {
  return z
    .string({
      error: (issue) => {
        if (issue.input === undefined) return undefined;
        return `${typeof issue.input === 'number' ? portAloneMessage(issue.input) : `${LISTEN_HINT}, got ${JSON.stringify(issue.input)}`}${or}`;
      },
    })
    .superRefine((value, ctx) => {
      if (or !== '' && value === 'off') return;
      try {
        parseListen(value);
      } catch (error) {
        ctx.addIssue({ code: 'custom', message: `${(error as Error).message}${or}` });
      }
    });
}

const listen = listenAddress();
const adminListen = listenAddress('; or "off" to disable the admin listener');

function withUnit(parse: (input: unknown) => number, fallback: string, min: number) {
  return z
    .unknown()
    .transform((input, ctx) => {
      try {
        const value = parse(input);
        if (value >= min) return value;
        ctx.addIssue({ code: 'custom', message: 'must be greater than 0' });
      } catch (error) {
        ctx.addIssue({ code: 'custom', message: (error as Error).message });
      }
      return z.NEVER;
    })
    .prefault(fallback);
}

/** Milliseconds. `positive` for intervals where 0 would spin or expire at once. */
function duration(fallback: string, options: { positive?: boolean } = {}) {
  return withUnit(parseDuration, fallback, options.positive === true ? 1 : 0);
}

/** Bytes; a limit of 0 would refuse everything, so sizes are positive. */
function size(fallback: string) {
  return withUnit(parseSize, fallback, 1);
}

function wholeNumber(min: number) {
  return z.preprocess(
    (value) => (typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : value),
    z.number().int().min(min),
  );
}

/**
 * Field paths (DESIGN §6), compiled here only to be checked: a path the data plane could
 * not compile is reported with the file's other problems, at its index.
 */
const fieldPaths = z.array(text).superRefine((paths, ctx) => {
  let valid = true;
  paths.forEach((path, index) => {
    const problem = fieldPathProblem(path);
    if (problem !== undefined) {
      valid = false;
      ctx.addIssue({ code: 'custom', path: [index], message: problem });
    }
  });
  // Limits that apply to the list as a whole (number of paths, total length).
  if (valid) {
    const problem = fieldPathProblem(paths);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  }
});

function fieldPathProblem(paths: string | readonly string[]): string | undefined {
  try {
    compileFieldPaths(paths);
    return undefined;
  } catch (error) {
    if (!(error instanceof InvalidFieldPathsError)) throw error;
    return error.message.replace(/^The x-svc-fields header is invalid: /, '').replace(/\.$/, '');
  }
}

const boolean = z.preprocess((value) => (value === 'true' ? true : value === 'false' ? false : value), z.boolean());

/**
 * `${VAR:-}` gives "", which for these optional settings means "not set" — so a file can
 * leave a value to the environment without forcing a placeholder.
 */
function emptyAsAbsent<T extends z.ZodType>(schema: T) {
  return z.preprocess((value) => (value === '' ? undefined : value), schema.optional());
}

/** URLs a replica may fail over between: a handful of instances, not a fleet. */
export const MAX_CONTROL_PLANE_URLS = 16;

/**
 * `state.control_plane.url`: one URL or a list of them (DESIGN §16), always a list once
 * parsed. Anything but a list goes through the single URL's schema, so its messages are
 * the ones a single URL has always had; a list is checked item by item with the same
 * rule. Two items naming one endpoint would make the failover rule try a dead instance
 * twice per round, so that is refused; the message never repeats a URL (it may hold
 * credentials).
 */
function controlPlaneUrls() {
  const one = httpUrl.transform((url) => [url]);
  const list = z
    .array(httpUrl)
    .min(1, 'list at least one URL')
    .max(MAX_CONTROL_PLANE_URLS, `list at most ${MAX_CONTROL_PLANE_URLS} URLs`)
    .superRefine((urls, ctx) => {
      const seen = new Map<string, number>();
      urls.forEach((url, index) => {
        const key = sameEndpointKey(url);
        if (key === null) return;
        const first = seen.get(key);
        if (first === undefined) seen.set(key, index);
        else ctx.addIssue({ code: 'custom', path: [index], message: `duplicate URL (also at state.control_plane.url.${first})` });
      });
    });
  return z.unknown().transform((input, ctx) => {
    const parsed = (Array.isArray(input) ? list : one).safeParse(input);
    if (parsed.success) return parsed.data as string[];
    for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
    return z.NEVER;
  });
}

/** What makes two base URLs one endpoint: the parsed URL, with or without a final slash; null for an item already refused. */
function sameEndpointKey(url: string): string | null {
  return URL.parse(url)?.href.replace(/\/+$/, '') ?? null;
}

// ---------------------------------------------------------------------------------------
// Sections

const serverSchema = z.strictObject({
  listen: listen.default('0.0.0.0:8080'),
  /** `"off"` disables the admin listener. */
  admin_listen: adminListen.default('127.0.0.1:9090'),
  /** Base for links in list responses; absent means "use the request's Host". No trailing slash. */
  public_url: emptyAsAbsent(httpUrl.transform((url) => url.replace(/\/+$/, ''))),
  body_limit: size('10mb'),
  headers_timeout: duration('10s'),
  request_timeout: duration('60s'),
  keep_alive_timeout: duration('5s'),
  drain_timeout: duration('10s'),
  max_header_size: size('16kb'),
  /** After the event loop has been idle this long, one full collection returns unused heap to the OS; 0 disables it. */
  idle_memory_release: duration('5s'),
});

const stateSchema = z.strictObject({
  source: z.enum(STATE_SOURCES).default('local'),
  // url and api_key are only required for source: control-plane (see cross-checks.ts),
  // so a file can keep the block around while running locally.
  control_plane: z
    .strictObject({
      url: emptyAsAbsent(controlPlaneUrls()),
      api_key: emptyAsAbsent(apiKey),
      poll_interval: duration('5s', { positive: true }),
      /** This replica's name in the control plane's logs; absent means the host name. */
      replica_name: emptyAsAbsent(text.max(128, 'must be at most 128 characters')),
      ship_interval: duration('5s', { positive: true }),
    })
    .optional(),
});

const seedUserSchema = z.strictObject({
  name: text,
  email,
  password: emptyAsAbsent(z.string()),
  roles: z.array(role).default([]),
  disabled: boolean.optional(),
});

const seedApiKeySchema = z.strictObject({
  name: text,
  /** Email of the user the key acts for. */
  user: email,
  /** Without one, `init`/first start generate a key and print it once. */
  key: emptyAsAbsent(apiKey),
  permissions: z.array(z.enum(PERMISSIONS)).default([]),
  /** Configuration names the key is limited to; empty means all. */
  configurations: z.array(text).default([]),
});

const providerGroupSchema = z.strictObject({
  id: text,
  name: text.optional(),
  email: email.optional(),
  members: z.array(email).default([]),
});

const seedConfigurationSchema = z
  .strictObject({
    name: text,
    type: z.enum(['encryption', 'provider']).optional(),
    provider: z.literal('google').optional(),
    proxy_slug: z.string().regex(PROXY_SLUG_PATTERN, 'expected 3-64 lowercase letters, digits or dashes, not starting with a dash').optional(),
    fields: fieldPaths.default([]),
    destinations: z.array(httpUrl).default([]),
    deterministic: boolean.default(false),
    min_decryption_version: wholeNumber(1).optional(),
    groups: z.array(providerGroupSchema).optional(),
  })
  // Same default as POST /v3/configurations (DESIGN §10).
  .transform((configuration) => ({
    ...configuration,
    type: configuration.type ?? (configuration.provider === undefined ? ('encryption' as const) : ('provider' as const)),
  }));

const groupRefSchema = z.strictObject({
  id: text,
  name: text.optional(),
  email: email.optional(),
});

/** A mask (DESIGN §14): a preset, or which characters to keep and what to write instead. */
const maskSchema = z.union([
  z.enum(MASK_PRESETS),
  z.strictObject({
    keep_first: wholeNumber(0).pipe(z.number().max(MASK_KEEP_MAX, `must be at most ${MASK_KEEP_MAX}`)).default(0),
    keep_last: wholeNumber(0).pipe(z.number().max(MASK_KEEP_MAX, `must be at most ${MASK_KEEP_MAX}`)).default(0),
    char: z
      .string()
      .refine((c) => [...c].length === 1 && !hasUnsafeText(c) && !hasInvisibleText(c), 'expected one visible character')
      .default(DEFAULT_MASK_CHAR),
  }),
]);

const revealGrantSchema = z
  .strictObject({
    to: z
      .strictObject({
        /** Emails, as the classification's `users`. */
        users: z.array(email).default([]),
        roles: z.array(role).default([]),
        /** Provider group ids. */
        groups: z.array(text).default([]),
      })
      .refine((to) => to.users.length + to.roles.length + to.groups.length > 0, 'must name at least one user, role or group'),
    level: z.enum(REVEAL_LEVELS),
    mask: maskSchema.optional(),
  })
  .superRefine((grant, ctx) => {
    if (grant.level === 'mask' && grant.mask === undefined) ctx.addIssue({ code: 'custom', path: ['mask'], message: 'required with level: mask' });
    if (grant.level !== 'mask' && grant.mask !== undefined) ctx.addIssue({ code: 'custom', path: ['mask'], message: 'applies only with level: mask' });
  });

const seedClassificationSchema = z.strictObject({
  name: text.max(32, 'must be at most 32 characters'),
  slug: z.string().regex(CLASSIFICATION_SLUG_PATTERN, 'expected lowercase letters and digits separated by single dashes').optional(),
  description: z.string().max(255, 'must be at most 255 characters').optional(),
  bg_color: color,
  fg_color: color,
  emoji: z.string().optional(),
  users: z.array(email).default([]),
  roles: z.array(role).default([]),
  providers: z
    .array(
      z.strictObject({
        /** Name of a provider configuration. */
        configuration: text,
        gws_groups: z.array(groupRefSchema).default([]),
      }),
    )
    .default([]),
  reveal: z.array(revealGrantSchema).default([]),
  default: z.enum(DEFAULT_LEVELS).default('deny'),
  default_mask: maskSchema.optional(),
}).superRefine((classification, ctx) => {
  if (classification.default === 'mask' && classification.default_mask === undefined) {
    ctx.addIssue({ code: 'custom', path: ['default_mask'], message: 'required with default: mask' });
  }
  if (classification.default !== 'mask' && classification.default_mask !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['default_mask'], message: 'applies only with default: mask' });
  }
});

const seedSchema = z.strictObject({
  users: z.array(seedUserSchema).default([]),
  api_keys: z.array(seedApiKeySchema).default([]),
  configurations: z.array(seedConfigurationSchema).default([]),
  classifications: z.array(seedClassificationSchema).default([]),
});

const transformSchema = z
  .strictObject({
    encrypt: fieldPaths.optional(),
    decrypt: fieldPaths.optional(),
    /** Classification id or slug, as in `x-svc-classification`. */
    classification: text.optional(),
  })
  // Reported even beside an unknown key in the same transform (only presence is read).
  .superRefine(
    (transform, ctx) => {
      if (typeof transform !== 'object' || transform === null) return;
      if (transform.encrypt !== undefined && transform.decrypt !== undefined) {
        ctx.addIssue({ code: 'custom', message: 'give encrypt or decrypt, not both' });
      } else if (transform.encrypt === undefined && transform.decrypt === undefined && transform.classification !== undefined) {
        ctx.addIssue({ code: 'custom', path: ['classification'], message: 'applies only with encrypt or decrypt' });
      }
    },
    { when: () => true },
  );

/** A route's `match`: an optional method and a path glob (relay routes and egress proxy routes). */
const routeMatchSchema = z.strictObject({
  method: z
    .string()
    .regex(/^[A-Za-z]+$/, 'expected an HTTP method such as POST')
    .transform((method) => method.toUpperCase())
    .optional(),
  path: z.string().startsWith('/', 'expected a path starting with /'),
});

const relayRouteSchema = z.strictObject({
  name: text.optional(),
  match: routeMatchSchema,
  configuration: text,
  request: transformSchema.optional(),
  response: transformSchema.optional(),
  /** The request's query-string parameters, named as form fields (DESIGN §15). */
  query: transformSchema.optional(),
});

const protectSchema = z.strictObject({
  /** Object keys never to reach the application in plaintext, at any depth, in any spelling. */
  keys: z.array(text.max(256, 'must be at most 256 characters')).min(1, 'list at least one key'),
  /** The encryption configuration that encrypts what the guard catches. */
  configuration: text,
  /** Classification id or slug bound into those tokens. */
  classification: text.optional(),
  on_plaintext: z.enum(['encrypt', 'refuse']).default('encrypt'),
  uninspectable: z.enum(['refuse', 'pass']).default('refuse'),
});

/** A claim name; a dotted one (`realm_access.roles`) also reads nested claims (docs/reveal.md). */
const claimName = text.max(256, 'must be at most 256 characters');

/** RFC 9110 §5.1 token; `x-svc-` headers are the relay's own and never reach it. */
const headerName = z
  .string()
  .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'expected an HTTP header name such as authorization')
  .transform((name) => name.toLowerCase())
  .refine((name) => !name.startsWith('x-svc-'), 'x-svc- headers are svc-sidecar\'s own: the relay removes them before anything reads them');

const httpsUrl = z.string().refine((value) => {
  const url = URL.parse(value);
  return url !== null && url.protocol === 'https:' && url.hostname !== '' && url.username === '' && url.password === '';
}, 'expected an absolute https URL without user:password@ (the keys that vouch for end users must not travel in the clear)');

/** The JWT key sources: exactly one is given. */
const JWT_KEY_SOURCES = ['secret_file', 'jwks_file', 'jwks_url'] as const;
/** Beyond this, a token that expired would still count (clock skew is seconds, not minutes). */
const MAX_CLOCK_TOLERANCE_MS = 5 * 60 * 1000;

/** DESIGN §14 "End users behind the relay": who the application's end user is, from the JWT it sends. */
const jwtIdentitySchema = z
  .strictObject({
    header: headerName.default('authorization'),
    secret_file: emptyAsAbsent(text),
    jwks_file: emptyAsAbsent(text),
    jwks_url: emptyAsAbsent(httpsUrl),
    jwks_ca_file: emptyAsAbsent(text),
    issuer: emptyAsAbsent(text),
    audience: emptyAsAbsent(z.union([text, z.array(text).min(1, 'list at least one audience')])),
    clock_tolerance: duration('30s').refine((ms) => ms <= MAX_CLOCK_TOLERANCE_MS, 'must be at most 5m'),
    user_claim: claimName.default('email'),
    roles_claim: emptyAsAbsent(claimName),
    groups_claim: emptyAsAbsent(claimName),
  })
  // Run even beside other problems in the block (only what is read is checked).
  .superRefine(
    (jwt, ctx) => {
      if (typeof jwt !== 'object' || jwt === null) return;
      const given = JWT_KEY_SOURCES.filter((key) => jwt[key] !== undefined);
      if (given.length === 0) ctx.addIssue({ code: 'custom', message: 'give one key source: secret_file (HS256), jwks_file or jwks_url (RS256, ES256)' });
      if (given.length > 1) ctx.addIssue({ code: 'custom', path: [given[1]!], message: `give one key source only: ${given.join(' and ')} are both set` });
      if (jwt.jwks_ca_file !== undefined && jwt.jwks_url === undefined) ctx.addIssue({ code: 'custom', path: ['jwks_ca_file'], message: 'applies only with jwks_url' });
      const check = (key: 'secret_file' | 'jwks_file' | 'jwks_ca_file', read: (path: string) => Read<unknown>) => {
        const path = jwt[key];
        if (typeof path !== 'string') return;
        const result = read(path);
        if (!result.ok) ctx.addIssue({ code: 'custom', path: [key], message: result.problem });
      };
      check('secret_file', readSecretFile);
      check('jwks_file', readJwksFile);
      check('jwks_ca_file', readCaFile);
    },
    { when: () => true },
  );

const relaySchema = z.strictObject({
  listen,
  upstream: httpUrl,
  protect: protectSchema.optional(),
  /** End users behind the relay, for reveal levels on response routes and the api log. */
  identity: z.strictObject({ jwt: jwtIdentitySchema }).optional(),
  routes: z.array(relayRouteSchema).default([]),
});

const egressSchema = z.strictObject({
  name: z.string().regex(EGRESS_NAME_PATTERN, 'expected lowercase letters, digits and dashes, not starting with a dash'),
  destination: httpUrl,
  configuration: text,
  request: transformSchema.optional(),
  /**
   * Absent: when the request decrypts, the answer's values at the paths it decrypted are
   * encrypted again (DESIGN §13); `passthrough` relays the answer as it is.
   */
  response: z.union([z.literal('passthrough'), transformSchema]).optional(),
  /** The request's query-string parameters, named as form fields (DESIGN §15). */
  query: transformSchema.optional(),
});

/**
 * An egress proxy host rule's `match` (DESIGN §15): a host name or IP literal, or
 * `*.domain` for its subdomains, with an optional `:port`; kept with its host in canonical
 * form (util/canonical-host.ts), as the hosts requests name are compared.
 */
const egressHostMatch = z.string().transform((value, ctx) => {
  const match = parseHostMatch(value);
  if (match !== null) return match.text;
  ctx.addIssue({ code: 'custom', message: 'expected a host such as api.stripe.com, 10.0.0.7, [2001:db8::1] or *.stripe.com, optionally with :port (1-65535)' });
  return z.NEVER;
});

const egressProxyRouteSchema = z.strictObject({
  match: routeMatchSchema,
  request: transformSchema.optional(),
  /** The request's query-string parameters, named as form fields (DESIGN §15). */
  query: transformSchema.optional(),
  /** As on egress routes: absent re-encrypts what the request decrypted (DESIGN §13). */
  response: z.union([z.literal('passthrough'), transformSchema]).optional(),
});

const egressProxyHostSchema = z.strictObject({
  match: egressHostMatch,
  configuration: text,
  routes: z.array(egressProxyRouteSchema).default([]),
  request: transformSchema.optional(),
  query: transformSchema.optional(),
  response: z.union([z.literal('passthrough'), transformSchema]).optional(),
});

/** DESIGN §15: the application's HTTP_PROXY / HTTPS_PROXY. */
const egressProxySchema = z.strictObject({
  listen,
  ca: z
    .strictObject({
      cert_file: text.default('./data/egress-ca.pem'),
      key_file: text.default('./data/egress-ca.key'),
    })
    .prefault({}),
  /** Extra CAs for vendors, beside the system's. */
  trust_file: text
    .superRefine((path, ctx) => {
      const read = readCaFile(path);
      if (!read.ok) ctx.addIssue({ code: 'custom', message: read.problem });
    })
    .optional(),
  unknown_hosts: z.enum(['deny', 'tunnel']).default('deny'),
  /** A blind tunnel with no bytes either way for this long is closed; 0 never closes one. */
  tunnel_idle_timeout: duration('5m'),
  hosts: z.array(egressProxyHostSchema).default([]),
});

// ---------------------------------------------------------------------------------------
// The store

/**
 * A SQLite file (`path`, the default) or a PostgreSQL database (`url`, for a control plane
 * of several instances; DESIGN §16), never both. Messages never quote the URL: it may hold
 * a password.
 */
const storeSchema = z
  .strictObject({
    path: text.optional(),
    url: text
      .refine((value) => postgresUrl(value) !== null, 'must be a postgres:// URL with a host (postgres://user:password@host:5432/database)')
      .optional(),
  })
  .superRefine((store, ctx) => {
    if (store.path !== undefined && store.url !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['url'], message: 'store.url and store.path are mutually exclusive: a store is a SQLite file or a PostgreSQL database' });
    }
  })
  .transform((store): { path: string; url?: string } => (store.url === undefined ? { path: store.path ?? './data/svc.db' } : { path: store.path ?? './data/svc.db', url: store.url }));

// ---------------------------------------------------------------------------------------
// The file

export const configSchema = z
  .strictObject({
    server: serverSchema.prefault({}),
    store: storeSchema.prefault({}),
    keys: z
      .strictObject({
        master_key_file: text.default('./data/master.key'),
        /** How long a superseded key version is protected from destruction (unless forced). */
        destroy_after: duration('24h'),
      })
      .prefault({}),
    state: stateSchema.prefault({}),
    auth: z
      .strictObject({
        access_token_ttl: duration('1h', { positive: true }),
        login_max_attempts: wholeNumber(1).default(5),
        login_window: duration('15m', { positive: true }),
      })
      .prefault({}),
    forwarding: z
      .strictObject({
        connect_timeout: duration('5s'),
        headers_timeout: duration('30s'),
        body_timeout: duration('30s'),
        /** Largest body streamed to a destination (encrypt and forward is never buffered). */
        max_body: size('4gb'),
      })
      .prefault({}),
    limits: z
      .strictObject({
        /** Largest field value or object key held to be transformed (DESIGN §13): 413 beyond. */
        max_value: size('1mb'),
      })
      .prefault({}),
    logs: z
      .strictObject({
        /** false stops api and usage logs (activity logs are always kept). */
        enabled: boolean.default(true),
        retention: duration('30d', { positive: true }),
        flush_interval: duration('50ms', { positive: true }),
        batch_size: wholeNumber(1).default(500),
        queue_limit: wholeNumber(1).default(100_000),
        /**
         * Where batches are written to a file store: `inline` (the main thread, one batch
         * per turn of the loop; no second V8 isolate) or `thread` (a worker thread with its
         * own connection; the event loop never waits on SQLite). Inline is the default: in
         * side-by-side runs it used less memory and less CPU per request, and its batches
         * kept the loop's delay under 20 ms at 1,000 requests a second (bench/README.md).
         */
        writer: z.enum(['thread', 'inline']).default('inline'),
      })
      .prefault({}),
    logging: z.strictObject({ level: z.enum(LOG_LEVELS).default('info') }).prefault({}),
    /** Replication, the control plane's side (docs/replication.md). */
    sync: z
      .strictObject({
        /** Rows (api and usage together) one `POST /api/v3/sync/logs` may carry; more is 413. */
        max_batch: wholeNumber(100).pipe(z.number().max(100_000)).default(5000),
      })
      .prefault({}),
    seed: seedSchema.prefault({}),
    relay: relaySchema.optional(),
    egress: z.array(egressSchema).default([]),
    egress_proxy: egressProxySchema.optional(),
  })
  // `when` makes the cross-field rules run even if a field elsewhere failed, so the
  // user sees every problem in one go (they read the partial value defensively).
  .superRefine(
    (config, ctx) => {
      for (const problem of [...crossCheck(config, { storeIsNew: storeIsNew(config) }), ...fileProblems(config)]) {
        ctx.addIssue({ code: 'custom', path: [...problem.path], message: problem.message });
      }
    },
    { when: () => true },
  );

type DeepReadonly<T> = T extends readonly (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T;

/** The validated, defaulted, deeply frozen configuration. */
export type Config = DeepReadonly<z.output<typeof configSchema>>;

export type ServerConfig = Config['server'];
export type StateConfig = Config['state'];
export type SeedConfig = Config['seed'];
export type SeedUser = SeedConfig['users'][number];
export type SeedApiKey = SeedConfig['api_keys'][number];
export type SeedConfiguration = SeedConfig['configurations'][number];
export type SeedClassification = SeedConfig['classifications'][number];
export type RelayConfig = NonNullable<Config['relay']>;
export type RelayRoute = RelayConfig['routes'][number];
export type ProtectConfig = NonNullable<RelayConfig['protect']>;
export type JwtIdentityConfig = NonNullable<RelayConfig['identity']>['jwt'];
export type EgressRoute = Config['egress'][number];
export type RouteTransform = NonNullable<RelayRoute['request']>;
export type EgressResponse = EgressRoute['response'];
export type EgressProxyConfig = NonNullable<Config['egress_proxy']>;
export type EgressProxyHost = EgressProxyConfig['hosts'][number];
export type Role = (typeof BUILT_IN_ROLES)[number];
export type Permission = (typeof PERMISSIONS)[number];
export type LogLevel = (typeof LOG_LEVELS)[number];
