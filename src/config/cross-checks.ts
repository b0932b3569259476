/**
 * Rules that span more than one field. They run on the schema's output even when other
 * parts of the file failed (so all problems are reported together), which means the value
 * may be partly unparsed: every access here checks the shape it reads.
 */

import { formatPath, type ConfigPath, type Problem } from './problems.ts';
import { routeReferenceProblems, seedNames } from './route-references.ts';
import { asRecord, items, type Item } from './tree.ts';

/** `storeIsNew`: the store will hold exactly the seed, so routes can be checked against it. */
export function crossCheck(config: unknown, options: { storeIsNew: boolean }): Problem[] {
  const problems: Problem[] = [];
  const root = asRecord(config);
  if (root === undefined) return problems;

  checkControlPlane(root, problems);
  checkPostgresStore(root, problems);
  checkServerTimeouts(root, problems);

  const seed = asRecord(root.seed);
  const users = items(seed?.users, ['seed', 'users']);
  const apiKeys = items(seed?.api_keys, ['seed', 'api_keys']);
  const configurations = items(seed?.configurations, ['seed', 'configurations']);
  const classifications = items(seed?.classifications, ['seed', 'classifications']);
  const routes = items(asRecord(root.relay)?.routes, ['relay', 'routes']);
  const egress = items(root.egress, ['egress']);

  // Emails are compared case-insensitively: login looks users up that way.
  unique(users, 'email', problems, (email) => email.toLowerCase());
  unique(apiKeys, 'name', problems);
  unique(apiKeys, 'key', problems, undefined, { secret: true });
  unique(configurations, 'name', problems);
  unique(configurations, 'proxy_slug', problems);
  unique(classifications, 'name', problems);
  unique(classifications, 'slug', problems);
  unique(routes, 'name', problems);
  unique(egress, 'name', problems);
  unique(items(asRecord(root.egress_proxy)?.hosts, ['egress_proxy', 'hosts']), 'match', problems, (match) => match.toLowerCase());

  const kinds = checkConfigurationKinds(configurations, problems);
  checkProviderReferences(kinds, classifications, problems);
  // A replica's names come from the control plane: its seed only bootstraps it.
  const replica = asRecord(root.state)?.source === 'control-plane';
  problems.push(...routeReferenceProblems(root, seedNames(root, options.storeIsNew && !replica)));
  return problems;
}

/**
 * A store on PostgreSQL makes this instance one of a control plane's (DESIGN §16): it
 * serves no data, so it takes no relay or egress proxy, and it is no replica.
 */
function checkPostgresStore(root: Record<string, unknown>, problems: Problem[]): void {
  if (typeof asRecord(root.store)?.url !== 'string') return;
  const why = 'a control plane on PostgreSQL (store.url) serves no data requests: run it in the sidecars';
  if (root.relay !== undefined) problems.push({ path: ['relay'], message: why });
  if (root.egress_proxy !== undefined) problems.push({ path: ['egress_proxy'], message: why });
  if (Array.isArray(root.egress) && root.egress.length > 0) problems.push({ path: ['egress'], message: why });
  if (asRecord(root.state)?.source === 'control-plane') {
    problems.push({ path: ['state', 'source'], message: 'a replica keeps its copy of the state in SQLite: control-plane takes store.path, not store.url' });
  }
}

function checkControlPlane(root: Record<string, unknown>, problems: Problem[]): void {
  const state = asRecord(root.state);
  if (state?.source !== 'control-plane') return;
  const path = ['state', 'control_plane'];
  const controlPlane = asRecord(state.control_plane);
  if (controlPlane === undefined) {
    problems.push({ path, message: 'required when state.source is control-plane (url and api_key)' });
    return;
  }
  for (const key of ['url', 'api_key']) {
    if (controlPlane[key] === undefined) {
      problems.push({ path: [...path, key], message: 'required when state.source is control-plane' });
    }
  }
}

// Node's http.createServer throws when headersTimeout exceeds a non-zero requestTimeout;
// saying so here names the keys instead of failing at listen time.
function checkServerTimeouts(root: Record<string, unknown>, problems: Problem[]): void {
  const server = asRecord(root.server);
  const headers = server?.headers_timeout;
  const request = server?.request_timeout;
  if (typeof headers !== 'number' || typeof request !== 'number') return;
  if (request > 0 && headers > request) {
    problems.push({ path: ['server', 'headers_timeout'], message: 'must not be longer than server.request_timeout' });
  }
}

type Kind = 'encryption' | 'provider';

function checkConfigurationKinds(configurations: Item[], problems: Problem[]): Map<string, Kind> {
  const kinds = new Map<string, Kind>();
  for (const { path, value } of configurations) {
    const kind: Kind = value.type === 'provider' || (value.type === undefined && value.provider !== undefined) ? 'provider' : 'encryption';
    if (typeof value.name === 'string' && !kinds.has(value.name)) kinds.set(value.name, kind);
    if (kind === 'provider') {
      if (value.provider === undefined) problems.push({ path: [...path, 'provider'], message: 'required for a provider configuration (provider: google)' });
      if (value.proxy_slug !== undefined) problems.push({ path: [...path, 'proxy_slug'], message: 'only encryption configurations have a proxy_slug' });
    } else {
      if (value.provider !== undefined) problems.push({ path: [...path, 'provider'], message: 'only provider configurations have a provider' });
      if (value.groups !== undefined) problems.push({ path: [...path, 'groups'], message: 'only provider configurations have groups' });
    }
  }
  return kinds;
}

/**
 * A name that matches no seeded configuration is allowed (it may have been created through
 * the API); a name that matches one of the wrong kind is a mistake we can see now.
 */
function checkProviderReferences(kinds: Map<string, Kind>, classifications: Item[], problems: Problem[]): void {
  for (const classification of classifications) {
    for (const provider of items(classification.value.providers, [...classification.path, 'providers'])) {
      const name = provider.value.configuration;
      if (typeof name === 'string' && kinds.get(name) === 'encryption') {
        problems.push({ path: [...provider.path, 'configuration'], message: `"${name}" is an encryption configuration, not a provider configuration` });
      }
    }
  }
}

function unique(
  list: Item[],
  key: string,
  problems: Problem[],
  normalize: (value: string) => string = (value) => value,
  options: { secret?: boolean } = {},
): void {
  const seen = new Map<string, ConfigPath>();
  for (const { path, value } of list) {
    const raw = value[key];
    if (typeof raw !== 'string') continue;
    const normalized = normalize(raw);
    const first = seen.get(normalized);
    if (first === undefined) {
      seen.set(normalized, path);
    } else {
      // Errors end up in logs: never echo a secret.
      const shown = options.secret === true ? '' : ` "${raw}"`;
      problems.push({ path: [...path, key], message: `duplicate ${key}${shown} (also at ${formatPath(first)})` });
    }
  }
}
