/**
 * API keys (DESIGN §9, §10; spec 2.8 and 4.10). A key's secret exists in exactly two
 * responses, create and rotate; the store keeps only its SHA-256 and its prefix.
 */
import { recordActivity } from './activity.ts';
import { apiKeyPrefix, generateApiKey, hashApiKey } from '../auth/api-keys.ts';
import { withinConfigurationScope, type Caller } from '../auth/caller.ts';
import { authorizeMinting, authorizeOwnerRole, authorizeScope, identityReach } from '../auth/minting.ts';
import { PERMISSIONS } from '../config/schema.ts';
import type { Services } from '../services.ts';
import { ForbiddenError, NotFoundError, ValidationError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import type { ApiKey } from '../store/api-keys.ts';
import { lockKeyScope } from '../store/configurations.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import { isUniqueViolation } from '../store/sql.ts';
import type { User } from '../store/users.ts';
import { apiKeyView } from './presenters.ts';
import type { Handlers } from './routes.ts';
import { attributeName, Validator } from './validation.ts';

const NAME_MAX = 64;
/** A key's configuration scope; longer lists are refused rather than looked up one by one. */
const CONFIGURATIONS_MAX = 256;
const CATALOGUE: ReadonlySet<string> = new Set(PERMISSIONS);

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { list, create, show, revoke, rotate } satisfies Handlers;

/**
 * A plain array, not a page envelope (spec 4.10). A key limited to some configurations
 * lists only the keys limited to configurations within its own: a key's listing shows its
 * configurations whole, and an unlimited key's scope reaches every one.
 */
async function list(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const { store } = services;
  sendJson(ctx, 200, (await store.apiKeys.list()).filter((key) => withinConfigurationScope(caller, key.configurations)).map((key) => apiKeyView(store, key)));
}

async function create(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const { store } = services;
  const v = new Validator(await readJson(ctx));
  const input = await validateCreate(v, store, caller);
  v.check();
  const exempt = authorizeKey(store, caller, input.user, input.permissions, input.configurations);
  const secret = generateApiKey();
  const key = await insert(store, input, secret);
  await recordActivity(ctx, services, caller, 'api-key.created', `Created API key "${key.name}" for ${input.user.email}.${exempt ?? ''}`);
  sendJson(ctx, 201, { ...apiKeyView(store, key), key: secret });
}

async function show(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  sendJson(ctx, 200, apiKeyView(services.store, await find(ctx, services, caller)));
}

/** Idempotent: revoking a revoked key keeps its first `revoked_at`. */
async function revoke(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const key = await findManageable(ctx, services, caller);
  if (await services.store.apiKeys.revokeActive(key.id)) await recordActivity(ctx, services, caller, 'api-key.revoked', `Revoked API key "${key.name}".`);
  sendEmpty(ctx, 204);
}

/** The new secret replaces the hash in one statement: the old key fails from the next request on. */
async function rotate(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const { store } = services;
  const key = await findManageable(ctx, services, caller);
  // Rotating hands over the key's new secret: only to a caller who could have created it.
  const user = await store.users.findById(key.userId);
  if (user === undefined) throw new NotFoundError();
  const exempt = authorizeKey(store, caller, user, key.permissions, key.configurations);
  if (key.status === 'revoked') throw new ValidationError({ status: ['A revoked API key cannot be rotated.'] });
  const secret = generateApiKey();
  if ((await store.apiKeys.replaceHash(key.id, apiKeyPrefix(secret), hashApiKey(secret))) === undefined) throw new NotFoundError();
  await recordActivity(ctx, services, caller, 'api-key.rotated', `Rotated API key "${key.name}".${exempt ?? ''}`);
  sendJson(ctx, 200, { key: secret });
}

// ---------------------------------------------------------------------------------------
// Steps

/** The key named by the path; one outside a limited caller's scope is refused as its configurations are. */
async function find(ctx: RequestContext, services: Services, caller: Caller): Promise<ApiKey> {
  const key = await services.store.apiKeys.findById(ctx.params['id'] ?? '');
  if (key === undefined) throw new NotFoundError();
  if (!withinConfigurationScope(caller, key.configurations)) throw new ForbiddenError();
  return key;
}

/** A key the caller may revoke or rotate: its own user's, or anyone's with `users.manage`. */
async function findManageable(ctx: RequestContext, services: Services, caller: Caller): Promise<ApiKey> {
  const key = await find(ctx, services, caller);
  if (key.userId !== caller.user.id && !caller.permissions.has('users.manage')) throw new ForbiddenError();
  return key;
}

interface CreateInput {
  name: string;
  user: User;
  /** Empty: the key narrows nothing (it has all of its user's permissions). */
  permissions: string[];
  /** Empty: every configuration. */
  configurations: string[];
}

async function validateCreate(v: Validator, store: Store, caller: Caller): Promise<CreateInput> {
  const name = v.string('name', { required: true, max: NAME_MAX, text: true });
  if (typeof name === 'string' && (await store.apiKeys.findByName(name)) !== undefined) v.fail('name', 'The name has already been taken.');

  // Who the key is for comes first: acting for someone else needs users.manage, whether
  // or not that user exists, so the answer says nothing about other users.
  const userId = v.integer('user_id');
  if (typeof userId === 'number' && userId !== caller.user.id && !caller.permissions.has('users.manage')) throw new ForbiddenError();
  const state = stateOf(store);
  const user = typeof userId === 'number' ? state.user(userId) : caller.user;
  if (user === undefined) v.fail('user_id', 'The selected user id is invalid.');

  const granted = user === undefined ? new Set<string>() : state.permissionsOf(user.id);
  const permissions = v.array('permissions', (value, key) => {
    if (typeof value !== 'string') {
      v.fail(key, `The ${attributeName(key)} field must be a string.`);
      return undefined;
    }
    if (!CATALOGUE.has(value)) {
      v.fail(key, `The selected ${attributeName(key)} is invalid.`);
      return undefined;
    }
    if (user !== undefined && !granted.has(value)) {
      v.fail(key, `The ${attributeName(key)} field names a permission the key's user does not have.`);
      return undefined;
    }
    return value;
  }, { max: PERMISSIONS.length });

  const configurations = v.array('configurations', (value, key) => {
    if (typeof value !== 'string') {
      v.fail(key, `The ${attributeName(key)} field must be a string.`);
      return undefined;
    }
    if (state.configuration(value) === undefined) {
      v.fail(key, `The selected ${attributeName(key)} is invalid.`);
      return undefined;
    }
    return value;
  }, { max: CONFIGURATIONS_MAX });

  return {
    name: name ?? '',
    user: user ?? caller.user,
    permissions: [...new Set(permissions ?? [])],
    configurations: [...new Set(configurations ?? [])],
  };
}

/**
 * A key may not mint (or take over by rotation) a key that can do more than itself
 * (DESIGN §13, auth/minting.ts): the key's effective permissions (its scope ∩ its user's
 * roles; all of its user's when it lists none) must be ones the caller holds; a caller
 * limited to some configurations may only handle keys limited to (some of) those; and the
 * key may not decrypt a classification the caller cannot, which only an owner may override.
 * Returns the owner's exemption note for the activity entry.
 */
function authorizeKey(store: Store, caller: Caller, user: User, scope: readonly string[], configurations: readonly string[]): string | null {
  const state = stateOf(store);
  const granted = state.permissionsOf(user.id);
  const effective = scope.length === 0 ? granted : new Set(scope.filter((p) => granted.has(p)));
  authorizeScope(caller, effective, configurations);
  const identity = { userId: user.id, roleIds: state.rolesOf(user.id).map((r) => r.id), email: user.email };
  authorizeOwnerRole(store, caller, identity.roleIds);
  return authorizeMinting(store, caller, identityReach(store, identity, effective, configurations));
}

/**
 * The configurations were checked against the state view, which another instance's
 * deletion may not have reached yet: they are checked again in the store, under the lock
 * deletions take, so a key is never made limited to configurations already gone.
 */
async function insert(store: Store, input: CreateInput, secret: string): Promise<ApiKey> {
  try {
    return await store.transaction(async (tx) => {
      if (input.configurations.length > 0) {
        await lockKeyScope(tx);
        for (const [i, id] of input.configurations.entries()) {
          const field = `configurations.${i}`;
          if ((await tx.configurations.findById(id)) === undefined) throw new ValidationError({ [field]: [`The selected ${attributeName(field)} is invalid.`] });
        }
      }
      return tx.apiKeys.create({
        name: input.name,
        prefix: apiKeyPrefix(secret),
        keyHash: hashApiKey(secret),
        userId: input.user.id,
        permissions: input.permissions,
        configurations: input.configurations,
      });
    });
  } catch (err) {
    // Another writer of the same database file took the name after we checked.
    if (isUniqueViolation(err)) throw new ValidationError({ name: ['The name has already been taken.'] });
    throw err;
  }
}

