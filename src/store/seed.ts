import { randomUUID } from 'node:crypto';
import type { ApiKeyPatch } from './api-keys.ts';
import { slugify, type Classification, type ClassificationPatch, type ClassificationProvider, type GwsGroup } from './classifications.ts';
import { revokeKeysReachingNothing, type Configuration, type ConfigurationPatch, type ConfigurationType } from './configurations.ts';
import type { DefaultLevel, MaskSpec, RevealLevel } from '../fields/reveal.ts';
import type { Store, Transaction } from './db.ts';
import { hasUnsafeText, normalizeEmail } from './identity-text.ts';
import { grantsText, maskText, type RevealDefault, type RevealGrant } from './reveal-rules.ts';
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
  /** Reveal grants (DESIGN §14); absent: none. */
  reveal?: readonly SeedRevealGrant[];
  /** Absent: deny. */
  default?: DefaultLevel;
  /** The mask of `default: mask`. */
  default_mask?: MaskSpec;
}

/** Users by email and roles by name, as for members; groups by provider group id. */
export interface SeedRevealGrant {
  to: { users?: readonly string[]; roles?: readonly string[]; groups?: readonly string[] };
  level: RevealLevel;
  mask?: MaskSpec;
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
  /** What the run changed, one entry per object (`updated classification "PHI"`); empty when nothing did. */
  changes: string[];
  /** Worth an operator's attention but no reason to refuse the seed. Never holds a secret. */
  warnings: string[];
  /** Prune only: encryption configurations the seed created, no longer declares, and kept. */
  keptConfigurations: string[];
}

export interface ApplySeedOptions {
  /** Remove what an earlier run created and this seed no longer declares (`state.source: file`). */
  prune?: boolean;
  /**
   * Password decisions made before the transaction (`passwordChecks`), so that no scrypt
   * runs while it holds the write lock. Without them they are made here, still before it.
   */
  passwords?: PasswordPlan;
}

/** A seeded user's password, to be compared with what the store holds. */
export interface PasswordCheck {
  /** Normalised (normalizeEmail). */
  readonly email: string;
  readonly password: string;
  /** The hash stored now; null for a new user or one without a password. */
  readonly storedHash: string | null;
}

/**
 * Per normalised email: the hash to store (`newHash`), or null to keep the stored one, and the
 * stored hash that decision was made against. A decision whose `storedHash` no longer matches
 * when the transaction runs (the API changed the password in between) is made again there.
 */
export type PasswordPlan = ReadonlyMap<string, { readonly storedHash: string | null; readonly newHash: string | null }>;

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
 * Keys of an existing configuration are never regenerated. Without `prune` nothing is deleted.
 */
export async function applySeed(store: Store, seed: SeedInput, deps: SeedDeps, options: ApplySeedOptions = {}): Promise<SeedResult> {
  const passwords = options.passwords ?? planPasswords(await passwordChecks(store, seed), deps);
  const literalKeyHashes = new Map<SeedApiKey, Buffer>();
  for (const apiKey of seed.api_keys ?? []) {
    if (apiKey.key !== undefined) literalKeyHashes.set(apiKey, deps.hashApiKey(apiKey.key));
  }
  return store.transaction(async (tx) => {
    // Instances starting together on one database apply it one after the other: the
    // second finds the first's rows and changes nothing.
    await tx.lock('svc-seed');
    const result: SeedResult = { createdApiKeys: [], changes: [], warnings: [], keptConfigurations: [] };
    // Removals come first, so the checks below see the store as it will be: a slug or a
    // configuration name freed by a removal can be taken, a removed row cannot be referred to.
    const removedEmails = options.prune === true ? await prune(tx, seed, result) : new Set<string>();
    const problems = await check(tx, seed, literalKeyHashes, removedEmails);
    if (problems.length > 0) throw new SeedError(problems);

    const context: ApplyContext = { store: tx, deps, passwords, result };
    for (const user of seed.users ?? []) await applyUser(context, user);
    for (const configuration of seed.configurations ?? []) await applyConfiguration(context, configuration);
    for (const apiKey of seed.api_keys ?? []) await applyApiKey(context, apiKey, literalKeyHashes.get(apiKey));
    const declared = new Set((seed.classifications ?? []).map((classification) => classification.name));
    for (const classification of seed.classifications ?? []) await applyClassification(context, classification, declared);
    // A key limited to deleted configurations alone (one pruned above, or left so by a
    // version that did not revoke such keys) reaches nothing: it is revoked.
    for (const key of await revokeKeysReachingNothing(tx)) result.changes.push(`revoked API key "${key.name}": every configuration it was limited to is deleted`);
    return result;
  });
}

