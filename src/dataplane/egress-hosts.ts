/**
 * The egress proxy's host rules (DESIGN §15), compiled once at start: which hosts the
 * proxy terminates, and per host the routes (method and path) with their request and
 * response transforms. A request that matches a host but none of its routes gets the
 * host-level rules; a host with no rules at all passes its requests unchanged.
 */
import type { EgressProxyHost } from '../config/schema.ts';
import { compileGlob, findRoute, type RoutePattern } from './route-match.ts';
import { compileTransformRoute, type TransformRoute } from './transform-routes.ts';
import { parseHostMatch } from '../util/canonical-host.ts';
import { guardsAnswers } from './echo-guard.ts';

/** One set of rules: a route's, or the host's own. */
export interface ProxyRules extends TransformRoute {
  /**
   * The request decrypts and the answer is not passed through (guardsAnswers): what it
   * decrypted is encrypted again in the answer, or with a `response` of its own searched
   * for (DESIGN §13).
   */
  readonly echoes: boolean;
}

type ProxyRoute = ProxyRules & RoutePattern;

export interface HostRule {
  /** The `match` with its host in canonical form: the metrics label and the api log's name. */
  readonly match: string;
  /**
   * `*.example.com`: the names it covers are not known when it is written, so they are
   * dialled at public addresses only (DESIGN §8); an exact match may be a private address.
   */
  readonly wildcard: boolean;
  readonly routes: readonly ProxyRoute[];
  readonly rules: ProxyRules;
}

interface CompiledHost {
  readonly rule: HostRule;
  /** The host name in its canonical form, or for `*.example.com` the suffix `.example.com`. */
  readonly name: string;
  /** Null: the scheme's default port (443 through CONNECT, 80 for `http://`). */
  readonly port: number | null;
}

export type Scheme = 'https' | 'http';

const DEFAULT_PORT: Readonly<Record<Scheme, number>> = { https: 443, http: 80 };

export class EgressHosts {
  /** Exact hosts by `host port`, the port empty for the scheme's default. */
  private readonly exact = new Map<string, HostRule>();
  /** Longest suffix first: the most specific wildcard wins. */
  private readonly wildcards: readonly CompiledHost[];

  constructor(hosts: readonly EgressProxyHost[]) {
    const wildcards: CompiledHost[] = [];
    for (const host of hosts.map(compileHost)) {
      if (host.rule.wildcard) wildcards.push(host);
      // The schema refuses the same match twice; the first one is kept, as before.
      else if (!this.exact.has(exactKey(host.name, host.port))) this.exact.set(exactKey(host.name, host.port), host.rule);
    }
    this.wildcards = wildcards.sort((a, b) => b.name.length - a.name.length);
  }

  /**
   * The rule for `host` (in its canonical form: canonicalHost) at `port`. An exact name is
   * preferred to a wildcard, and an exact port to the scheme's default; a wildcard never
   * matches the bare domain, nor an IP address (its suffix is a name, whose last label is
   * not numeric, and an address's is).
   */
  find(host: string, port: number, scheme: Scheme): HostRule | null {
    const exact = this.exact.get(exactKey(host, port)) ?? (port === DEFAULT_PORT[scheme] ? this.exact.get(exactKey(host, null)) : undefined);
    if (exact !== undefined) return exact;
    for (const candidate of this.wildcards) {
      if (host.endsWith(candidate.name) && (candidate.port ?? DEFAULT_PORT[scheme]) === port) return candidate.rule;
    }
    return null;
  }
}

function exactKey(host: string, port: number | null): string {
  return `${host} ${port ?? ''}`;
}

/** The rules for a request to a host: its first matching route's, else the host's. */
export function rulesFor(rule: HostRule, method: string, paths: readonly string[]): { rules: ProxyRules; path: string } {
  const found = rule.routes.length === 0 ? null : findRoute(rule.routes, method, paths);
  if (found !== null) return { rules: found.route, path: found.path };
  return { rules: rule.rules, path: paths[0] ?? '' };
}

type Transform = NonNullable<EgressProxyHost['request']>;

/**
 * `host`, `*.domain`, `[v6]`, each with an optional `:port`. The schema has written the
 * host in its canonical form already; it is read the same way again here, so that rules
 * given any other way are compared as requests are.
 */
function compileHost(config: EgressProxyHost): CompiledHost {
  const host = parseHostMatch(config.match);
  if (host === null) throw new Error(`egress_proxy host rule ${JSON.stringify(config.match)} is not a host name, IP address or *.domain`);
  const label = `egress-proxy:${host.text}`;
  const rules = compileRules(label, config.configuration, config.request, config.query, config.response);
  const routes = config.routes.map(
    (route): ProxyRoute => ({
      ...compileRules(label, config.configuration, route.request, route.query, route.response),
      method: route.match.method ?? null,
      path: compileGlob(route.match.path),
    }),
  );
  return { rule: { match: host.text, wildcard: host.wildcard, routes, rules }, name: host.wildcard ? `.${host.host}` : host.host, port: host.port };
}

function compileRules(label: string, configuration: string, request: Transform | undefined, query: Transform | undefined, given: EgressProxyHost['response']): ProxyRules {
  // `response: { encrypt: [] }` is how DESIGN §15 writes the default: what was decrypted.
  const response = given !== 'passthrough' && given?.encrypt?.length === 0 && given.classification === undefined ? undefined : given;
  const compiled = compileTransformRoute(label, { configuration, request, query, response });
  return { ...compiled, echoes: guardsAnswers(compiled, response === 'passthrough') };
}
