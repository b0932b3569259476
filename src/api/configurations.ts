/**
 * Configurations (DESIGN §10, spec 2.7 and 4.7): list, create, show, update, delete and
 * key rotation. An encryption configuration owns a keyring; its data keys are generated
 * here, wrapped under the master key at once, and never leave this module unwrapped.
 */
import { recordActivity } from './activity.ts';
import { randomBytes, randomUUID } from 'node:crypto';
import { requireConfigurationScope, type Caller } from '../auth/caller.ts';
import { PROXY_SLUG_PATTERN } from '../config/schema.ts';
import { wrapDataKey } from '../crypto/data-keys.ts';
import { Keyring, MAX_KEY_VERSION } from '../crypto/keyring.ts';
import type { Services } from '../services.ts';
import { InvalidFieldPathsError, NotFoundError, ValidationError } from '../errors.ts';
import { compileFieldPaths } from '../fields/paths.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import { deleteConfiguration, type Configuration, type ConfigurationPatch, type ConfigurationType, type NewConfiguration } from '../store/configurations.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import { isUniqueViolation } from '../store/sql.ts';
import { envelope, pageRequest, pastTheEnd } from './pagination.ts';
import { configurationView } from './presenters.ts';
import type { Handlers } from './routes.ts';
import { attributeName, Validator } from './validation.ts';

const TYPES: readonly ConfigurationType[] = ['encryption', 'provider'];
const PROVIDERS = ['google'] as const;
const NAME_MAX = 64;
const MAX_DESTINATIONS = 64;
const MAX_URL_LENGTH = 2048;
const GENERATED_SLUG_LENGTH = 16;
const SLUG_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** What `values` may set, and which of those are fixed once the configuration exists. */
const SETTABLE_KEYS = new Set(['destinations', 'fields', 'deterministic', 'min_decryption_version', 'proxy_slug']);
const FIXED_KEYS = new Set(['deterministic', 'proxy_slug', 'key_version']);
const LIST_KEYS = new Set(['destinations', 'fields']);

/** What a request's `values` asked for, already validated. */
interface ValueChanges {
  destinations?: string[];
  fields?: string[];
  deterministic?: boolean;
  minDecryptionVersion?: number;
  proxySlug?: string;
}

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { list, create, show, update, destroy, rotate } satisfies Handlers;

/** A key limited to some configurations lists only those. */
async function list(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const v = Validator.forQuery(ctx.query());
  const page = pageRequest(v);
  v.check();
  const scope = caller.configurations === null ? null : [...caller.configurations];
  const { configurations } = services.store;
  const total = await configurations.count(scope);
  const data = pastTheEnd(page, total) ? [] : (await configurations.page(page.perPage, page.offset, scope)).map(configurationView);
  sendJson(ctx, 200, envelope(ctx, services.config.server.public_url, page, total, data));
}

async function create(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const v = new Validator(await readJson(ctx));
  const input = validateCreate(v, services.store);
  v.check();
  const configuration = await insert(services, input);
  await recordActivity(ctx, services, caller, 'configuration.created', `Created ${configuration.type} configuration "${configuration.name}".`);
  sendJson(ctx, 201, configurationView(configuration));
}

async function show(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  sendJson(ctx, 200, configurationView(await findScoped(ctx, services, caller)));
}

async function update(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const current = await findScoped(ctx, services, caller);
  const v = new Validator(await readJson(ctx));
  const patch = validateUpdate(v, services.store, current);
  v.check();
  const updated = await services.store.configurations.update(current.id, patch);
  if (updated === undefined) throw new NotFoundError();
  await recordActivity(ctx, services, caller, 'configuration.updated', `Updated configuration "${updated.name}".`);
  sendJson(ctx, 200, configurationView(updated));
}

/** Also revokes the keys limited to configurations that are then all gone (deleteConfiguration). */
async function destroy(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const current = await findScoped(ctx, services, caller);
  const orphaned = await services.store.transaction((tx) => deleteConfiguration(tx, current.id));
  if (orphaned === null) throw new NotFoundError();
  services.codecs.forget(current.id);
  await recordActivity(ctx, services, caller, 'configuration.deleted', `Deleted configuration "${current.name}".`);
  for (const key of orphaned) {
    await recordActivity(ctx, services, caller, 'api-key.revoked', `Revoked API key "${key.name}": every configuration it was limited to is deleted.`);
  }
  sendEmpty(ctx, 204);
}

