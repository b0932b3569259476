import { randomUUID } from 'node:crypto';
import type { ApiKeyPatch } from './api-keys.ts';
import { slugify, type ClassificationPatch, type ClassificationProvider, type GwsGroup } from './classifications.ts';
import type { Configuration, ConfigurationPatch, ConfigurationType } from './configurations.ts';
import type { Store } from './db.ts';
import type { UserPatch } from './users.ts';

/*
 * The `seed:` section of the config file (DESIGN §11), field names as in the YAML.
 *
 * The seed is declarative for what it states: lists always replace what is stored, and an
 * optional scalar that is omitted (a password, `disabled`, `min_decryption_version`,
 * `description`, ...) leaves the stored value alone, so edits made through the API survive
 * a restart unless the file says otherwise.
 */

export interface SeedGroupRef {
  id: string;
  name?: string;
  email?: string;
}

export interface SeedUser {
  name: string;
  email: string;
  password?: string;
  roles?: readonly string[];
  disabled?: boolean;
}

export interface SeedApiKey {
  name: string;
  /** The owner's email. */
  user: string;
  /** A literal key; without one a key is generated once and returned to be printed. */
  key?: string;
  permissions?: readonly string[];
  /** Configuration names or proxy slugs. */
  configurations?: readonly string[];
}

export interface SeedGroup extends SeedGroupRef {
  /** Member emails. */
  members?: readonly string[];
}

export interface SeedConfiguration {
  name: string;
  type: ConfigurationType;
  provider?: string;
  /** Encryption only; default: the name's slug. */
  proxy_slug?: string;
  fields?: readonly string[];
  destinations?: readonly string[];
  deterministic?: boolean;
  min_decryption_version?: number;
  groups?: readonly SeedGroup[];
}

export interface SeedClassificationProvider {
  /** Configuration name (or proxy slug). */
  configuration: string;
  gws_groups?: readonly SeedGroupRef[];
}

export interface SeedClassification {
  name: string;
  slug?: string;
  description?: string | null;
  bg_color: string;
  fg_color: string;
  emoji?: string | null;
  /** Emails. */
  users?: readonly string[];
  /** Role names. */
  roles?: readonly string[];
  providers?: readonly SeedClassificationProvider[];
}

export interface SeedInput {
  users?: readonly SeedUser[];
  api_keys?: readonly SeedApiKey[];
  configurations?: readonly SeedConfiguration[];
  classifications?: readonly SeedClassification[];
}

/** Crypto comes in from outside: the store imports nothing above it. */
export interface SeedDeps {
  hashPassword(password: string): string;
  verifyPassword(password: string, hash: string): boolean;
  /** Wraps a data key under the master key, bound to its configuration and version. */
  wrapKey(configurationId: string, version: number, key: Buffer): Buffer;
  generateDataKey(): Buffer;
  generateKeyringId(): Buffer;
  hashApiKey(key: string): Buffer;
  generateApiKey(): string;
}

export interface SeedResult {
  /** Keys generated on this run, to be shown once; later runs never return them again. */
  createdApiKeys: Array<{ name: string; key: string }>;
}

export class SeedError extends Error {
  readonly problems: readonly string[];

