/**
 * Who may decrypt a classification (DESIGN §9): a listed user, a holder of a listed role,
 * or a member of a listed provider group. A classification that lists nobody admits nobody
 * (DESIGN §13, "No member, no access"): membership that empties — its last member removed,
 * its provider configuration deleted (the links go by ON DELETE CASCADE), a seed that drops
 * them — leaves it closed, never open.
 */
import { ForbiddenError } from '../errors.ts';
import type { ClassificationMembers } from '../store/classifications.ts';
import type { Store } from '../store/db.ts';
import { normalizeEmail } from '../store/identity-text.ts';
import { perStore } from '../store/stamped-cache.ts';
import type { Caller } from './caller.ts';

interface ProviderGroup {
  id: string;
  members?: unknown;
}

/** Who a classification admits, resolved from its members and its provider groups. */
interface Rule {
  readonly userIds: ReadonlySet<number>;
  readonly roleIds: ReadonlySet<number>;
  /** Normalised emails of the members of its provider groups. */
  readonly groupEmails: ReadonlySet<string>;
}

/** Whom to decide for: an existing user, or one about to be created (no id yet). */
export interface Identity {
  readonly userId: number | null;
  readonly roleIds: readonly number[];
  /** Compared normalised. */
  readonly email: string;
}

/**
 * Rules kept until the store changes (StampedCache): a decrypt reads no classification
 * rows while nothing was written.
 */
const rules = perStore<Rule | null>();

function ruleOf(store: Store, id: number): Rule | null {
  return rules(store).get(String(id), () => resolveRule(store, id));
}

/** null for a classification that no longer exists. */
function resolveRule(store: Store, id: number): Rule | null {
  if (store.classifications.findById(id) === undefined) return null;
  return toRule(store, store.classifications.members(id), new Map());
}

/** `groupsOf` caches each provider configuration's groups for the rules built in one pass. */
function toRule(store: Store, members: ClassificationMembers, groupsOf: Map<string, ProviderGroup[]>): Rule {
  const groupEmails = new Set<string>();
  for (const provider of members.providers) {
    let groups = groupsOf.get(provider.configurationId);
    if (groups === undefined) {
      const listed = store.configurations.findById(provider.configurationId)?.extra['groups'];
      groups = Array.isArray(listed) ? (listed as ProviderGroup[]) : [];
      groupsOf.set(provider.configurationId, groups);
    }
    for (const ref of provider.gwsGroups) {
      const group = groups.find((g) => g.id === ref.id);
      if (!Array.isArray(group?.members)) continue;
      for (const m of group.members) if (typeof m === 'string') groupEmails.add(normalizeEmail(m));
    }
  }
  return { userIds: new Set(members.userIds), roleIds: new Set(members.roleIds), groupEmails };
}

function admits(rule: Rule, who: Identity): boolean {
  if (who.userId !== null && rule.userIds.has(who.userId)) return true;
  if (who.roleIds.some((r) => rule.roleIds.has(r))) return true;
  return rule.groupEmails.size > 0 && rule.groupEmails.has(normalizeEmail(who.email));
}

/** Whether a classification with `members` would admit `who` (one that is being created or changed). */
export function membersAdmit(store: Store, members: ClassificationMembers, who: Identity): boolean {
  return admits(toRule(store, members, new Map()), who);
}

/**
 * Every classification that admits `who`, from the member tables in a few queries: for
 * management actions that compare what two identities may decrypt, not for the request path.
 */
export function admittedClassifications(store: Store, who: Identity): Set<number> {
  const admitted = new Set<number>();
  const groupsOf = new Map<string, ProviderGroup[]>();
  // A classification without members is absent from the map: it admits nobody.
  for (const [id, members] of store.classifications.allMembers()) {
    if (admits(toRule(store, members, groupsOf), who)) admitted.add(id);
  }
  return admitted;
}

/** The caller as an identity: the acting user with the roles it acts with. */
export function callerIdentity(caller: Caller): Identity {
  return { userId: caller.user.id, roleIds: caller.roleIds, email: caller.user.email };
}

export class ClassificationAccess {
  private readonly store: Store;
  private readonly who: Identity;
  /** Decisions for this request, so a body with many tokens decides once per classification. */
  private readonly decided = new Map<number, boolean>();

  constructor(store: Store, caller: Caller) {
    this.store = store;
    this.who = callerIdentity(caller);
  }

  /** Throws 403 unless the caller may read data of classification `id`. */
  check(id: number): void {
    let allowed = this.decided.get(id);
    if (allowed === undefined) {
      const rule = ruleOf(this.store, id);
      // A token naming a classification that no longer exists is denied: ids are never
      // reused, so no newer classification can take it over.
      allowed = rule !== null && admits(rule, this.who);
      this.decided.set(id, allowed);
    }
    if (!allowed) throw new ForbiddenError();
  }
}