/**
 * Adds key version N+1; new tokens use it at once (the codec cache sees the new version
 * and rebuilds) while tokens of older versions keep decrypting down to
 * `min_decryption_version`.
 */
async function rotate(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const current = await findScoped(ctx, services, caller);
  if (current.type !== 'encryption') {
    throw new ValidationError({ type: ['Only encryption configurations have keys to rotate.'] });
  }
  const rotated = await rotateKey(services, current.id);
  await recordActivity(ctx, services, caller, 'configuration.rotated', `Rotated the key of configuration "${rotated.name}" to version ${rotated.keyVersion}.`);
  sendJson(ctx, 200, configurationView(rotated));
}

/** Adds the next key version of an encryption configuration; shared with `svc-sidecar keys rotate`. */
export async function rotateKey(services: Pick<Services, 'store' | 'master'>, configurationId: string): Promise<Configuration> {
  const rotated = await services.store.transaction(async ({ configurations }) => {
    // Destroyed versions still count: a version number is never reused.
    const next = (await configurations.keys(configurationId)).reduce((max, k) => Math.max(max, k.version), 0) + 1;
    if (next > MAX_KEY_VERSION) throw new ValidationError({ type: ['The configuration has reached the highest key version.'] });
    await configurations.addKey(configurationId, next, newWrappedKey(services, configurationId, next));
    return configurations.findById(configurationId);
  });
  if (rotated === undefined) throw new NotFoundError();
  return rotated;
}

// ---------------------------------------------------------------------------------------
// Steps

/** The configuration named in the path; 403 outside the key's scope (before existence, so scoped keys learn nothing), else 404. */
async function findScoped(ctx: RequestContext, services: Services, caller: Caller): Promise<Configuration> {
  const id = ctx.params['id'] ?? '';
  requireConfigurationScope(caller, id);
  const configuration = await services.store.configurations.findById(id);
  if (configuration === undefined) throw new NotFoundError();
  return configuration;
}

interface CreateInput {
  name: string;
  type: ConfigurationType;
  provider: string | null;
  values: ValueChanges;
}

function validateCreate(v: Validator, store: Store): CreateInput {
  const name = v.string('name', { required: true, max: NAME_MAX, text: true });
  if (name !== undefined && name !== null && stateOf(store).configurationByName(name) !== undefined) {
    v.fail('name', 'The name has already been taken.');
  }
  const givenType = v.oneOf('type', TYPES);
  const providerGiven = v.has('provider') && v.input['provider'] !== null && v.input['provider'] !== '';
  const type = givenType ?? (providerGiven ? 'provider' : 'encryption');
  let provider: string | null = null;
  if (type === 'provider') {
    if (!providerGiven) v.fail('provider', 'The provider field is required when type is provider.');
    else provider = v.oneOf('provider', PROVIDERS) ?? null;
  } else if (providerGiven && !v.failed('type')) {
    v.fail('provider', 'The provider field is prohibited when type is encryption.');
  }
  const raw = readValues(v);
  const values = raw === undefined ? {} : interpretValues(v, store, raw, { type, provider, current: null });
  return { name: name ?? '', type, provider, values };
}

function validateUpdate(v: Validator, store: Store, current: Configuration): ConfigurationPatch {
  // Sent, a name must be one: an empty or null name is refused, not silently ignored.
  const name = v.string('name', { required: v.has('name'), max: NAME_MAX, text: true });
  if (typeof name === 'string' && name !== current.name && stateOf(store).configurationByName(name) !== undefined) {
    v.fail('name', 'The name has already been taken.');
  }
  // Clients often send back what GET showed them: unchanged fixed fields are accepted.
  if (v.has('type') && v.input['type'] !== current.type) v.fail('type', 'The type field cannot be changed.');
  if (v.has('provider') && v.input['provider'] !== current.provider) v.fail('provider', 'The provider field cannot be changed.');
  const raw = readValues(v);
  const values = raw === undefined ? {} : interpretValues(v, store, raw, { type: current.type, provider: current.provider, current });
  return {
    name: name ?? undefined,
    destinations: values.destinations,
    fields: values.fields,
    minDecryptionVersion: values.minDecryptionVersion,
  };
}