/** The seed's users that carry a password; their decisions cost a scrypt each. */
export async function passwordChecks(store: Store, seed: SeedInput): Promise<PasswordCheck[]> {
  const checks: PasswordCheck[] = [];
  for (const user of seed.users ?? []) {
    if (user.password === undefined) continue;
    const storedHash = (await store.users.findByEmail(user.email))?.passwordHash ?? null;
    checks.push({ email: normalizeEmail(user.email), password: user.password, storedHash });
  }
  return checks;
}

/** `passwordChecks` decided synchronously (at start, where nothing else is waiting). */
export function planPasswords(checks: readonly PasswordCheck[], deps: Pick<SeedDeps, 'hashPassword' | 'verifyPassword'>): PasswordPlan {
  return new Map(checks.map((check) => [check.email, { storedHash: check.storedHash, newHash: decidePassword(check.password, check.storedHash, deps) }]));
}

// Hashes are salted, so "changed" can only be answered by verifying, not by comparing.
function decidePassword(password: string, storedHash: string | null, deps: Pick<SeedDeps, 'hashPassword' | 'verifyPassword'>): string | null {
  return storedHash !== null && deps.verifyPassword(password, storedHash) ? null : deps.hashPassword(password);
}

/**
 * Removes what an earlier run created and this seed no longer declares, choosing for each
 * kind what cannot lose data:
 * - classifications are deleted (like DELETE through the API), unless a declared entry
 *   claims the slug: that entry is the same classification renamed, and tokens keep their id;
 * - API keys are revoked, never deleted, so logs still name them and the value is never reused;
 * - provider configurations are deleted;
 * - encryption configurations are kept with their keys: deleting them would make every token
 *   they issued unreadable. Each is reported as a warning on every run until it is declared
 *   again or deleted through the API;
 * - users are disabled (their API keys then answer 401), not deleted: keys and logs refer to them.
 * Returns the normalised emails of the removed users, which the seed may no longer refer to.
 */
async function prune(store: Transaction, seed: SeedInput, result: SeedResult): Promise<Set<string>> {
  const { changes, warnings } = result;
  const classificationNames = new Set((seed.classifications ?? []).map((classification) => classification.name));
  const claimedSlugs = new Set((seed.classifications ?? []).flatMap((classification) => (classification.slug === undefined ? [] : [classification.slug])));
  for (const classification of await store.classifications.list()) {
    if (classification.source !== 'seed' || classificationNames.has(classification.name) || claimedSlugs.has(classification.slug)) continue;
    await store.classifications.delete(classification.id);
    changes.push(`deleted classification "${classification.name}"`);
  }

  const apiKeyNames = new Set((seed.api_keys ?? []).map((apiKey) => apiKey.name));
  for (const apiKey of await store.apiKeys.list()) {
    if (apiKey.source !== 'seed' || apiKeyNames.has(apiKey.name) || apiKey.status === 'revoked') continue;
    await store.apiKeys.revoke(apiKey.id);
    changes.push(`revoked API key "${apiKey.name}"`);
  }

  const configurationNames = new Set((seed.configurations ?? []).map((configuration) => configuration.name));
  for (const configuration of await store.configurations.list()) {
    if (configuration.source !== 'seed' || configurationNames.has(configuration.name)) continue;
    if (configuration.type === 'provider') {
      await store.configurations.delete(configuration.id);
      changes.push(`deleted configuration "${configuration.name}"`);
    } else {
      result.keptConfigurations.push(configuration.name);
      warnings.push(
        `configuration "${configuration.name}" is no longer in the seed: kept with its keys, so its tokens stay readable; declare it again, or delete it through the API`,
      );
    }
  }

  const emails = new Set((seed.users ?? []).map((user) => normalizeEmail(user.email)));
  const removed = new Set<string>();
  for (const user of await store.users.list()) {
    const email = normalizeEmail(user.email);
    if (user.source !== 'seed' || emails.has(email)) continue;
    removed.add(email);
    if (user.disabled) continue;
    await store.users.update(user.id, { disabled: true });
    changes.push(`disabled user "${user.email}"`);
  }
  return removed;
}

