/**
 * How a request's method and path are matched against route globs, for the relay's routes
 * (src/dataplane/relay.ts) and the egress proxy's (src/dataplane/egress-hosts.ts): the path
 * read as the application's router or the vendor's would read it, so that a route cannot be
 * dodged by spelling (DESIGN §13). Apart from the relay, so that a service without one does
 * not load the relay's modules.
 */

/** A route's method and path pattern. */
export interface RoutePattern {
  /** Upper-case; null matches every method. */
  readonly method: string | null;
  /** Matched against the normalized path (see `normalizePath`). */
  readonly path: RegExp;
}

/**
 * `*` matches within one segment, a whole `**` segment any number of segments (none
 * included). Matching ignores case, like many application routers (Express's default):
 * matching too much only transforms more, matching too little would let plaintext by.
 */
export function compileGlob(pattern: string): RegExp {
  let source = '';
  for (const segment of pattern.split('/')) {
    if (segment === '') continue;
    if (segment === '**') {
      source += '(?:/[^/]+)*';
      continue;
    }
    source += `/${segment
      .split(/\*+/)
      .map((literal) => literal.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
      .join('[^/]*')}`;
  }
  return new RegExp(`^${source}$`, 'i');
}

/**
 * The path the application's router most likely sees, so a route cannot be dodged by
 * spelling: `;parameters` dropped from each segment (`/patients;x=1/7` is `/patients/7`),
 * percent-escapes decoded once, no empty segments (`//`, trailing `/`), `.` and `..`
 * resolved, no query. The root is the empty string. Null for a target that cannot be
 * read the same way by every router — `%3B`, control bytes, spaces, a stray `%` — or
 * that is no path at all (`*`): such a request is refused.
 *
 * An escaped `/` (`%2F`) is read here as a separator; `routingPaths` gives the other reading.
 */
export function normalizePath(url: string): string | null {
  return normalize(url, 'separator');
}

/**
 * Every path a route is matched against. An escaped `/` is where routers part ways: those
 * that decode first read `/patients/a%2Fb` as three segments, those that match the raw path
 * (Express) as two, the second `a/b`. Both readings are tried, so that a route applies when
 * either router would send the request to the route's handler.
 */
export function routingPaths(url: string): string[] | null {
  const separated = normalize(url, 'separator');
  if (separated === null) return null;
  const kept = normalize(url, 'segment');
  return kept === null || kept === separated ? [separated] : [separated, kept];
}

function normalize(url: string, slash: 'separator' | 'segment'): string | null {
  let path = url;
  if (!path.startsWith('/')) {
    // absolute-form (RFC 9112 §3.2.2): the application would route on its path.
    const parsed = URL.parse(url);
    if (parsed === null || parsed.pathname === '') return null;
    path = parsed.pathname;
  }
  const q = path.indexOf('?');
  if (q !== -1) path = path.slice(0, q);
  if (UNREADABLE_RAW.test(path)) return null;
  const out: string[] = [];
  for (const raw of path.split('/')) {
    const semi = raw.indexOf(';');
    let segment = semi === -1 ? raw : raw.slice(0, semi);
    if (segment.includes('%')) {
      try {
        segment = decodeURIComponent(segment);
      } catch {
        // Not valid percent-encoding: routers disagree on what it means.
        return null;
      }
      if (CONTROL.test(segment)) return null;
    }
    // A decoded `/` kept in its segment stays escaped, so a glob's `*` can match across it.
    const parts = !segment.includes('/') ? [segment] : slash === 'separator' ? segment.split('/') : [segment.replaceAll('/', '%2F')];
    for (const part of parts) {
      if (part === '' || part === '.') continue;
      if (part === '..') out.pop();
      else out.push(part);
    }
  }
  return out.length === 0 ? '' : `/${out.join('/')}`;
}

/** Raw bytes no router reads alike: controls, spaces, an escaped `;`. */
const UNREADABLE_RAW = /[\x00-\x20\x7f]|%3b/i;
const CONTROL = /[\x00-\x1f\x7f]/;

/**
 * The first route that matches the method and one of the paths, with the path it matched;
 * failing that, the same for the paths without a format extension on their last segment,
 * as frameworks that route `/patients.json` to `/patients` read them (Rails, older Spring).
 */
export function findRoute<R extends RoutePattern>(routes: readonly R[], method: string, paths: readonly string[]): { route: R; path: string } | null {
  const found = firstMatch(routes, method, paths);
  if (found !== null) return found;
  const bare = paths.flatMap((path) => /^(.*\/[^/]+)\.[A-Za-z0-9]+$/.exec(path)?.[1] ?? []);
  return bare.length === 0 ? null : firstMatch(routes, method, bare);
}

function firstMatch<R extends RoutePattern>(routes: readonly R[], method: string, paths: readonly string[]): { route: R; path: string } | null {
  for (const route of routes) {
    if (route.method !== null && route.method !== method) continue;
    for (const path of paths) if (route.path.test(path)) return { route, path };
  }
  return null;
}