async function insert(services: Services, input: CreateInput): Promise<Configuration> {
  const { store } = services;
  const id = randomUUID();
  const base: NewConfiguration = {
    id,
    name: input.name,
    type: input.type,
    provider: input.provider,
    destinations: input.values.destinations,
    fields: input.values.fields,
  };
  const configuration: NewConfiguration =
    input.type === 'provider'
      ? base
      : {
          ...base,
          proxySlug: input.values.proxySlug ?? generateProxySlug(store),
          deterministic: input.values.deterministic ?? false,
          minDecryptionVersion: input.values.minDecryptionVersion ?? 1,
          keyringId: Keyring.generateId(),
          // The id is the wrapped key's associated data, so it must exist before the row.
          firstWrappedKey: newWrappedKey(services, id, 1),
        };
  try {
    return await store.configurations.create(configuration);
  } catch (err) {
    // Another writer of the same database file took the name or slug after we checked.
    if (!isUniqueViolation(err)) throw err;
    const taken = (await store.configurations.findByName(input.name)) !== undefined;
    throw new ValidationError(taken ? { name: ['The name has already been taken.'] } : { 'values.proxy_slug': ['The values.proxy slug has already been taken.'] });
  }
}

function newWrappedKey(services: Pick<Services, 'master'>, configurationId: string, version: number): Buffer {
  const key = Keyring.generateKey();
  try {
    return wrapDataKey(services.master, configurationId, version, key);
  } finally {
    key.fill(0);
  }
}

/** 16 lowercase letters and digits, uniformly drawn (rejection sampling keeps it unbiased). */
function generateProxySlug(store: Store): string {
  for (;;) {
    let slug = '';
    while (slug.length < GENERATED_SLUG_LENGTH) {
      for (const b of randomBytes(32)) {
        if (b < 252 && slug.length < GENERATED_SLUG_LENGTH) slug += SLUG_ALPHABET[b % SLUG_ALPHABET.length];
      }
    }
    if (stateOf(store).configurationBySlug(slug) === undefined) return slug;
  }
}


// ---------------------------------------------------------------------------------------
// `values`

/**
 * Reads `values` in either shape: the spec's array of `{key, value}` or an object of
 * key → value. Values are strings (DESIGN §10); integers and booleans are taken as their
 * text, and the list keys also take an array of strings.
 */
function readValues(v: Validator): Map<string, string> | undefined {
  const raw = v.input['values'];
  if (raw === undefined || raw === null) return undefined;
  const out = new Map<string, string>();
  const put = (key: string, value: unknown) => {
    const field = `values.${key}`;
    if (out.has(key)) {
      v.fail(field, `The ${attributeName(field)} field has a duplicate value.`);
      return;
    }
    const text = valueText(key, value);
    if (text === undefined) v.fail(field, `The ${attributeName(field)} field must be a string.`);
    else out.set(key, text);
  };
  if (Array.isArray(raw)) {
    raw.forEach((item: unknown, i) => {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) {
        v.fail(`values.${i}`, `The values.${i} field must be an object with a key and a value.`);
        return;
      }
      const { key, value } = item as Record<string, unknown>;
      if (key === undefined || key === null || key === '') v.fail(`values.${i}.key`, `The values.${i}.key field is required.`);
      else if (typeof key !== 'string') v.fail(`values.${i}.key`, `The values.${i}.key field must be a string.`);
      else put(key, value);
    });
  } else if (typeof raw === 'object') {
    for (const [key, value] of Object.entries(raw)) put(key, value);
  } else {
    v.fail('values', 'The values field must be an array.');
  }
  return out;
}

function valueText(key: string, value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'boolean' || (typeof value === 'number' && Number.isSafeInteger(value))) return String(value);
  if (LIST_KEYS.has(key) && Array.isArray(value) && value.every((item) => typeof item === 'string')) return value.join(',');
  return undefined;
}

