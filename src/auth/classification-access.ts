/**
 * Who may decrypt a classification (DESIGN §9): a listed user, a holder of a listed role,
 * or a member of a listed provider group. A classification that lists nobody is open to
 * anyone with `data.decrypt`.
 */
import { ForbiddenError } from '../errors.ts';
import type { Store } from '../store/db.ts';
import type { Caller } from './caller.ts';

interface ProviderGroup {
  id: string;
  members?: unknown;
}

export class ClassificationAccess {
  private readonly store: Store;
  private readonly caller: Caller;
  /** Decisions for this request, so a body with many tokens asks the store once per classification. */
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
    // A token naming a classification that no longer exists is denied: deleting a
    // classification must not open its data to everyone.
    if (this.store.classifications.findById(id) === undefined) return false;
    const members = this.store.classifications.members(id);
    if (members.userIds.length === 0 && members.roleIds.length === 0 && members.providers.every((p) => p.gwsGroups.length === 0)) {
      return true;
    }
    if (members.userIds.includes(this.caller.user.id)) return true;
    if (members.roleIds.some((r) => this.caller.roleIds.includes(r))) return true;
    const email = this.caller.user.email.toLowerCase();
    for (const provider of members.providers) {
      const configuration = this.store.configurations.findById(provider.configurationId);
      const groups = configuration?.extra['groups'];
      if (!Array.isArray(groups)) continue;
      for (const ref of provider.gwsGroups) {
        const group = (groups as ProviderGroup[]).find((g) => g.id === ref.id);
        if (Array.isArray(group?.members) && group.members.some((m) => typeof m === 'string' && m.toLowerCase() === email)) return true;
      }
    }
    return false;
  }
}
