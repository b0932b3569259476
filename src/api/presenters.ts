/**
 * The response shapes of spec §2, in one place so every endpoint shows a resource the
 * same way. Timestamps are ISO 8601; secrets (password hashes, key hashes, wrapped keys)
 * are never part of any shape.
 */
import type { ApiKey } from '../store/api-keys.ts';
import type { Classification } from '../store/classifications.ts';
import type { Configuration } from '../store/configurations.ts';
import type { Store } from '../store/db.ts';
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
    roles: store.users.rolesOf(user.id).map(roleView),
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
  created_at: string;
  updated_at: string;
}

export function classificationView(store: Store, classification: Classification): ClassificationView {
  const members = store.classifications.members(classification.id);
  return {
    id: classification.id,
    name: classification.name,
    slug: classification.slug,
    description: classification.description,
    bg_color: classification.bgColor,
    fg_color: classification.fgColor,
    emoji: classification.emoji,
    provider_container_id: classification.providerContainerId,
    providers: members.providers.map((p) => ({
      uuid: p.configurationId,
      name: store.configurations.findById(p.configurationId)?.name ?? '',
      gws_groups: p.gwsGroups,
    })),
    users: members.userIds.flatMap((id) => {
      const user = store.users.findById(id);
      return user === undefined ? [] : [userView(store, user)];
    }),
    roles: members.roleIds.flatMap((id) => {
      const role = store.roles.findById(id);
      return role === undefined ? [] : [roleView(role)];
    }),
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
  const user = store.users.findById(key.userId);
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
      const c = store.configurations.findById(id);
      return c === undefined ? [] : [configurationView(c)];
    }),
    permissions: key.permissions.map((name) => ({ name })),
  };
}