interface ValuesContext {
  type: ConfigurationType;
  provider: string | null;
  /** null on create. */
  current: Configuration | null;
}

function interpretValues(v: Validator, store: Store, values: Map<string, string>, at: ValuesContext): ValueChanges {
  const out: ValueChanges = {};
  for (const [key, text] of values) {
    const field = `values.${key}`;
    const name = attributeName(field);
    if (at.type === 'provider') {
      // GET shows a provider configuration's provider among its values; sending it back is fine.
      if (!(key === 'provider' && text === at.provider)) v.fail(field, `The ${name} field is prohibited when type is provider.`);
      continue;
    }
    if (at.current !== null && FIXED_KEYS.has(key)) {
      if (text !== fixedValue(at.current, key)) v.fail(field, `The ${name} field cannot be changed.`);
      continue;
    }
    if (!SETTABLE_KEYS.has(key)) {
      v.fail(field, `The ${name} field is prohibited.`);
      continue;
    }
    switch (key) {
      case 'destinations':
        out.destinations = parseDestinations(v, field, text);
        break;
      case 'fields':
        out.fields = parseFields(v, field, text);
        break;
      case 'deterministic':
        if (text === 'true' || text === 'false') out.deterministic = text === 'true';
        else v.fail(field, `The ${name} field must be true or false.`);
        break;
      case 'min_decryption_version':
        out.minDecryptionVersion = parseMinVersion(v, field, text, at.current?.keyVersion ?? 1);
        break;
      case 'proxy_slug':
        if (!PROXY_SLUG_PATTERN.test(text)) v.fail(field, `The ${name} field format is invalid.`);
        else if (stateOf(store).configurationBySlug(text) !== undefined) v.fail(field, `The ${name} has already been taken.`);
        else out.proxySlug = text;
        break;
    }
  }
  return out;
}

/** A fixed key's value as GET shows it. */
function fixedValue(configuration: Configuration, key: string): string {
  if (key === 'deterministic') return String(configuration.deterministic);
  if (key === 'proxy_slug') return configuration.proxySlug ?? '';
  return String(configuration.keyVersion ?? 0);
}

function splitList(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

function parseDestinations(v: Validator, field: string, text: string): string[] | undefined {
  const name = attributeName(field);
  const list = splitList(text);
  if (list.length > MAX_DESTINATIONS) {
    v.fail(field, `The ${name} field must not have more than ${MAX_DESTINATIONS} items.`);
    return undefined;
  }
  for (const entry of list) {
    const url = entry.length > MAX_URL_LENGTH ? null : URL.parse(entry);
    if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
      v.fail(field, `The ${name} field must contain only absolute http or https URLs.`);
      return undefined;
    }
    // GET shows destinations to every viewer: credentials belong in the forwarded request.
    if (url.username !== '' || url.password !== '') {
      v.fail(field, `The ${name} field must not contain user names or passwords.`);
      return undefined;
    }
  }
  return list;
}

function parseFields(v: Validator, field: string, text: string): string[] | undefined {
  try {
    compileFieldPaths(text);
  } catch (err) {
    if (!(err instanceof InvalidFieldPathsError)) throw err;
    // The compiler words its errors for the x-svc-fields header; the problem is the same here.
    const detail = err.message.replace(/^The x-svc-fields header is invalid: /, '');
    v.fail(field, `The ${attributeName(field)} field is invalid: ${detail}`);
    return undefined;
  }
  return splitList(text);
}

function parseMinVersion(v: Validator, field: string, text: string, keyVersion: number): number | undefined {
  const name = attributeName(field);
  if (!/^-?\d{1,15}$/.test(text)) {
    v.fail(field, `The ${name} field must be an integer.`);
    return undefined;
  }
  const n = Number(text);
  if (n < 1) v.fail(field, `The ${name} field must be at least 1.`);
  // Above the current version, new tokens would be born unreadable.
  else if (n > keyVersion) v.fail(field, `The ${name} field must not be greater than ${keyVersion}.`);
  else return n;
  return undefined;
}
