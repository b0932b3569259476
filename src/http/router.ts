/**
 * A small segment-trie router: static segments beat `:params`, which beat a trailing
 * `*rest` (the rest of the path, however many segments, undecoded). A path that exists
 * under another method answers 405 with `Allow`. Routes are registered once at start.
 */
import { MethodNotAllowedError, NotFoundError } from '../errors.ts';

export type Params = Record<string, string>;

interface Node<H> {
  readonly statics: Map<string, Node<H>>;
  param: { name: string; node: Node<H> } | null;
  /** A trailing `*name`: takes the rest of the path when nothing more specific matches. */
  rest: { name: string; node: Node<H> } | null;
  readonly handlers: Map<string, { handler: H; template: string }>;
}

function node<H>(): Node<H> {
  return { statics: new Map(), param: null, rest: null, handlers: new Map() };
}

export interface RouteMatch<H> {
  readonly handler: H;
  readonly params: Params;
  /** The registered pattern, e.g. `/api/v3/encryption/:slug/encrypt`: a bounded label. */
  readonly template: string;
}

export class Router<H> {
  private readonly root = node<H>();

  add(method: string, pattern: string, handler: H): this {
    let at = this.root;
    const segments = pattern.split('/').slice(1);
    for (const [i, segment] of segments.entries()) {
      if (segment.startsWith('*')) {
        const name = segment.slice(1);
        if (i !== segments.length - 1) throw new Error(`route ${pattern}: *${name} must be the last segment`);
        if (at.rest !== null && at.rest.name !== name) throw new Error(`route ${pattern}: *${name} clashes with *${at.rest.name}`);
        at.rest ??= { name, node: node<H>() };
        at = at.rest.node;
      } else if (segment.startsWith(':')) {
        const name = segment.slice(1);
        if (at.param !== null && at.param.name !== name) throw new Error(`route ${pattern}: parameter :${name} clashes with :${at.param.name}`);
        at.param ??= { name, node: node<H>() };
        at = at.param.node;
      } else {
        let next = at.statics.get(segment);
        if (next === undefined) {
          next = node<H>();
          at.statics.set(segment, next);
        }
        at = next;
      }
    }
    if (at.handlers.has(method)) throw new Error(`route ${method} ${pattern} registered twice`);
    at.handlers.set(method, { handler, template: pattern });
    return this;
  }

  /** Every registered route as its method and pattern (the OpenAPI coverage test reads it). */
  routes(): Array<{ method: string; template: string }> {
    const out: Array<{ method: string; template: string }> = [];
    const walk = (at: Node<H>): void => {
      for (const [method, { template }] of at.handlers) out.push({ method, template });
      for (const next of at.statics.values()) walk(next);
      if (at.param !== null) walk(at.param.node);
      if (at.rest !== null) walk(at.rest.node);
    };
    walk(this.root);
    return out;
  }

  /** Finds the handler for a path (without query). Throws 404 or 405. */
  find(method: string, path: string): RouteMatch<H> {
    let params: Params = {};
    let at: Node<H> | undefined = this.root;
    let start = 1;
    // The deepest `*rest` passed on the way: where the walk falls back to if it dead-ends.
    let fallback: { node: Node<H>; params: Params } | null = null;
    while (at !== undefined && start <= path.length) {
      if (at.rest !== null) fallback = { node: at.rest.node, params: { ...params, [at.rest.name]: path.slice(start) } };
      let end = path.indexOf('/', start);
      if (end === -1) end = path.length;
      const raw = path.slice(start, end);
      const next: Node<H> | undefined = at.statics.get(raw);
      if (next !== undefined) {
        at = next;
      } else if (at.param !== null && raw !== '') {
        params[at.param.name] = decodeSegment(raw);
        at = at.param.node;
      } else {
        at = undefined;
      }
      start = end + 1;
    }
    // `/egress/x` with nothing after it: the rest is empty.
    if (at !== undefined && at.handlers.size === 0 && at.rest !== null && start > path.length) {
      fallback = { node: at.rest.node, params: { ...params, [at.rest.name]: '' } };
    }
    if ((at === undefined || at.handlers.size === 0) && fallback !== null) {
      at = fallback.node;
      params = fallback.params;
    }
    if (at === undefined || at.handlers.size === 0) throw new NotFoundError();
    const route = at.handlers.get(method) ?? (method === 'HEAD' ? at.handlers.get('GET') : undefined);
    if (route === undefined) throw new MethodNotAllowedError(allowedMethods(at.handlers));
    return { handler: route.handler, params, template: route.template };
  }
}

/** The methods a path takes, for `Allow`: its routes, and HEAD wherever GET answers it. */
function allowedMethods(handlers: ReadonlyMap<string, unknown>): string[] {
  const methods = [...handlers.keys()];
  if (handlers.has('GET') && !handlers.has('HEAD')) methods.splice(methods.indexOf('GET') + 1, 0, 'HEAD');
  return methods;
}

function decodeSegment(raw: string): string {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new NotFoundError();
  }
}