function proxySlugOf(configuration: SeedConfiguration): string | null {
  return configuration.type === 'encryption' ? (configuration.proxy_slug ?? slugify(configuration.name)) : null;
}

/** What the checks of one section need from those before it. */
interface CheckContext {
  readonly store: Transaction;
  readonly problems: string[];
  readonly roleNames: ReadonlySet<string>;
  /** Normalised emails of the seed's users. */
  readonly seedEmails: Set<string>;
  readonly seedConfigurationNames: Set<string>;
  readonly seedProxySlugs: Set<string>;
  /** Normalised emails of users the seed created and no longer declares (prune). */
  readonly removedEmails: ReadonlySet<string>;
  /** Names of the seed's classifications. */
  readonly seedClassificationNames: Set<string>;
}

/** Every problem in the seed, checked against the seed itself and what the store holds. */
async function check(store: Transaction, seed: SeedInput, literalKeyHashes: Map<SeedApiKey, Buffer>, removedEmails: ReadonlySet<string>): Promise<string[]> {
  const context: CheckContext = {
    store,
    problems: [],
    roleNames: new Set((await store.roles.list()).map((role) => role.name)),
    seedEmails: new Set(),
    seedConfigurationNames: new Set(),
    seedProxySlugs: new Set(),
    removedEmails,
    seedClassificationNames: new Set((seed.classifications ?? []).map((classification) => classification.name)),
  };
  (seed.users ?? []).forEach((user, i) => checkUser(context, user, `seed.users[${i}]`));
  for (const [i, configuration] of (seed.configurations ?? []).entries()) await checkConfiguration(context, configuration, `seed.configurations[${i}]`);
  await checkApiKeys(context, seed.api_keys ?? [], literalKeyHashes);
  await checkClassifications(context, seed.classifications ?? []);
  return context.problems;
}

/** Undefined when the user is known, else why not. */
async function userProblem(context: CheckContext, email: string): Promise<string | undefined> {
  const normalised = normalizeEmail(email);
  if (context.seedEmails.has(normalised)) return undefined;
  if (context.removedEmails.has(normalised)) return `user "${email}" is no longer in seed.users (it is disabled)`;
  return (await context.store.users.findByEmail(email)) === undefined ? `unknown user "${email}"` : undefined;
}

async function knownConfiguration(context: CheckContext, ref: string): Promise<boolean> {
  const { configurations } = context.store;
  return (
    context.seedConfigurationNames.has(ref) ||
    context.seedProxySlugs.has(ref) ||
    (await configurations.findByName(ref)) !== undefined ||
    (await configurations.findBySlug(ref)) !== undefined
  );
}

function checkUser(context: CheckContext, user: SeedUser, path: string): void {
  const email = normalizeEmail(user.email);
  // `\u212Aate@example.com` and `kate@example.com` are one person (DESIGN §13).
  if (context.seedEmails.has(email)) context.problems.push(`${path}.email: "${user.email}" is listed twice (emails compare after normalisation)`);
  context.seedEmails.add(email);
  checkText(context, `${path}.name`, user.name);
  checkText(context, `${path}.email`, user.email);
  (user.roles ?? []).forEach((role, j) => {
    if (!context.roleNames.has(role)) context.problems.push(`${path}.roles[${j}]: unknown role "${role}"`);
  });
}

