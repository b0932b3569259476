/**
 * No escalation by minting (DESIGN §13). A management action that hands out a credential
 * (an API key created or rotated, a user created with roles) or widens who may decrypt
 * (a classification's members) may not give anyone a way to decrypt what the acting
 * caller cannot decrypt itself. Compared on effective access: permissions ∩ key scopes,
 * the configurations scope, and classification admission through users, roles and
 * provider groups.
 *
 * Owners are exempt (break-glass): an owner's action goes through, and the activity entry
 * of the action says that it was exempt and what the exemption let through. The exemption
 * covers what may be decrypted; a key still never mints a key with permissions or
 * configurations outside its own scope, whoever holds it.
 */
import { ActionUnauthorizedError } from '../errors.ts';
import type { ClassificationMembers } from '../store/classifications.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import type { RevealGrant } from '../store/reveal-rules.ts';
import { admitsPlain, callerIdentity, readableClassifications, showsAtLeast, type Identity, type Reveal } from './classification-access.ts';
import { withinConfigurationScope, type Caller } from './caller.ts';

const DECRYPT = 'data.decrypt';

/** What a credential can decrypt. */
export interface Reach {
  /** `data.decrypt` is among its effective permissions. */
  readonly decrypt: boolean;
  /** Configuration ids it may use; null: all. */
  readonly configurations: ReadonlySet<string> | null;
  /**
   * The classifications it can read something of — their plaintext (members, `plain`
   * grants) or part of it (a `mask`) — and what it gets of each (DESIGN §14).
   */
  readonly classifications: ReadonlyMap<number, Reveal>;
}

export function callerReach(store: Store, caller: Caller): Reach {
  return {
    decrypt: caller.permissions.has(DECRYPT),
    configurations: caller.configurations,
    classifications: readableClassifications(store, callerIdentity(caller)),
  };
}

/**
 * The reach of `who` holding `permissions` (already narrowed by any key scope) within
 * `configurations` (empty: all). A user's own login is unscoped: all configurations.
 */
export function identityReach(store: Store, who: Identity, permissions: ReadonlySet<string>, configurations: readonly string[]): Reach {
  const decrypt = permissions.has(DECRYPT);
  return {
    decrypt,
    configurations: configurations.length === 0 ? null : new Set(configurations),
    // Without data.decrypt nothing is decrypted, whoever admits it.
    classifications: decrypt ? readableClassifications(store, who) : new Map(),
  };
}

/** Why `minted` can decrypt something `caller` cannot; empty when it cannot. */
function excess(store: Store, minted: Reach, caller: Reach): string[] {
  if (!minted.decrypt) return [];
  if (!caller.decrypt) return ['it can decrypt and the caller cannot'];
  const reasons: string[] = [];
  const scope = caller.configurations;
  if (scope !== null && (minted.configurations === null || [...minted.configurations].some((id) => !scope.has(id)))) {
    reasons.push("it can decrypt with configurations outside the caller's scope");
  }
  const beyond = [...minted.classifications].filter(([id, reveal]) => !showsAtLeast(caller.classifications.get(id), reveal)).map(([id]) => id);
  if (beyond.length > 0) {
    const names = beyond.sort((a, b) => a - b).map((id) => {
      const classification = stateOf(store).classification(id);
      return classification === undefined ? `id ${id}` : `"${classification.name}" (id ${id})`;
    });
    reasons.push(`it can decrypt classification${names.length === 1 ? '' : 's'} ${names.join(', ')}, which the caller is not admitted to`);
  }
  return reasons;
}

export function isOwner(store: Store, caller: Caller): boolean {
  const owner = stateOf(store).roleByName('owner');
  return owner !== undefined && caller.roleIds.includes(owner.id);
}

/**
 * Throws 403 `This action is unauthorized.` when `minted` can decrypt what the caller
 * cannot, unless the caller is an owner. Returns the note for the activity entry of an
 * owner's action that needed the exemption, else null.
 */
export function authorizeMinting(store: Store, caller: Caller, minted: Reach): string | null {
  const reasons = excess(store, minted, callerReach(store, caller));
  if (reasons.length === 0) return null;
  if (!isOwner(store, caller)) throw new ActionUnauthorizedError();
  return exemptionNote(reasons);
}

/**
 * Changing who a classification admits, or how much its reveal rules show to whom (DESIGN
 * §14), gives others that classification, with every configuration: only a caller who
 * can decrypt it so may do it. For an existing classification that is decided on its
 * members and reveal grants as they are; for one being created, on those it is created
 * with (a caller may create one that admits nobody, or itself). Admitted means shown the
 * plaintext: a member, or named by a `plain` grant. Returns the owner's exemption note, as
 * authorizeMinting.
 */
export function authorizeMemberChange(
  store: Store,
  caller: Caller,
  target: { readonly name: string; readonly members: ClassificationMembers; readonly reveal: readonly RevealGrant[] },
): string | null {
  const reasons: string[] = [];
  if (!caller.permissions.has(DECRYPT)) reasons.push('the caller cannot decrypt');
  if (caller.configurations !== null) reasons.push("the caller's key is limited to some configurations");
  if (!admitsPlain(store, target.members, target.reveal, callerIdentity(caller))) reasons.push(`the caller is not admitted to classification "${target.name}"`);
  if (reasons.length === 0) return null;
  if (!isOwner(store, caller)) throw new ActionUnauthorizedError();
  return exemptionNote(reasons);
}

/**
 * An owner's credential is itself break-glass: it reaches every classification through
 * its owner's exemption, whatever admits it today. Only an owner may mint one (a key for
 * an owner, rotating an owner's key, a user with the owner role).
 */
export function authorizeOwnerRole(store: Store, caller: Caller, roleIds: readonly number[]): void {
  const owner = stateOf(store).roleByName('owner');
  if (owner !== undefined && roleIds.includes(owner.id) && !isOwner(store, caller)) throw new ActionUnauthorizedError();
}

export function exemptionNote(reasons: readonly string[]): string {
  return ` Exempt as owner (break-glass): ${reasons.join('; ')}.`;
}

/** A credential may not carry permissions the caller does not hold (owners included: a narrowed key of an owner stays narrow). */
export function authorizePermissions(caller: Caller, permissions: Iterable<string>): void {
  for (const p of permissions) if (!caller.permissions.has(p)) throw new ActionUnauthorizedError();
}

/** authorizePermissions, and a key may not reach configurations outside the caller's scope (`configurations` empty: all). */
export function authorizeScope(caller: Caller, permissions: Iterable<string>, configurations: readonly string[]): void {
  authorizePermissions(caller, permissions);
  if (!withinConfigurationScope(caller, configurations)) throw new ActionUnauthorizedError();
}
