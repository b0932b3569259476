/**
 * What a replica's API key may see of the state (DESIGN §13 "Replication secrets";
 * docs/replication.md "Scoped replicas"). A key limited to some configurations receives
 * only those configurations and their wrapped keys, and nothing that names another one:
 *
 * - configurations: the ones in scope, with their keys;
 * - classifications: all of them (tokens of any configuration name them), but group
 *   members that come through a provider configuration outside the scope are dropped, so
 *   such a classification admits fewer people on the replica, never more (a classification
 *   left without members admits nobody);
 * - API keys: a key limited to configurations keeps only those in scope; one that reaches
 *   no configuration of the scope is left out (an empty list would mean "every
 *   configuration"); unlimited keys stay as they are, and on the replica reach only what
 *   it holds;
 * - users and roles: all of them (keys and classifications refer to them).
 */
import type { ApiKeyRow, StateRows } from '../store/replication.ts';

/** `rows` as a key limited to `scope` (configuration ids) may see them. */
export function scopeState(rows: StateRows, scope: ReadonlySet<string>): StateRows {
  return {
    roles: rows.roles,
    users: rows.users,
    configurations: rows.configurations.filter((c) => scope.has(c.id)),
    classifications: rows.classifications.map((c) =>
      c.providers.every((p) => scope.has(p.configurationId)) ? c : { ...c, providers: c.providers.filter((p) => scope.has(p.configurationId)) },
    ),
    apiKeys: rows.apiKeys.flatMap((k) => scopeApiKey(k, scope)),
  };
}

function scopeApiKey(key: ApiKeyRow, scope: ReadonlySet<string>): ApiKeyRow[] {
  const configurations = JSON.parse(key.configurations) as string[];
  if (configurations.length === 0) return [key];
  const kept = configurations.filter((id) => scope.has(id));
  if (kept.length === 0) return [];
  return kept.length === configurations.length ? [key] : [{ ...key, configurations: JSON.stringify(kept) }];
}

/** A cache key for a scope: the same set of ids, in any order, is the same scope. */
export function scopeKey(scope: ReadonlySet<string>): string {
  return JSON.stringify([...scope].sort());
}
