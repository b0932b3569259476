/**
 * Key versions of an encryption configuration: list them, and destroy one
 * (crypto-shredding). Rotation itself is `POST /configurations/{id}/rotate` in
 * configurations.ts. Destroying is the one irreversible operation of the API, so it
 * takes a typed confirmation naming the configuration and the version, refuses the
 * version new tokens are written with, and refuses one that was current less than
 * `keys.destroy_after` ago unless forced: requests in flight and replicas that have not
 * polled yet may still be writing tokens with it, and those tokens would be born
 * undecryptable (DESIGN §13).
 */
import { recordActivity } from './activity.ts';
import { requireConfigurationScope, type Caller } from '../auth/caller.ts';
import { MAX_KEY_VERSION } from '../crypto/keyring.ts';
import type { Services } from '../services.ts';
import { KeyDestroyTooSoonError, NotFoundError, ValidationError, type ValidationErrors } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendJson } from '../http/respond.ts';
import type { Configuration, DataKey } from '../store/configurations.ts';
import type { Handlers } from './routes.ts';
import { Validator } from './validation.ts';

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { list, destroy } satisfies Handlers;

/** `current` writes new tokens; `active` still decrypts; `retired` is below min_decryption_version; `destroyed` is gone. */
export type KeyStatus = 'current' | 'active' | 'retired' | 'destroyed';

export interface KeyVersionView {
  version: number;
  status: KeyStatus;
  created_at: string;
  destroyed_at: string | null;
}

async function list(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const configuration = await findEncryption(ctx, services, caller);
  sendJson(ctx, 200, (await services.store.configurations.keys(configuration.id)).map((key) => keyVersionView(configuration, key)));
}

async function destroy(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const configuration = await findEncryption(ctx, services, caller);
  const version = versionParam(ctx.params['version']);
  const v = new Validator(await readJson(ctx));
  const destroyed = await destroyKeyVersion(services, configuration, version, v.input['confirm'], v.input['force']);
  await recordActivity(ctx, services, caller, 'configuration.key_destroyed', `Destroyed key version ${version} of configuration "${configuration.name}"${destroyed.forced ? FORCED : ''}.`);
  sendJson(ctx, 200, destroyed.view);
}

/** How the activity log marks a destruction that `force` let through the grace period. */
export const FORCED = ' (forced, within keys.destroy_after)';

/**
 * Destroys `version` after checking the confirmation; shared with `svc-sidecar keys
 * destroy`. `forced`: the version was within its grace period, and `force` let it go. 404 for a version the configuration never had; 422 (all problems at once)
 * for a wrong confirmation, a `force` that is not a boolean, the current version, or one
 * already destroyed; 409 for one superseded less than `keys.destroy_after` ago, unless
 * `force` is `true`.
 */
export async function destroyKeyVersion(
  services: Pick<Services, 'store' | 'codecs' | 'config'>,
  configuration: Configuration,
  version: number,
  confirm: unknown,
  force: unknown = false,
): Promise<{ view: KeyVersionView; forced: boolean }> {
  const { configurations } = services.store;
  const key = (await configurations.keys(configuration.id)).find((k) => k.version === version);
  if (key === undefined) throw new NotFoundError();
  const errors: ValidationErrors = {};
  if (key.destroyedAt !== null) errors['version'] = [alreadyDestroyed(version)];
  else if (version === configuration.keyVersion) errors['version'] = [isCurrent(version)];
  const expected = `${configuration.name}/v${version}`;
  if (confirm !== expected) errors['confirm'] = [`The confirm field must be "${expected}".`];
  // Only a JSON true overrides the grace period: "true", 1 and the like are refused, not guessed at.
  if (force !== undefined && typeof force !== 'boolean') errors['force'] = ['The force field must be true or false.'];
  if (Object.keys(errors).length > 0) throw new ValidationError(errors);

  const graceMs = services.config.keys.destroy_after;
  const graceBound = graceMs === 0 ? null : new Date(Date.now() - graceMs).toISOString();
  const withinGrace = graceBound !== null && (key.supersededAt === null || key.supersededAt >= graceBound);
  // The store re-checks inside its write transaction: another process may have rotated,
  // destroyed or deleted since the read above.
  const outcome = await configurations.destroyKey(configuration.id, version, force === true ? null : graceBound);
  if (outcome === 'not-found') throw new NotFoundError();
  if (outcome === 'already-destroyed') throw new ValidationError({ version: [alreadyDestroyed(version)] });
  if (outcome === 'current') throw new ValidationError({ version: [isCurrent(version)] });
  if (outcome === 'too-recent') throw new KeyDestroyTooSoonError(version, destroyableAt((await configurations.keys(configuration.id)).find((k) => k.version === version), graceMs));
  // Rebuilt now rather than on the next request, so the destroyed version's key schedule
  // is dropped at once; the other versions' material carries over.
  const found = await configurations.findById(configuration.id);
  if (found === undefined) services.codecs.forget(configuration.id);
  else services.codecs.refresh(found);
  const after = found ?? configuration;
  const destroyed = (await configurations.keys(configuration.id)).find((k) => k.version === version) ?? key;
  return { view: keyVersionView(after, destroyed), forced: force === true && withinGrace };
}

/** When the grace period of a superseded version ends; a version superseded at an unknown time counts from now. */
function destroyableAt(key: DataKey | undefined, graceMs: number): string {
  const superseded = key?.supersededAt == null ? Date.now() : Date.parse(key.supersededAt);
  return new Date(superseded + graceMs).toISOString();
}

function alreadyDestroyed(version: number): string {
  return `Key version ${version} is already destroyed.`;
}

function isCurrent(version: number): string {
  return `Key version ${version} is the current version and cannot be destroyed: rotate first.`;
}

export function keyVersionView(configuration: Configuration, key: DataKey): KeyVersionView {
  return {
    version: key.version,
    status: keyStatus(configuration, key),
    created_at: key.createdAt,
    destroyed_at: key.destroyedAt,
  };
}

function keyStatus(configuration: Configuration, key: DataKey): KeyStatus {
  if (key.destroyedAt !== null) return 'destroyed';
  if (key.version === configuration.keyVersion) return 'current';
  return key.version < configuration.minDecryptionVersion ? 'retired' : 'active';
}

/** The configuration in the path; 403 outside the key's scope (before existence), 404, or 422 for a provider configuration. */
async function findEncryption(ctx: RequestContext, services: Services, caller: Caller): Promise<Configuration> {
  const id = ctx.params['id'] ?? '';
  requireConfigurationScope(caller, id);
  const configuration = await services.store.configurations.findById(id);
  if (configuration === undefined) throw new NotFoundError();
  if (configuration.type !== 'encryption') throw new ValidationError({ type: ['Only encryption configurations have key versions.'] });
  return configuration;
}

/** A version in the path that cannot exist is simply not found. */
function versionParam(text: string | undefined): number {
  const version = text !== undefined && /^[1-9][0-9]{0,9}$/.test(text) ? Number(text) : 0;
  if (version < 1 || version > MAX_KEY_VERSION) throw new NotFoundError();
  return version;
}
