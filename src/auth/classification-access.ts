/**
 * Who sees how much of a classification's values (DESIGN §9, §14). Members — listed users,
 * holders of listed roles, members of listed provider groups — see the plaintext. Anyone
 * else gets the most revealing of the classification's reveal grants that name them (plain
 * > mask > token > redact > deny; between two grants of one level, the one listed first),
 * and a reader no grant names gets its `default` (deny unless it says otherwise).
 *
 * A classification that lists no member admits nobody (DESIGN §13, "No member, no
 * access"): membership that empties — its last member removed, its provider configuration
 * deleted (the links go by ON DELETE CASCADE), a seed that drops them — leaves it to its
 * reveal rules, never open. A token whose classification no longer exists is denied.
 *
 * The reader is an input: the API's acting user (`callerIdentity`), or an end user behind
 * the relay (`{userId, roleIds, email, groups}` from its JWT), or nobody (`ANONYMOUS`).
 */
import { Mask, REVEAL_RANK, type RevealLevel } from '../fields/reveal.ts';
import type { ClassificationMembers } from '../store/classifications.ts';
import type { Store } from '../store/db.ts';
import { normalizeEmail } from '../store/identity-text.ts';
import type { RevealDefault, RevealGrant } from '../store/reveal-rules.ts';
import { Memo, stateOf, type StateView } from '../store/state-view.ts';
import type { Caller } from './caller.ts';

interface ProviderGroup {
  id: string;
  members?: unknown;
}

/** Whom to decide for: an existing user, one about to be created (no id yet), an end user, or nobody. */
export interface Identity {
  readonly userId: number | null;
  readonly roleIds: readonly number[];
  /** Compared normalised; null when none is known. */
  readonly email: string | null;
  /** Provider group ids the reader is known to belong to (an end user's `groups` claim). */
  readonly groups?: readonly string[];
}

/** A reader nothing is known of: no member, named by no grant, so it gets each `default`. */
export const ANONYMOUS: Identity = Object.freeze({ userId: null, roleIds: Object.freeze([]), email: null, groups: Object.freeze([]) });

/** What one reader gets of the values of one classification. */
export interface Reveal {
  readonly level: RevealLevel;
  /** The mask, for `mask`; null otherwise. */
  readonly mask: Mask | null;
}

export const PLAIN: Reveal = Object.freeze({ level: 'plain', mask: null });
export const DENY: Reveal = Object.freeze({ level: 'deny', mask: null });
const REDACT: Reveal = Object.freeze({ level: 'redact', mask: null });
const TOKEN: Reveal = Object.freeze({ level: 'token', mask: null });

function revealOf(level: RevealLevel, mask: Mask | null): Reveal {
  switch (level) {
    case 'plain':
      return PLAIN;
    case 'token':
      return TOKEN;
    case 'redact':
      return REDACT;
    case 'deny':
      return DENY;
    case 'mask':
      // A mask grant always has one (store/reveal-rules.ts); without one it reveals nothing.
      return mask === null ? REDACT : Object.freeze({ level, mask });
  }
}

/** Whom a member list or a grant names, resolved for lookups. */
interface Audience {
  readonly userIds: ReadonlySet<number>;
  readonly roleIds: ReadonlySet<number>;
  /** Provider group ids, for readers who bring theirs (an end user's claim). */
  readonly groupIds: ReadonlySet<string>;
  /** Normalised emails of the members of those groups, from the provider configurations. */
  readonly groupEmails: ReadonlySet<string>;
}

interface Grant {
  readonly audience: Audience;
  readonly reveal: Reveal;
  readonly rank: number;
}

/** A classification's members, grants and default, resolved. */
interface Rule {
  readonly members: Audience;
  readonly grants: readonly Grant[];
  readonly fallback: Reveal;
}

/**
 * Rules by classification id, made once per state view: a decrypt reads no classification
 * rows while nothing was written.
 */
const RULES = new Memo<Rule | null>('classification access rules');
/** Every provider group's member emails by group id, across provider configurations. */
const GROUP_INDEX = new Memo<ReadonlyMap<string, ReadonlySet<string>>>('provider group members', 1);

/** null for a classification that no longer exists. */
function ruleOf(state: StateView, id: number): Rule | null {
  return state.memo(RULES, String(id), () => {
    const classification = state.classification(id);
    return classification === undefined ? null : toRule(state, classification, state.members(id), new Map());
  });
}

