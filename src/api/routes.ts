/**
 * Mounts the management API (route-table.ts) on a router: every route behind
 * authentication, its permission and the write guard. A route's module is imported on the
 * first request that passes those checks, so the management API's code and validation
 * schemas cost a service nothing until it is used.
 */
import { authenticateRequest } from '../auth/request-auth.ts';
import { isReplicationKey, requirePermission, type Caller } from '../auth/caller.ts';
import type { Services } from '../services.ts';
import { ActionUnauthorizedError, ForbiddenError, ManagedByControlPlaneError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import type { Router } from '../http/router.ts';
import type { Handler } from '../http/listener.ts';
import type { ApiModule, ApiRoute, ModuleHandlers } from './route-table.ts';

export type { ApiRoute, Method } from './route-table.ts';

export type RouteHandler = (ctx: RequestContext, services: Services, caller: Caller) => Promise<void> | void;
/** What each module of the table exports as `handlers`. */
export type Handlers = Readonly<Record<string, RouteHandler>>;

const MODULES: { readonly [M in ApiModule]: () => Promise<{ readonly handlers: ModuleHandlers[M] }> } = {
  'api-keys': () => import('./api-keys.ts'),
  auth: () => import('./auth.ts'),
  classifications: () => import('./classifications.ts'),
  configurations: () => import('./configurations.ts'),
  keys: () => import('./keys.ts'),
  logs: () => import('./logs.ts'),
  sync: () => import('./sync.ts'),
  users: () => import('./users.ts'),
};

/** The handler a route names, its module imported if it is not yet. */
export async function routeHandler(route: ApiRoute): Promise<RouteHandler> {
  const { handlers } = await MODULES[route.module]();
  const handler = (handlers as Handlers)[route.handler];
  if (typeof handler !== 'function') throw new TypeError(`src/api/${route.module}.ts exports no handler "${route.handler}"`);
  return handler;
}

/** Registers `routes`, each behind authentication, its permission, its configuration scope and the write guard. */
export function mount(router: Router<Handler<Services>>, routes: readonly ApiRoute[]): void {
  for (const route of routes) {
    let handler: RouteHandler | null = null;
    router.add(route.method, route.path, async (ctx, services) => {
      const caller = await authenticateRequest(ctx, services.auth);
      // A replicas' key (sync.* only) reaches the sync routes and nothing else, not even
      // the routes any key may call (login, the acting user).
      if (isReplicationKey(caller) && route.permission?.startsWith('sync.') !== true) throw new ActionUnauthorizedError();
      if (route.permission !== null) requirePermission(caller, route.permission);
      if (route.everyConfiguration === true && caller.configurations !== null) throw new ForbiddenError();
      if (route.write && services.config.state.source === 'control-plane') throw new ManagedByControlPlaneError();
      handler ??= await routeHandler(route);
      await handler(ctx, services, caller);
    });
  }
}