  constructor(problems: readonly string[]) {
    const count = problems.length === 1 ? '1 problem' : `${problems.length} problems`;
    super(`The seed has ${count}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'SeedError';
    this.problems = problems;
  }
}

const PROXY_SLUG = /^[a-z0-9][a-z0-9-]{2,63}$/;
const API_KEY_PREFIX_LENGTH = 12;

/**
 * Applies the seed in one transaction: everything or, on any problem, nothing. Idempotent:
 * rows are matched by natural key (user email, configuration name, API key name,
 * classification name) and written only when they differ, so a second run changes nothing.
 * Keys of an existing configuration are never regenerated. Nothing is deleted.
 */
export function applySeed(store: Store, seed: SeedInput, deps: SeedDeps): SeedResult {
  return store.transaction(() => {
    const literalKeyHashes = new Map<SeedApiKey, Buffer>();
    for (const apiKey of seed.api_keys ?? []) {
      if (apiKey.key !== undefined) literalKeyHashes.set(apiKey, deps.hashApiKey(apiKey.key));
    }
    const problems = check(store, seed, literalKeyHashes);
    if (problems.length > 0) throw new SeedError(problems);

    for (const user of seed.users ?? []) applyUser(store, user, deps);
    for (const configuration of seed.configurations ?? []) applyConfiguration(store, configuration, deps);
    const createdApiKeys: SeedResult['createdApiKeys'] = [];
    for (const apiKey of seed.api_keys ?? []) {
      const created = applyApiKey(store, apiKey, literalKeyHashes.get(apiKey), deps);
      if (created !== undefined) createdApiKeys.push({ name: apiKey.name, key: created });
    }
    for (const classification of seed.classifications ?? []) applyClassification(store, classification);
    return { createdApiKeys };
  });
}

function proxySlugOf(configuration: SeedConfiguration): string | null {
  return configuration.type === 'encryption' ? (configuration.proxy_slug ?? slugify(configuration.name)) : null;
}

/** What the checks of one section need from those before it. */
interface CheckContext {
  readonly store: Store;
  readonly problems: string[];
  readonly roleNames: ReadonlySet<string>;
  /** Lowercased emails of the seed's users. */
  readonly seedEmails: Set<string>;
  readonly seedConfigurationNames: Set<string>;
  readonly seedProxySlugs: Set<string>;
}

/** Every problem in the seed, checked against the seed itself and what the store holds. */
function check(store: Store, seed: SeedInput, literalKeyHashes: Map<SeedApiKey, Buffer>): string[] {
  const context: CheckContext = {
    store,
    problems: [],
    roleNames: new Set(store.roles.list().map((role) => role.name)),
    seedEmails: new Set(),
    seedConfigurationNames: new Set(),
    seedProxySlugs: new Set(),
  };
  (seed.users ?? []).forEach((user, i) => checkUser(context, user, `seed.users[${i}]`));
  (seed.configurations ?? []).forEach((configuration, i) => checkConfiguration(context, configuration, `seed.configurations[${i}]`));
  checkApiKeys(context, seed.api_keys ?? [], literalKeyHashes);
  checkClassifications(context, seed.classifications ?? []);
  return context.problems;
}

function knownUser(context: CheckContext, email: string): boolean {
  return context.seedEmails.has(email.toLowerCase()) || context.store.users.findByEmail(email) !== undefined;
}

function knownConfiguration(context: CheckContext, ref: string): boolean {
  const { configurations } = context.store;
  return (
    context.seedConfigurationNames.has(ref) ||
    context.seedProxySlugs.has(ref) ||
    configurations.findByName(ref) !== undefined ||
    configurations.findBySlug(ref) !== undefined
  );
}

function checkUser(context: CheckContext, user: SeedUser, path: string): void {
  const email = user.email.toLowerCase();
  if (context.seedEmails.has(email)) context.problems.push(`${path}.email: "${user.email}" is listed twice`);
  context.seedEmails.add(email);
  (user.roles ?? []).forEach((role, j) => {
    if (!context.roleNames.has(role)) context.problems.push(`${path}.roles[${j}]: unknown role "${role}"`);
  });
}

function checkConfiguration(context: CheckContext, configuration: SeedConfiguration, path: string): void {
  const { problems, store } = context;
  if (context.seedConfigurationNames.has(configuration.name)) problems.push(`${path}.name: "${configuration.name}" is listed twice`);
  context.seedConfigurationNames.add(configuration.name);
  const existing = store.configurations.findByName(configuration.name);

  if (configuration.type === 'provider' && configuration.proxy_slug !== undefined) {
    problems.push(`${path}.proxy_slug: only encryption configurations have a proxy slug`);
  }
  const slug = proxySlugOf(configuration);
  if (slug !== null) {
    const origin = configuration.proxy_slug === undefined ? ' (derived from the name; set proxy_slug)' : '';
    const holder = store.configurations.findBySlug(slug);
    if (!PROXY_SLUG.test(slug)) {
      problems.push(`${path}.proxy_slug: "${slug}"${origin} must match ${PROXY_SLUG.source}`);
    } else if (context.seedProxySlugs.has(slug)) {
      problems.push(`${path}.proxy_slug: "${slug}"${origin} is used by another configuration of the seed`);
    } else if (holder !== undefined && holder.name !== configuration.name) {
      problems.push(`${path}.proxy_slug: "${slug}"${origin} is already used by configuration "${holder.name}"`);
    }
    context.seedProxySlugs.add(slug);
  }

  if (existing !== undefined && existing.type !== configuration.type) {
    problems.push(`${path}.type: configuration "${configuration.name}" exists as "${existing.type}" and its type cannot change`);
  } else if (existing?.type === 'encryption' && existing.deterministic !== (configuration.deterministic ?? false)) {
    // Tokens already issued keep working either way, but equal plaintexts would silently
    // stop (or start) giving equal tokens, which breaks joins built on them.
    problems.push(`${path}.deterministic: cannot change after the configuration "${configuration.name}" was created`);
  }
  const minVersion = configuration.min_decryption_version;
  if (minVersion !== undefined) {
    const keyVersion = existing?.keyVersion ?? 1;
    if (!Number.isInteger(minVersion) || minVersion < 1 || minVersion > keyVersion) {
      problems.push(`${path}.min_decryption_version: must be an integer from 1 to the current key version (${keyVersion})`);
    }
  }
}

function checkApiKeys(context: CheckContext, apiKeys: readonly SeedApiKey[], literalKeyHashes: Map<SeedApiKey, Buffer>): void {
  const { problems, store } = context;
  const permissionNames = new Set(store.roles.permissionNames());
  const names = new Set<string>();
  const hashes = new Set<string>();
  apiKeys.forEach((apiKey, i) => {
    const path = `seed.api_keys[${i}]`;
    if (names.has(apiKey.name)) problems.push(`${path}.name: "${apiKey.name}" is listed twice`);
    names.add(apiKey.name);
    if (!knownUser(context, apiKey.user)) problems.push(`${path}.user: unknown user "${apiKey.user}"`);
    (apiKey.permissions ?? []).forEach((permission, j) => {
      if (!permissionNames.has(permission)) problems.push(`${path}.permissions[${j}]: unknown permission "${permission}"`);
    });
    (apiKey.configurations ?? []).forEach((ref, j) => {
      if (!knownConfiguration(context, ref)) problems.push(`${path}.configurations[${j}]: unknown configuration "${ref}"`);
    });
    const hash = literalKeyHashes.get(apiKey);
    if (hash === undefined) return;
    // Messages name the other key, never the key value itself.
    const hex = hash.toString('hex');
    const holder = store.apiKeys.findByHash(hash);
    if (hashes.has(hex)) problems.push(`${path}.key: the same key is given to another API key of the seed`);
    else if (holder !== undefined && holder.name !== apiKey.name) problems.push(`${path}.key: the key is already used by API key "${holder.name}"`);
    hashes.add(hex);
  });
}

function checkClassifications(context: CheckContext, classifications: readonly SeedClassification[]): void {
  const { problems, store } = context;
  const names = new Set<string>();
  const slugs = new Set<string>();
  classifications.forEach((classification, i) => {
    const path = `seed.classifications[${i}]`;
    if (names.has(classification.name)) problems.push(`${path}.name: "${classification.name}" is listed twice`);
    names.add(classification.name);
    const slug = classification.slug;
    if (slug !== undefined) {
      const holder = store.classifications.findBySlug(slug);
      if (slug === '') problems.push(`${path}.slug: must not be empty`);
      else if (slugs.has(slug)) problems.push(`${path}.slug: "${slug}" is listed twice`);
      else if (holder !== undefined && holder.name !== classification.name) {
        problems.push(`${path}.slug: "${slug}" is already used by classification "${holder.name}"`);
      }
      slugs.add(slug);
    }
    (classification.users ?? []).forEach((email, j) => {
      if (!knownUser(context, email)) problems.push(`${path}.users[${j}]: unknown user "${email}"`);
    });
    (classification.roles ?? []).forEach((role, j) => {
      if (!context.roleNames.has(role)) problems.push(`${path}.roles[${j}]: unknown role "${role}"`);
    });
    const refs = new Set<string>();
    (classification.providers ?? []).forEach((provider, j) => {
      const ref = provider.configuration;
      if (!knownConfiguration(context, ref)) problems.push(`${path}.providers[${j}].configuration: unknown configuration "${ref}"`);
      else if (refs.has(ref)) problems.push(`${path}.providers[${j}].configuration: "${ref}" is listed twice`);
      refs.add(ref);
    });
  });
}

function applyUser(store: Store, user: SeedUser, deps: SeedDeps): void {
  const roleIds = (user.roles ?? []).map((name) => mustFind(store.roles.findByName(name), 'role', name).id);
  const existing = store.users.findByEmail(user.email);
  if (existing === undefined) {
    store.users.create({
      name: user.name,
      email: user.email,
      passwordHash: user.password === undefined ? null : deps.hashPassword(user.password),
      roleIds,
      disabled: user.disabled ?? false,
      source: 'seed',
    });
    return;
  }
  const patch: UserPatch = {};
  if (existing.name !== user.name) patch.name = user.name;
  if (existing.email !== user.email) patch.email = user.email;
  if (user.disabled !== undefined && existing.disabled !== user.disabled) patch.disabled = user.disabled;
  // Hashes are salted, so "changed" can only be answered by verifying, not by comparing.
  if (user.password !== undefined && (existing.passwordHash === null || !deps.verifyPassword(user.password, existing.passwordHash))) {
    patch.passwordHash = deps.hashPassword(user.password);
  }
  if (Object.keys(patch).length > 0) store.users.update(existing.id, patch);
  const currentRoleIds = store.users.rolesOf(existing.id).map((role) => role.id);
  if (!sameSet(currentRoleIds, roleIds)) store.users.setRoles(existing.id, roleIds);
}

function groupsOf(configuration: SeedConfiguration): Array<GwsGroup & { members: string[] }> | undefined {
  return configuration.groups?.map((group) => ({ ...groupRef(group), members: [...(group.members ?? [])] }));
}

function applyConfiguration(store: Store, configuration: SeedConfiguration, deps: SeedDeps): void {
  const proxySlug = proxySlugOf(configuration);
  const groups = groupsOf(configuration);
  const existing = store.configurations.findByName(configuration.name);
  if (existing === undefined) {
    const id = randomUUID();
    let keyringId: Buffer | null = null;
    let firstWrappedKey: Buffer | null = null;
    if (configuration.type === 'encryption') {
      keyringId = deps.generateKeyringId();
      firstWrappedKey = deps.wrapKey(id, 1, deps.generateDataKey());
    }
    store.configurations.create({
      id,
      name: configuration.name,
      type: configuration.type,
      provider: configuration.provider ?? null,
      proxySlug,
      deterministic: configuration.deterministic ?? false,
      minDecryptionVersion: configuration.min_decryption_version ?? 1,
      destinations: configuration.destinations ?? [],
      fields: configuration.fields ?? [],
      extra: groups === undefined ? {} : { groups },
      source: 'seed',
      keyringId,
      firstWrappedKey,
    });
    return;
  }
  const patch: ConfigurationPatch = {};
  if (configuration.provider !== undefined && existing.provider !== configuration.provider) patch.provider = configuration.provider;
  if (existing.proxySlug !== proxySlug) patch.proxySlug = proxySlug;
  const minVersion = configuration.min_decryption_version;
  if (minVersion !== undefined && existing.minDecryptionVersion !== minVersion) patch.minDecryptionVersion = minVersion;
  const destinations = configuration.destinations ?? [];
  if (!sameList(existing.destinations, destinations)) patch.destinations = destinations;
  const fields = configuration.fields ?? [];
  if (!sameList(existing.fields, fields)) patch.fields = fields;
  if (groups !== undefined && JSON.stringify(existing.extra['groups']) !== JSON.stringify(groups)) {
    patch.extra = { ...existing.extra, groups };
  }
  if (Object.keys(patch).length > 0) store.configurations.update(existing.id, patch);
}

/** Names win over slugs, so a configuration named like another's slug is still reachable by name. */
function resolveConfiguration(store: Store, ref: string): Configuration {
  return mustFind(store.configurations.findByName(ref) ?? store.configurations.findBySlug(ref), 'configuration', ref);
}

/** Returns the generated key when it created one. */
function applyApiKey(store: Store, apiKey: SeedApiKey, literalHash: Buffer | undefined, deps: SeedDeps): string | undefined {
  const userId = mustFind(store.users.findByEmail(apiKey.user), 'user', apiKey.user).id;
  const permissions = [...(apiKey.permissions ?? [])];
  const configurations = unique((apiKey.configurations ?? []).map((ref) => resolveConfiguration(store, ref).id));
  const existing = store.apiKeys.findByName(apiKey.name);
  if (existing === undefined) {
    const key = apiKey.key ?? deps.generateApiKey();
    store.apiKeys.create({
      name: apiKey.name,
      prefix: key.slice(0, API_KEY_PREFIX_LENGTH),
      keyHash: literalHash ?? deps.hashApiKey(key),
      userId,
      permissions,
      configurations,
      source: 'seed',
    });
    return apiKey.key === undefined ? key : undefined;
  }
  // A key generated on an earlier run is kept: its value was shown once and is not stored.
  if (apiKey.key !== undefined && literalHash !== undefined && !existing.keyHash.equals(literalHash)) {
    store.apiKeys.replaceHash(existing.id, apiKey.key.slice(0, API_KEY_PREFIX_LENGTH), literalHash);
  }
  const patch: ApiKeyPatch = {};
  if (existing.userId !== userId) patch.userId = userId;
  if (!sameList(existing.permissions, permissions)) patch.permissions = permissions;
  if (!sameList(existing.configurations, configurations)) patch.configurations = configurations;
  if (Object.keys(patch).length > 0) store.apiKeys.update(existing.id, patch);
  return undefined;
}

function applyClassification(store: Store, classification: SeedClassification): void {
  const userIds = unique((classification.users ?? []).map((email) => mustFind(store.users.findByEmail(email), 'user', email).id));
  const roleIds = unique((classification.roles ?? []).map((name) => mustFind(store.roles.findByName(name), 'role', name).id));
  const providers: ClassificationProvider[] = (classification.providers ?? [])
    .map((provider) => ({
      configurationId: resolveConfiguration(store, provider.configuration).id,
      gwsGroups: (provider.gws_groups ?? []).map(groupRef),
    }))
    // The order members() returns, so comparing with what is stored is a plain string compare.
    .sort((a, b) => (a.configurationId < b.configurationId ? -1 : a.configurationId > b.configurationId ? 1 : 0));

  const existing = store.classifications.findByName(classification.name);
  if (existing === undefined) {
    store.classifications.create({
      name: classification.name,
      slug: classification.slug ?? store.classifications.uniqueSlug(classification.name),
      description: classification.description ?? null,
      bgColor: classification.bg_color,
      fgColor: classification.fg_color,
      emoji: classification.emoji ?? null,
      source: 'seed',
      userIds,
      roleIds,
      providers,
    });
    return;
  }
  const patch: ClassificationPatch = {};
  if (classification.slug !== undefined && existing.slug !== classification.slug) patch.slug = classification.slug;
  if (classification.description !== undefined && existing.description !== classification.description) {
    patch.description = classification.description;
  }
  if (existing.bgColor !== classification.bg_color) patch.bgColor = classification.bg_color;
  if (existing.fgColor !== classification.fg_color) patch.fgColor = classification.fg_color;
  if (classification.emoji !== undefined && existing.emoji !== classification.emoji) patch.emoji = classification.emoji;
  const members = store.classifications.members(existing.id);
  if (!sameSet(members.userIds, userIds)) patch.userIds = userIds;
  if (!sameSet(members.roleIds, roleIds)) patch.roleIds = roleIds;
  if (JSON.stringify(members.providers) !== JSON.stringify(providers)) patch.providers = providers;
  if (Object.keys(patch).length > 0) store.classifications.update(existing.id, patch);
}

/** Drops absent optional keys so the stored JSON, and comparisons with it, are stable. */
function groupRef(group: SeedGroupRef): GwsGroup {
  const ref: GwsGroup = { id: group.id };
  if (group.name !== undefined) ref.name = group.name;
  if (group.email !== undefined) ref.email = group.email;
  return ref;
}

/** check() has already reported anything missing; reaching this throw is a bug. */
function mustFind<T>(value: T | undefined, what: string, key: string): T {
  if (value === undefined) throw new Error(`Seed: ${what} "${key}" disappeared after validation.`);
  return value;
}

function unique<T>(values: readonly T[]): T[] {
  return [...new Set(values)];
}

function sameList(a: readonly unknown[], b: readonly unknown[]): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}

function sameSet(a: readonly number[], b: readonly number[]): boolean {
  const left = new Set(a);
  const right = new Set(b);
  return left.size === right.size && [...left].every((value) => right.has(value));
}