/**
 * Reveal grants name provider groups by id alone (DESIGN §14): a grant to `g-nurses`
 * reaches the members every provider configuration lists for a group of that id.
 */
function groupIndex(state: StateView): ReadonlyMap<string, ReadonlySet<string>> {
  return state.memo(GROUP_INDEX, '', () => {
    const index = new Map<string, Set<string>>();
    for (const configuration of state.configurations) {
      if (configuration.type !== 'provider') continue;
      const groups = configuration.extra['groups'];
      if (!Array.isArray(groups)) continue;
      for (const group of groups as ProviderGroup[]) {
        if (typeof group?.id !== 'string' || !Array.isArray(group.members)) continue;
        let emails = index.get(group.id);
        if (emails === undefined) index.set(group.id, (emails = new Set()));
        for (const m of group.members) if (typeof m === 'string') emails.add(normalizeEmail(m));
      }
    }
    return index;
  });
}

/** `groupsOf` caches each provider configuration's groups for the rules built in one pass. */
function memberAudience(state: StateView, members: ClassificationMembers, groupsOf: Map<string, ProviderGroup[]>): Audience {
  const groupEmails = new Set<string>();
  const groupIds = new Set<string>();
  for (const provider of members.providers) {
    let groups = groupsOf.get(provider.configurationId);
    if (groups === undefined) {
      const listed = state.configuration(provider.configurationId)?.extra['groups'];
      groups = Array.isArray(listed) ? (listed as ProviderGroup[]) : [];
      groupsOf.set(provider.configurationId, groups);
    }
    for (const ref of provider.gwsGroups) {
      groupIds.add(ref.id);
      const group = groups.find((g) => g.id === ref.id);
      if (!Array.isArray(group?.members)) continue;
      for (const m of group.members) if (typeof m === 'string') groupEmails.add(normalizeEmail(m));
    }
  }
  return { userIds: new Set(members.userIds), roleIds: new Set(members.roleIds), groupIds, groupEmails };
}

function grantAudience(state: StateView, grant: RevealGrant): Audience {
  const groupEmails = new Set<string>();
  if (grant.to.groups.length > 0) {
    const index = groupIndex(state);
    for (const id of grant.to.groups) for (const email of index.get(id) ?? []) groupEmails.add(email);
  }
  return { userIds: new Set(grant.to.users), roleIds: new Set(grant.to.roles), groupIds: new Set(grant.to.groups), groupEmails };
}

function compileReveal(level: RevealLevel, mask: RevealGrant['mask']): Reveal {
  return revealOf(level, mask === null ? null : Mask.of(mask));
}

function toRule(state: StateView, reveal: { reveal: readonly RevealGrant[]; revealDefault: RevealDefault }, members: ClassificationMembers, groupsOf: Map<string, ProviderGroup[]>): Rule {
  return {
    members: memberAudience(state, members, groupsOf),
    grants: reveal.reveal.map((g) => ({ audience: grantAudience(state, g), reveal: compileReveal(g.level, g.mask), rank: REVEAL_RANK[g.level] })),
    fallback: compileReveal(reveal.revealDefault.level, reveal.revealDefault.mask),
  };
}

function names(audience: Audience, who: Identity, email: string | null): boolean {
  if (who.userId !== null && audience.userIds.has(who.userId)) return true;
  for (const role of who.roleIds) if (audience.roleIds.has(role)) return true;
  if (who.groups !== undefined && audience.groupIds.size > 0) for (const group of who.groups) if (audience.groupIds.has(group)) return true;
  return email !== null && audience.groupEmails.size > 0 && audience.groupEmails.has(email);
}

function decide(rule: Rule, who: Identity, email: string | null): Reveal {
  if (names(rule.members, who, email)) return PLAIN;
  let best: Grant | null = null;
  for (const grant of rule.grants) {
    // Strictly more revealing: of two grants of one level, the first listed wins.
    if ((best === null || grant.rank > best.rank) && names(grant.audience, who, email)) best = grant;
  }
  return best === null ? rule.fallback : best.reveal;
}

function emailOf(who: Identity): string | null {
  return who.email === null ? null : normalizeEmail(who.email);
}

/**
 * Whether a classification with `members` and `grants` would show `who` its plaintext (one
 * that is being created or changed): what "admitted" means for changing who may read it.
 */
