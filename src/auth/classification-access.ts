/**
 * Who may decrypt a classification (DESIGN §9): a listed user, a holder of a listed role,
 * or a member of a listed provider group. A classification that lists nobody is open to
 * anyone with `data.decrypt`.
 */
import { ForbiddenError } from '../errors.ts';
import type { Store } from '../store/db.ts';
import { perStore } from '../store/stamped-cache.ts';
import type { Caller } from './caller.ts';

interface ProviderGroup {
  id: string;
  members?: unknown;
}

/** Who a classification admits, resolved from its members and its provider groups. */
interface Rule {
  /** Lists nobody: open to anyone with `data.decrypt`. */
  readonly open: boolean;
  readonly userIds: ReadonlySet<number>;
  readonly roleIds: ReadonlySet<number>;
  /** Lower-cased emails of the members of its provider groups. */
  readonly groupEmails: ReadonlySet<string>;
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
  const members = store.classifications.members(id);
  const groupEmails = new Set<string>();
  for (const provider of members.providers) {
    const configuration = store.configurations.findById(provider.configurationId);
    const groups = configuration?.extra['groups'];
    if (!Array.isArray(groups)) continue;
    for (const ref of provider.gwsGroups) {
      const group = (groups as ProviderGroup[]).find((g) => g.id === ref.id);
      if (!Array.isArray(group?.members)) continue;
      for (const m of group.members) if (typeof m === 'string') groupEmails.add(m.toLowerCase());
    }
  }
  return {
    open: members.userIds.length === 0 && members.roleIds.length === 0 && members.providers.every((p) => p.gwsGroups.length === 0),
    userIds: new Set(members.userIds),
    roleIds: new Set(members.roleIds),
    groupEmails,
  };
}

export class ClassificationAccess {
  private readonly store: Store;
  private readonly caller: Caller;
  /** Decisions for this request, so a body with many tokens decides once per classification. */
  private readonly decided = new Map<number, boolean>();

  constructor(store: Store, caller: Caller) {
    this.store = store;
    this.caller = caller;
  }

  /** Throws 403 unless the caller may read data of classification `id`. */
  check(id: number): void {
    let allowed = this.decided.get(id);
    if (allowed === undefined) {
      allowed = this.evaluate(id);
      this.decided.set(id, allowed);
    }
    if (!allowed) throw new ForbiddenError();
  }

  private evaluate(id: number): boolean {
    const rule = ruleOf(this.store, id);
    // A token naming a classification that no longer exists is denied: deleting a
    // classification must not open its data to everyone.
    if (rule === null) return false;
    if (rule.open || rule.userIds.has(this.caller.user.id)) return true;
    if (this.caller.roleIds.some((r) => rule.roleIds.has(r))) return true;
    return rule.groupEmails.has(this.caller.user.email.toLowerCase());
  }
}