async function checkConfiguration(context: CheckContext, configuration: SeedConfiguration, path: string): Promise<void> {
  const { problems, store } = context;
  if (context.seedConfigurationNames.has(configuration.name)) problems.push(`${path}.name: "${configuration.name}" is listed twice`);
  context.seedConfigurationNames.add(configuration.name);
  checkText(context, `${path}.name`, configuration.name);
  (configuration.groups ?? []).forEach((group, j) => {
    if (group.name !== undefined) checkText(context, `${path}.groups[${j}].name`, group.name);
  });
  const existing = await store.configurations.findByName(configuration.name);

  if (configuration.type === 'provider' && configuration.proxy_slug !== undefined) {
    problems.push(`${path}.proxy_slug: only encryption configurations have a proxy slug`);
  }
  const slug = proxySlugOf(configuration);
  if (slug !== null) {
    const origin = configuration.proxy_slug === undefined ? ' (derived from the name; set proxy_slug)' : '';
    const holder = await store.configurations.findBySlug(slug);
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

async function checkApiKeys(context: CheckContext, apiKeys: readonly SeedApiKey[], literalKeyHashes: Map<SeedApiKey, Buffer>): Promise<void> {
  const { problems, store } = context;
  const permissionNames = new Set(await store.roles.permissionNames());
  const names = new Set<string>();
  const hashes = new Set<string>();
  for (const [i, apiKey] of apiKeys.entries()) {
    const path = `seed.api_keys[${i}]`;
    if (names.has(apiKey.name)) problems.push(`${path}.name: "${apiKey.name}" is listed twice`);
    names.add(apiKey.name);
    checkText(context, `${path}.name`, apiKey.name);
    const userIssue = await userProblem(context, apiKey.user);
    if (userIssue !== undefined) problems.push(`${path}.user: ${userIssue}`);
    (apiKey.permissions ?? []).forEach((permission, j) => {
      if (!permissionNames.has(permission)) problems.push(`${path}.permissions[${j}]: unknown permission "${permission}"`);
    });
    for (const [j, ref] of (apiKey.configurations ?? []).entries()) {
      if (!(await knownConfiguration(context, ref))) problems.push(`${path}.configurations[${j}]: unknown configuration "${ref}"`);
    }
    const hash = literalKeyHashes.get(apiKey);
    if (hash === undefined) continue;
    // Messages name the other key, never the key value itself.
    const hex = hash.toString('hex');
    const holder = await store.apiKeys.findByHash(hash);
    if (hashes.has(hex)) problems.push(`${path}.key: the same key is given to another API key of the seed`);
    else if (holder !== undefined && holder.name !== apiKey.name) problems.push(`${path}.key: the key is already used by API key "${holder.name}"`);
    hashes.add(hex);
  }
}

/** See renameTarget: the holder of a slug the entry claims is the classification it renames. */
async function isRenamed(context: CheckContext, holder: Classification, classification: SeedClassification): Promise<boolean> {
  return holder.source === 'seed' && !context.seedClassificationNames.has(holder.name) && (await context.store.classifications.findByName(classification.name)) === undefined;
}

async function checkClassifications(context: CheckContext, classifications: readonly SeedClassification[]): Promise<void> {
  const { problems, store } = context;
  const names = new Set<string>();
  const slugs = new Set<string>();
  for (const [i, classification] of classifications.entries()) {
    const path = `seed.classifications[${i}]`;
    if (names.has(classification.name)) problems.push(`${path}.name: "${classification.name}" is listed twice`);
    names.add(classification.name);
    checkText(context, `${path}.name`, classification.name);
    if (typeof classification.description === 'string') checkText(context, `${path}.description`, classification.description);
    if (typeof classification.emoji === 'string') checkText(context, `${path}.emoji`, classification.emoji);
    (classification.providers ?? []).forEach((provider, j) =>
      (provider.gws_groups ?? []).forEach((group, k) => {
        if (group.name !== undefined) checkText(context, `${path}.providers[${j}].gws_groups[${k}].name`, group.name);
      }),
    );
    const slug = classification.slug;
    if (slug !== undefined) {
      const holder = await store.classifications.findBySlug(slug);
      if (slug === '') problems.push(`${path}.slug: must not be empty`);
      else if (slugs.has(slug)) problems.push(`${path}.slug: "${slug}" is listed twice`);
      else if (holder !== undefined && holder.name !== classification.name && !(await isRenamed(context, holder, classification))) {
        problems.push(`${path}.slug: "${slug}" is already used by classification "${holder.name}"`);
      }
      slugs.add(slug);
    }
    for (const [j, email] of (classification.users ?? []).entries()) {
      const userIssue = await userProblem(context, email);
      if (userIssue !== undefined) problems.push(`${path}.users[${j}]: ${userIssue}`);
    }
    (classification.roles ?? []).forEach((role, j) => {
      if (!context.roleNames.has(role)) problems.push(`${path}.roles[${j}]: unknown role "${role}"`);
    });
    for (const [j, grant] of (classification.reveal ?? []).entries()) {
      for (const [k, email] of (grant.to.users ?? []).entries()) {
        const userIssue = await userProblem(context, email);
        if (userIssue !== undefined) problems.push(`${path}.reveal[${j}].to.users[${k}]: ${userIssue}`);
      }
      (grant.to.roles ?? []).forEach((role, k) => {
        if (!context.roleNames.has(role)) problems.push(`${path}.reveal[${j}].to.roles[${k}]: unknown role "${role}"`);
      });
      (grant.to.groups ?? []).forEach((group, k) => checkText(context, `${path}.reveal[${j}].to.groups[${k}]`, group));
    }
    const refs = new Set<string>();
    for (const [j, provider] of (classification.providers ?? []).entries()) {
      const ref = provider.configuration;
      if (!(await knownConfiguration(context, ref))) problems.push(`${path}.providers[${j}].configuration: unknown configuration "${ref}"`);
      else if (refs.has(ref)) problems.push(`${path}.providers[${j}].configuration: "${ref}" is listed twice`);
      refs.add(ref);
    }
  }
}

/**
 * Names and descriptions are shown to people: no control characters, no bidirectional
 * formatting characters (DESIGN §13). The value itself is not repeated: it may not print.
 */
function checkText(context: CheckContext, path: string, value: string): void {
  if (hasUnsafeText(value)) context.problems.push(`${path}: must not contain control characters or bidirectional formatting characters`);
}

/** What the apply step of one run shares. */
interface ApplyContext {
  readonly store: Transaction;
  readonly deps: SeedDeps;
  readonly passwords: PasswordPlan;
  readonly result: SeedResult;
}

async function applyUser(context: ApplyContext, user: SeedUser): Promise<void> {
  const { store, result } = context;
  const roleIds = await idsOf(user.roles ?? [], async (name) => mustFind(await store.roles.findByName(name), 'role', name).id);
  const existing = await store.users.findByEmail(user.email);
  const passwordHash = newPasswordHash(context, user, existing?.passwordHash ?? null);
  if (existing === undefined) {
    await store.users.create({
      name: user.name,
      email: user.email,
      passwordHash: passwordHash ?? null,
      roleIds,
      disabled: user.disabled ?? false,
      source: 'seed',
    });
    result.changes.push(`created user "${user.email}"`);
    return;
  }
  const patch: UserPatch = {};
  if (existing.name !== user.name) patch.name = user.name;
  if (existing.email !== normalizeEmail(user.email)) patch.email = user.email;
  if (user.disabled !== undefined && existing.disabled !== user.disabled) patch.disabled = user.disabled;
  if (passwordHash !== undefined) patch.passwordHash = passwordHash;
  if (Object.keys(patch).length > 0) await store.users.update(existing.id, patch);
  const currentRoleIds = (await store.users.rolesOf(existing.id)).map((role) => role.id);
  const rolesChanged = !sameSet(currentRoleIds, roleIds);
  if (rolesChanged) await store.users.setRoles(existing.id, roleIds);
  if (Object.keys(patch).length > 0 || rolesChanged) result.changes.push(`updated user "${user.email}"`);
}

/** The hash to store, or undefined to leave the stored one (or none) alone. */
function newPasswordHash(context: ApplyContext, user: SeedUser, storedHash: string | null): string | undefined {
  if (user.password === undefined) return undefined;
  const planned = context.passwords.get(normalizeEmail(user.email));
  const newHash = planned !== undefined && planned.storedHash === storedHash ? planned.newHash : decidePassword(user.password, storedHash, context.deps);
  return newHash ?? undefined;
}

/** Member emails are stored normalised, as users' are: that is how they are compared. */
function groupsOf(configuration: SeedConfiguration): Array<GwsGroup & { members: string[] }> | undefined {
  return configuration.groups?.map((group) => ({ ...groupRef(group), members: (group.members ?? []).map(normalizeEmail) }));
}

async function applyConfiguration(context: ApplyContext, configuration: SeedConfiguration): Promise<void> {
  const { store, deps, result } = context;
  const proxySlug = proxySlugOf(configuration);
  const groups = groupsOf(configuration);
  const existing = await store.configurations.findByName(configuration.name);
  if (existing === undefined) {
    const id = randomUUID();
    let keyringId: Buffer | null = null;
    let firstWrappedKey: Buffer | null = null;
    if (configuration.type === 'encryption') {
      keyringId = deps.generateKeyringId();
      firstWrappedKey = deps.wrapKey(id, 1, deps.generateDataKey());
    }
    await store.configurations.create({
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
    result.changes.push(`created configuration "${configuration.name}"`);
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
  if (Object.keys(patch).length === 0) return;
  await store.configurations.update(existing.id, patch);
  result.changes.push(`updated configuration "${configuration.name}"`);
}

/** Names win over slugs, so a configuration named like another's slug is still reachable by name. */
async function resolveConfiguration(store: Transaction, ref: string): Promise<Configuration> {
  return mustFind((await store.configurations.findByName(ref)) ?? (await store.configurations.findBySlug(ref)), 'configuration', ref);
}

async function applyApiKey(context: ApplyContext, apiKey: SeedApiKey, literalHash: Buffer | undefined): Promise<void> {
  const { store, deps, result } = context;
  const userId = mustFind(await store.users.findByEmail(apiKey.user), 'user', apiKey.user).id;
  const permissions = [...(apiKey.permissions ?? [])];
  const configurations = unique(await idsOf(apiKey.configurations ?? [], async (ref) => (await resolveConfiguration(store, ref)).id));
  const existing = await store.apiKeys.findByName(apiKey.name);
  if (existing === undefined) {
    const key = apiKey.key ?? deps.generateApiKey();
    await store.apiKeys.create({
      name: apiKey.name,
      prefix: key.slice(0, API_KEY_PREFIX_LENGTH),
      keyHash: literalHash ?? deps.hashApiKey(key),
      userId,
      permissions,
      configurations,
      source: 'seed',
    });
    if (apiKey.key === undefined) result.createdApiKeys.push({ name: apiKey.name, key });
    result.changes.push(`created API key "${apiKey.name}"`);
    return;
  }
  if (existing.status === 'revoked') {
    result.warnings.push(`API key "${apiKey.name}" is revoked and stays revoked: give the entry a new name (and key) to issue another`);
  }
  let changed = false;
  // A key generated on an earlier run is kept: its value was shown once and is not stored.
  if (apiKey.key !== undefined && literalHash !== undefined && !existing.keyHash.equals(literalHash)) {
    await store.apiKeys.replaceHash(existing.id, apiKey.key.slice(0, API_KEY_PREFIX_LENGTH), literalHash);
    changed = true;
  }
  const patch: ApiKeyPatch = {};
  if (existing.userId !== userId) patch.userId = userId;
  if (!sameList(existing.permissions, permissions)) patch.permissions = permissions;
  if (!sameList(existing.configurations, configurations)) patch.configurations = configurations;
  if (Object.keys(patch).length > 0) {
    await store.apiKeys.update(existing.id, patch);
    changed = true;
  }
  if (changed) result.changes.push(`updated API key "${apiKey.name}"`);
}

/**
 * A classification the seed created under a name it no longer declares, whose slug a seed
 * entry with a new name claims: that entry renames it, and tokens classified with it (they
 * carry its id) stay readable. Without a slug in the file, a new name is a new classification.
 */
async function renameTarget(store: Transaction, classification: SeedClassification, declared: ReadonlySet<string>): Promise<Classification | undefined> {
  if (classification.slug === undefined || (await store.classifications.findByName(classification.name)) !== undefined) return undefined;
  const holder = await store.classifications.findBySlug(classification.slug);
  return holder?.source === 'seed' && !declared.has(holder.name) ? holder : undefined;
}

async function applyClassification(context: ApplyContext, classification: SeedClassification, declared: ReadonlySet<string>): Promise<void> {
  const { store, result } = context;
  const userIds = unique(await idsOf(classification.users ?? [], async (email) => mustFind(await store.users.findByEmail(email), 'user', email).id));
  const roleIds = unique(await idsOf(classification.roles ?? [], async (name) => mustFind(await store.roles.findByName(name), 'role', name).id));
  const providers: ClassificationProvider[] = [];
  for (const provider of classification.providers ?? []) {
    providers.push({ configurationId: (await resolveConfiguration(store, provider.configuration)).id, gwsGroups: (provider.gws_groups ?? []).map(groupRef) });
  }
  // The order members() returns, so comparing with what is stored is a plain string compare.
  providers.sort((a, b) => (a.configurationId < b.configurationId ? -1 : a.configurationId > b.configurationId ? 1 : 0));
  const reveal: RevealGrant[] = [];
  for (const grant of classification.reveal ?? []) reveal.push(await revealGrant(store, grant));
  // Declarative, as the member lists: a file without `default` means deny, whatever the API set.
  const revealDefault: RevealDefault = { level: classification.default ?? 'deny', mask: classification.default_mask ?? null };

  const existing = (await store.classifications.findByName(classification.name)) ?? (await renameTarget(store, classification, declared));
  if (existing === undefined) {
    await store.classifications.create({
      name: classification.name,
      slug: classification.slug ?? await store.classifications.uniqueSlug(classification.name),
      description: classification.description ?? null,
      bgColor: classification.bg_color,
      fgColor: classification.fg_color,
      emoji: classification.emoji ?? null,
      source: 'seed',
      userIds,
      roleIds,
      providers,
      reveal,
      revealDefault,
    });
    result.changes.push(`created classification "${classification.name}"`);
    return;
  }
  const patch: ClassificationPatch = {};
  if (existing.name !== classification.name) patch.name = classification.name;
  if (classification.slug !== undefined && existing.slug !== classification.slug) patch.slug = classification.slug;
  if (classification.description !== undefined && existing.description !== classification.description) {
    patch.description = classification.description;
  }
  if (existing.bgColor !== classification.bg_color) patch.bgColor = classification.bg_color;
  if (existing.fgColor !== classification.fg_color) patch.fgColor = classification.fg_color;
  if (classification.emoji !== undefined && existing.emoji !== classification.emoji) patch.emoji = classification.emoji;
  const members = await store.classifications.members(existing.id);
  if (!sameSet(members.userIds, userIds)) patch.userIds = userIds;
  if (!sameSet(members.roleIds, roleIds)) patch.roleIds = roleIds;
  if (JSON.stringify(members.providers) !== JSON.stringify(providers)) patch.providers = providers;
  if (grantsText(existing.reveal) !== grantsText(reveal)) patch.reveal = reveal;
  if (existing.revealDefault.level !== revealDefault.level || maskText(existing.revealDefault.mask) !== maskText(revealDefault.mask)) {
    patch.revealDefault = revealDefault;
  }
  if (Object.keys(patch).length === 0) return;
  await store.classifications.update(existing.id, patch);
  result.changes.push(
    patch.name === undefined ? `updated classification "${classification.name}"` : `renamed classification "${existing.name}" to "${classification.name}"`,
  );
}

/** A grant as the store keeps it: users and roles by id (await check() has made sure they exist). */
async function revealGrant(store: Transaction, grant: SeedRevealGrant): Promise<RevealGrant> {
  return {
    to: {
      users: unique(await idsOf(grant.to.users ?? [], async (email) => mustFind(await store.users.findByEmail(email), 'user', email).id)),
      roles: unique(await idsOf(grant.to.roles ?? [], async (name) => mustFind(await store.roles.findByName(name), 'role', name).id)),
      groups: unique(grant.to.groups ?? []),
    },
    level: grant.level,
    mask: grant.level === 'mask' ? (grant.mask ?? null) : null,
  };
}

/** Drops absent optional keys so the stored JSON, and comparisons with it, are stable. */
function groupRef(group: SeedGroupRef): GwsGroup {
  const ref: GwsGroup = { id: group.id };
  if (group.name !== undefined) ref.name = group.name;
  if (group.email !== undefined) ref.email = group.email;
  return ref;
}

/** await check() has already reported anything missing; reaching this throw is a bug. */
function mustFind<T>(value: T | undefined, what: string, key: string): T {
  if (value === undefined) throw new Error(`Seed: ${what} "${key}" disappeared after validation.`);
  return value;
}

/** `find` for each of `names` in turn (one transaction's statements run one at a time). */
async function idsOf<T>(names: readonly string[], find: (name: string) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (const name of names) out.push(await find(name));
  return out;
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