export function admitsPlain(store: Store, members: ClassificationMembers, grants: readonly RevealGrant[], who: Identity): boolean {
  const rule = toRule(stateOf(store), { reveal: grants, revealDefault: { level: 'deny', mask: null } }, members, new Map());
  return decide(rule, who, emailOf(who)) === PLAIN;
}

/**
 * Every classification of which `who` can read something (its plaintext, or part of it
 * through a mask), with what it gets: for management actions that compare what two
 * identities may decrypt, not for the request path. A few queries for all of them.
 */
export function readableClassifications(store: Store, who: Identity): Map<number, Reveal> {
  const readable = new Map<number, Reveal>();
  const groupsOf = new Map<string, ProviderGroup[]>();
  const state = stateOf(store);
  const email = emailOf(who);
  for (const classification of state.classifications) {
    const rule = toRule(state, classification, state.members(classification.id), groupsOf);
    const reveal = decide(rule, who, email);
    if (reveal.level === 'plain' || reveal.level === 'mask') readable.set(classification.id, reveal);
  }
  return readable;
}

/** Whether `held` shows at least what `other` shows. Masks are compared as written: another mask may show other characters. */
export function showsAtLeast(held: Reveal | undefined, other: Reveal): boolean {
  if (held === undefined) return false;
  if (held.level === 'plain') return true;
  if (other.level !== 'mask' || held.level !== 'mask') return REVEAL_RANK[held.level] >= REVEAL_RANK[other.level];
  const a = held.mask!;
  const b = other.mask!;
  return a === b || (a.keepFirst === b.keepFirst && a.keepLast === b.keepLast && a.char === b.char && a.email === b.email);
}

/** The caller as an identity: the acting user with the roles it acts with. */
export function callerIdentity(caller: Caller): Identity {
  return { userId: caller.user.id, roleIds: caller.roleIds, email: caller.user.email };
}

/** What a decrypt shows of the values of each classification (0: a token of none). */
export interface RevealPolicy {
  decide(classificationId: number): Reveal;
}

/**
 * Relay and egress routes decrypt for the pod (DESIGN §12): the pod boundary is the trust
 * boundary, so every value is shown plain, as before reveal levels.
 */
export const FOR_THE_POD: RevealPolicy = Object.freeze({ decide: () => PLAIN });

export interface AccessOptions {
  /**
   * The relay's answers (DESIGN §14): a `deny` becomes `redact`, for every reader, so the
   * relay never fails an application's answer because of who reads it.
   */
  readonly denyAsRedact?: boolean;
}

/** One request's decisions for one reader, each classification decided once. */
export class ClassificationAccess implements RevealPolicy {
  private readonly store: Store;
  private readonly who: Identity;
  /** The reader's email as rules compare it, once a rule has needed it (undefined before). */
  private normalisedEmail: string | null | undefined = undefined;
  private readonly denyAsRedact: boolean;
  private readonly decided = new Map<number, Reveal>();
  /** The last classification asked about: a body's tokens mostly share one. */
  private lastId = -1;
  private last: Reveal = DENY;

  /** `who` null: an anonymous reader. */
  constructor(store: Store, who: Identity | null, options: AccessOptions = {}) {
    this.store = store;
    this.who = who ?? ANONYMOUS;
    this.denyAsRedact = options.denyAsRedact === true;
  }

  /** The acting user of an API request. */
  static forCaller(store: Store, caller: Caller): ClassificationAccess {
    return new ClassificationAccess(store, callerIdentity(caller));
  }

  decide(id: number): Reveal {
    if (id === this.lastId) return this.last;
    let reveal = this.decided.get(id);
    if (reveal === undefined) {
      reveal = this.resolve(id);
      this.decided.set(id, reveal);
    }
    this.lastId = id;
    this.last = reveal;
    return reveal;
  }

  private resolve(id: number): Reveal {
    // A token of no classification is restricted by none: whoever may decrypt reads it.
    if (id === 0) return PLAIN;
    const rule = ruleOf(stateOf(this.store), id);
    // A token naming a classification that no longer exists is denied: ids are never
    // reused, so no newer classification can take it over.
    const reveal = rule === null ? DENY : decide(rule, this.who, this.email());
    return reveal === DENY && this.denyAsRedact ? REDACT : reveal;
  }

  /** Normalised on first use: a request whose tokens name no classification never needs it. */
  private email(): string | null {
    if (this.normalisedEmail === undefined) this.normalisedEmail = emailOf(this.who);
    return this.normalisedEmail;
  }
}
