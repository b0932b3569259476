/**
 * Relay and egress routes name an encryption configuration and, per direction, a
 * classification (DESIGN §12). A name that matches nothing is an operator mistake, and it
 * stops the start with every such name listed, instead of a 503 on each request later.
 *
 * The names are checked twice, against what can be known at each point:
 * - in the schema pass, against the seed when the store is new (it will hold exactly the
 *   seed), so the mistake is reported together with the file's other problems;
 * - by createApp against the store right after seeding, where the management API may have
 *   created more (`checkRouteReferences`).
 * A replica (`state.source: control-plane`) that has never received a snapshot cannot know
 * the names yet: its routes are checked per request (503) until the first snapshot.
 */
import { slugify } from '../store/classifications.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import { ConfigError } from './config-error.ts';
import { nearestName } from '../util/nearest.ts';
import { formatProblem, type Problem } from './problems.ts';
import { asRecord, items } from './tree.ts';

/** What a lookup knows about a name; `unknown` when it cannot tell (the check then passes). */
export type ConfigurationLookup = 'encryption' | 'provider' | 'missing' | 'unknown';

export interface StateNames {
  configuration(name: string): ConfigurationLookup;
  /** By id or slug, as `x-svc-classification` and the route's `classification`. */
  classification(idOrSlug: string): 'present' | 'missing' | 'unknown';
  /** For "did you mean": the configuration names there are. */
  configurationNames(): Iterable<string>;
  /** Why the name counts as missing: where it was looked for. */
  readonly where: string;
}

/** Every dangling or mistyped reference of `relay.routes`, `relay.protect`, `egress` and `egress_proxy.hosts`; the config may be partly invalid. */
export function routeReferenceProblems(config: unknown, names: StateNames): Problem[] {
  const problems: Problem[] = [];
  const root = asRecord(config);
  const routes = [...items(asRecord(root?.relay)?.routes, ['relay', 'routes']), ...items(root?.egress, ['egress'])];
  // An egress proxy host names the configuration; its routes name classifications only.
  for (const host of items(asRecord(root?.egress_proxy)?.hosts, ['egress_proxy', 'hosts'])) {
    routes.push(host);
    for (const route of items(host.value.routes, [...host.path, 'routes'])) routes.push({ path: route.path, value: { request: route.value.request, query: route.value.query, response: route.value.response } });
  }
  const protect = asRecord(asRecord(root?.relay)?.protect);
  // The guard names a configuration and a classification as a route does.
  if (protect !== undefined) routes.push({ path: ['relay', 'protect'], value: { configuration: protect.configuration, own: { classification: protect.classification } } });
  for (const { path, value } of routes) {
    const name = value.configuration;
    if (typeof name === 'string') {
      const found = names.configuration(name);
      if (found === 'provider') {
        problems.push({ path: [...path, 'configuration'], message: `"${name}" is a provider configuration; routes need an encryption configuration` });
      } else if (found === 'missing') {
        const nearest = nearestName(name, names.configurationNames());
        const hint = nearest === undefined ? '' : ` (did you mean "${nearest}"?)`;
        problems.push({ path: [...path, 'configuration'], message: `no configuration is named "${name}"${hint}: ${names.where}` });
      }
    }
    for (const direction of ['request', 'response', 'own'] as const) {
      const classification = asRecord(value[direction])?.classification;
      if (typeof classification === 'string' && names.classification(classification) === 'missing') {
        problems.push({
          path: direction === 'own' ? [...path, 'classification'] : [...path, direction, 'classification'],
          message: `no classification has the id or slug "${classification}": ${names.where}`,
        });
      }
    }
  }
  return problems;
}

/**
 * Names from the seed, for the schema pass. With a new store the seed is all there will
 * be; with an existing one only a seeded configuration of the wrong kind is certain.
 */
export function seedNames(config: unknown, storeIsNew: boolean): StateNames {
  const seed = asRecord(asRecord(config)?.seed);
  const configurations = new Map<string, 'encryption' | 'provider'>();
  for (const { value } of items(seed?.configurations, [])) {
    const kind = value.type === 'provider' || (value.type === undefined && value.provider !== undefined) ? 'provider' : 'encryption';
    if (typeof value.name === 'string' && !configurations.has(value.name)) configurations.set(value.name, kind);
  }
  const slugs = new Set<string>();
  for (const { value } of items(seed?.classifications, [])) {
    if (typeof value.slug === 'string') slugs.add(value.slug);
    else if (typeof value.name === 'string') slugs.add(slugify(value.name));
  }
  return {
    configuration: (name) => configurations.get(name) ?? (storeIsNew ? 'missing' : 'unknown'),
    classification: (idOrSlug) => {
      if (slugs.has(idOrSlug)) return 'present';
      // Ids are given by the store; a slug taken twice gets `-2`, `-3`... at seeding.
      if (!storeIsNew || /^\d+$/.test(idOrSlug) || /-\d+$/.test(idOrSlug)) return 'unknown';
      return 'missing';
    },
    configurationNames: () => configurations.keys(),
    where: 'the store is new and the seed declares none',
  };
}

/**
 * createApp's check, right after seeding: throws one ConfigError listing every route that
 * names a configuration or classification the store does not hold.
 */
export async function checkRouteReferences(config: unknown, store: Store): Promise<void> {
  const state = asRecord(asRecord(config)?.state);
  if (state?.source === 'control-plane' && (await store.replication.getSync('applied')) === undefined) return;
  const view = stateOf(store);
  const problems = routeReferenceProblems(config, {
    configuration: (name) => view.configurationByName(name)?.type ?? 'missing',
    classification: (idOrSlug) => (view.classificationByIdOrSlug(idOrSlug) === undefined ? 'missing' : 'present'),
    configurationNames: () => view.configurations.map((configuration) => configuration.name),
    where: 'the store holds none, after seeding',
  });
  if (problems.length > 0) throw new ConfigError(problems.map(formatProblem));
}
