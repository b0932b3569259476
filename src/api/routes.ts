/**
 * The management API's routes. Each resource module lists its routes with the permission
 * each needs; this table is the single source for authorization, the permission docs and
 * the permission-matrix test.
 */
import { authenticateRequest } from '../auth/request-auth.ts';
import { isReplicationKey, requirePermission, type Caller } from '../auth/caller.ts';
import type { Permission } from '../config/schema.ts';
import type { Services } from '../services.ts';
import { ActionUnauthorizedError, ManagedByControlPlaneError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import type { Router } from '../http/router.ts';
import type { Handler } from '../http/listener.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface ApiRoute {
  readonly method: Method;
  /** Router pattern under the listener root, e.g. `/api/v3/classifications/:id`. */
  readonly path: string;
  /** The permission the acting user needs; null for any valid API key. */
  readonly permission: Permission | null;
  /** A management write: refused with 409 where state comes from a control plane. */
  readonly write: boolean;
  readonly handler: (ctx: RequestContext, services: Services, caller: Caller) => Promise<void> | void;
}

/** Registers `routes`, each behind authentication, its permission and the write guard. */
export function mount(router: Router<Handler<Services>>, routes: readonly ApiRoute[]): void {
  for (const route of routes) {
    router.add(route.method, route.path, async (ctx, services) => {
      const caller = await authenticateRequest(ctx, services.auth);
      // A replicas' key (sync.* only) reaches the sync routes and nothing else, not even
      // the routes any key may call (login, the acting user).
      if (isReplicationKey(caller) && route.permission?.startsWith('sync.') !== true) throw new ActionUnauthorizedError();
      if (route.permission !== null) requirePermission(caller, route.permission);
      if (route.write && services.config.state.source === 'control-plane') throw new ManagedByControlPlaneError();
      await route.handler(ctx, services, caller);
    });
  }
}
