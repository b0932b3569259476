/**
 * Key versions of an encryption configuration: list them, and destroy one
 * (crypto-shredding). Rotation itself is `POST /configurations/{id}/rotate` in
 * configurations.ts. Destroying is the one irreversible operation of the API, so it
 * takes a typed confirmation naming the configuration and the version, and refuses the
 * version new tokens are written with.
 */
import { recordActivity } from './activity.ts';
import { requireConfigurationScope, type Caller } from '../auth/caller.ts';
import { MAX_KEY_VERSION } from '../crypto/keyring.ts';
import type { Services } from '../services.ts';
import { NotFoundError, ValidationError, type ValidationErrors } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendJson } from '../http/respond.ts';
import type { Configuration, DataKey } from '../store/configurations.ts';
import type { ApiRoute } from './routes.ts';
import { Validator } from './validation.ts';

export const routes: ApiRoute[] = [
  { method: 'GET', path: '/api/v3/configurations/:id/keys', permission: 'configurations.view', write: false, handler: list },
  { method: 'POST', path: '/api/v3/configurations/:id/keys/:version/destroy', permission: 'configurations.rotate', write: true, handler: destroy },
];

/** `current` writes new tokens; `active` still decrypts; `retired` is below min_decryption_version; `destroyed` is gone. */
export type KeyStatus = 'current' | 'active' | 'retired' | 'destroyed';

export interface KeyVersionView {
  version: number;
  status: KeyStatus;
  created_at: string;
  destroyed_at: string | null;
}

function list(ctx: RequestContext, services: Services, caller: Caller): void {
  const configuration = findEncryption(ctx, services, caller);
  sendJson(ctx, 200, services.store.configurations.keys(configuration.id).map((key) => keyVersionView(configuration, key)));
}

async function destroy(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const configuration = findEncryption(ctx, services, caller);
  const version = versionParam(ctx.params['version']);
  const v = new Validator(await readJson(ctx));
  const destroyed = destroyKeyVersion(services, configuration, version, v.input['confirm']);
  recordActivity(ctx, services, caller, 'configuration.key_destroyed', `Destroyed key version ${version} of configuration "${configuration.name}".`);
  sendJson(ctx, 200, destroyed);
}

/**
 * Destroys `version` after checking the confirmation; shared with `svc-sidecar keys
 * destroy`. 404 for a version the configuration never had; 422 (all problems at once)
 * for a wrong confirmation, the current version, or one already destroyed.
 */
export function destroyKeyVersion(services: Pick<Services, 'store' | 'codecs'>, configuration: Configuration, version: number, confirm: unknown): KeyVersionView {
  const { configurations } = services.store;
  const key = configurations.keys(configuration.id).find((k) => k.version === version);
  if (key === undefined) throw new NotFoundError();
  const errors: ValidationErrors = {};
  if (key.destroyedAt !== null) errors['version'] = [alreadyDestroyed(version)];
  else if (version === configuration.keyVersion) errors['version'] = [isCurrent(version)];
  const expected = `${configuration.name}/v${version}`;
  if (confirm !== expected) errors['confirm'] = [`The confirm field must be "${expected}".`];
  if (Object.keys(errors).length > 0) throw new ValidationError(errors);

  // The store re-checks inside its write transaction: another process may have rotated,
  // destroyed or deleted since the read above.
  const outcome = configurations.destroyKey(configuration.id, version);
  if (outcome === 'not-found') throw new NotFoundError();
  if (outcome === 'already-destroyed') throw new ValidationError({ version: [alreadyDestroyed(version)] });
  if (outcome === 'current') throw new ValidationError({ version: [isCurrent(version)] });
  // Rebuilt now rather than on the next request, so the destroyed version's key schedule
  // is dropped at once; the other versions' material carries over.
  const found = configurations.findById(configuration.id);
  if (found === undefined) services.codecs.forget(configuration.id);
  else services.codecs.get(found);
  const after = found ?? configuration;
  const destroyed = configurations.keys(configuration.id).find((k) => k.version === version) ?? key;
  return keyVersionView(after, destroyed);
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
function findEncryption(ctx: RequestContext, services: Services, caller: Caller): Configuration {
  const id = ctx.params['id'] ?? '';
  requireConfigurationScope(caller, id);
  const configuration = services.store.configurations.findById(id);
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
