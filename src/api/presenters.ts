/**
 * The response shapes of spec §2, in one place so every endpoint shows a resource the
 * same way. Timestamps are ISO 8601; secrets (password hashes, key hashes, wrapped keys)
 * are never part of any shape.
 */
import type { DefaultLevel, MaskSpec, RevealLevel } from '../fields/reveal.ts';
import type { ApiKey } from '../store/api-keys.ts';
import type { Classification, ClassificationMembers } from '../store/classifications.ts';
import type { Configuration } from '../store/configurations.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import type { Role } from '../store/roles.ts';
import type { User } from '../store/users.ts';

export interface RoleView {
  id: number;
  name: string;
  description: string | null;
  permissions: Array<{ name: string }>;
}

export interface UserView {
  id: number;
  name: string;
  email: string;
  two_factor_enabled: boolean;
  created_at: string;
  updated_at: string;
  roles: RoleView[];
}

export interface ConfigurationView {
  id: string;
  name: string;
  type: string;
  provider: string | null;
  values: Array<{ key: string; value: string }>;
  created_at: string;
  updated_at: string;
}

export function roleView(role: Role): RoleView {
  return { id: role.id, name: role.name, description: role.description, permissions: role.permissions.map((name) => ({ name })) };
}

export function userView(store: Store, user: User): UserView {
  return {
    id: user.id,
    name: user.name,
    email: user.email,
    two_factor_enabled: user.twoFactorEnabled,
    created_at: user.createdAt,
    updated_at: user.updatedAt,
    roles: stateOf(store).rolesOf(user.id).map(roleView),
  };
}

/**
 * `values` are strings (DESIGN §10): lists comma-separated, booleans `true`/`false`.
 * Provider configurations show their provider and any other string values they hold;
 * group membership lists are not shown.
 */
export function configurationView(configuration: Configuration): ConfigurationView {
  const values: Array<{ key: string; value: string }> = [];
  if (configuration.type === 'encryption') {
    values.push(
      { key: 'proxy_slug', value: configuration.proxySlug ?? '' },
      { key: 'key_version', value: String(configuration.keyVersion ?? 0) },
      { key: 'min_decryption_version', value: String(configuration.minDecryptionVersion) },
      { key: 'deterministic', value: String(configuration.deterministic) },
      { key: 'destinations', value: configuration.destinations.join(',') },
      { key: 'fields', value: configuration.fields.join(',') },
    );
  } else {
    values.push({ key: 'provider', value: configuration.provider ?? '' });
    for (const [key, value] of Object.entries(configuration.extra)) {
      if (typeof value === 'string') values.push({ key, value });
    }
  }
  return {
    id: configuration.id,
    name: configuration.name,
    type: configuration.type,
    provider: configuration.provider,
    values,
    created_at: configuration.createdAt,
    updated_at: configuration.updatedAt,
  };
}

export interface ClassificationView {
  id: number;
  name: string;
  slug: string;
  description: string | null;
  bg_color: string;
  fg_color: string;
  emoji: string | null;
  provider_container_id: string | null;
  providers: Array<{ uuid: string; name: string; gws_groups: Array<{ id: string; name?: string; email?: string }> }>;
  users: UserView[];
  roles: RoleView[];
  reveal: RevealGrantView[];
  default: DefaultLevel;
  default_mask: MaskSpec | null;
  created_at: string;
  updated_at: string;
}

/** A reveal grant: `to.users` and `to.roles` shown as the classification's own members are. */
export interface RevealGrantView {
  to: { users: UserView[]; roles: RoleView[]; groups: string[] };
  level: RevealLevel;
  mask: MaskSpec | null;
}

/**
 * The users, roles and provider names that classification views refer to, each read and
 * shaped once per response: the classifications of a page share few of them, and looking
 * them up per classification cost a 50-item page hundreds of queries.
 */
export class MemberViews {
  readonly #store: Store;
  readonly #users = new Map<number, UserView | null>();
  readonly #roles = new Map<number, RoleView | null>();
  readonly #configurationNames = new Map<string, string>();

  constructor(store: Store) {
    this.#store = store;
  }

  user(id: number): UserView | null {
    let view = this.#users.get(id);
    if (view === undefined) {
      const user = stateOf(this.#store).user(id);
      view = user === undefined ? null : userView(this.#store, user);
      this.#users.set(id, view);
    }
    return view;
  }

  role(id: number): RoleView | null {
    let view = this.#roles.get(id);
    if (view === undefined) {
      const role = stateOf(this.#store).role(id);
      view = role === undefined ? null : roleView(role);
      this.#roles.set(id, view);
    }
    return view;
  }

  configurationName(id: string): string {
    let name = this.#configurationNames.get(id);
    if (name === undefined) {
      name = stateOf(this.#store).configuration(id)?.name ?? '';
      this.#configurationNames.set(id, name);
    }
    return name;
  }
}

/**
 * A list passes `members` (loaded for the whole page at once) and one `views` for all its
 * items; a single classification needs neither.
 */
export function classificationView(
  store: Store,
  classification: Classification,
  members: ClassificationMembers = stateOf(store).members(classification.id),
  views: MemberViews = new MemberViews(store),
): ClassificationView {
  return {
    id: classification.id,
    name: classification.name,
    slug: classification.slug,
    description: classification.description,
    bg_color: classification.bgColor,
    fg_color: classification.fgColor,
    emoji: classification.emoji,
    provider_container_id: classification.providerContainerId,
    providers: members.providers.map((p) => ({ uuid: p.configurationId, name: views.configurationName(p.configurationId), gws_groups: p.gwsGroups })),
    users: members.userIds.flatMap((id) => views.user(id) ?? []),
    roles: members.roleIds.flatMap((id) => views.role(id) ?? []),
    // A user or role deleted since is left out, as from the member lists.
    reveal: classification.reveal.map((grant) => ({
      to: {
        users: grant.to.users.flatMap((id) => views.user(id) ?? []),
        roles: grant.to.roles.flatMap((id) => views.role(id) ?? []),
        groups: [...grant.to.groups],
      },
      level: grant.level,
      mask: grant.mask,
    })),
    default: classification.revealDefault.level,
    default_mask: classification.revealDefault.mask,
    created_at: classification.createdAt,
    updated_at: classification.updatedAt,
  };
}

export interface ApiKeyView {
  id: string;
  name: string;
  prefix: string;
  status: string;
  created_at: string;
  updated_at: string;
  revoked_at: string | null;
  user: UserView | null;
  configurations: ConfigurationView[];
  permissions: Array<{ name: string }>;
}

export function apiKeyView(store: Store, key: ApiKey): ApiKeyView {
  const user = stateOf(store).user(key.userId);
  return {
    id: key.id,
    name: key.name,
    prefix: key.prefix,
    status: key.status,
    created_at: key.createdAt,
    updated_at: key.updatedAt,
    revoked_at: key.revokedAt,
    user: user === undefined ? null : userView(store, user),
    configurations: key.configurations.flatMap((id) => {
      const c = stateOf(store).configuration(id);
      return c === undefined ? [] : [configurationView(c)];
    }),
    permissions: key.permissions.map((name) => ({ name })),
  };
}
