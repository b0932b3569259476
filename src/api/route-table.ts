/**
 * The management API's routes: method, path, the permission each needs, whether it is a
 * write, and where its handler is (a module of src/api and the name it exports the handler
 * under in `handlers`). This table is the single source for authorization, the permission
 * docs and the permission-matrix test. It imports no handler: the modules behind it, with
 * their validation schemas, are loaded on the first request to one of their routes
 * (routes.ts), so a service that only proxies never loads them.
 */
import type { Permission } from '../config/schema.ts';
import { LOGS_PATH } from '../sync/log-shipper.ts';
import { SNAPSHOT_PATH } from '../sync/replica.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** The modules of src/api that serve routes (each exports `handlers`). */
export type ApiModule = keyof ModuleHandlers;

/** Each module's `handlers`, as types only: nothing is loaded by naming them here. */
export interface ModuleHandlers {
  'api-keys': (typeof import('./api-keys.ts'))['handlers'];
  auth: (typeof import('./auth.ts'))['handlers'];
  classifications: (typeof import('./classifications.ts'))['handlers'];
  configurations: (typeof import('./configurations.ts'))['handlers'];
  keys: (typeof import('./keys.ts'))['handlers'];
  logs: (typeof import('./logs.ts'))['handlers'];
  sync: (typeof import('./sync.ts'))['handlers'];
  users: (typeof import('./users.ts'))['handlers'];
}

interface RouteSpec {
  readonly method: Method;
  /** Router pattern under the listener root, e.g. `/api/v3/classifications/:id`. */
  readonly path: string;
  /** The permission the acting user needs; null for any valid API key. */
  readonly permission: Permission | null;
  /** A management write: refused with 409 where state comes from a control plane. */
  readonly write: boolean;
  /**
   * The route answers across every configuration (the log lists: their rows and the
   * configuration records they show): a key limited to some configurations is refused (403).
   */
  readonly everyConfiguration?: true;
}

/** A route, with its module and the name of its handler there (checked by the compiler). */
export type ApiRoute = { [M in ApiModule]: RouteSpec & { readonly module: M; readonly handler: keyof ModuleHandlers[M] & string } }[ApiModule];

const CLASSIFICATIONS = '/api/v3/classifications';
const CLASSIFICATION = '/api/v3/classifications/:id';

export const apiRoutes: readonly ApiRoute[] = [
  { method: 'GET', path: CLASSIFICATIONS, permission: 'classifications.view', write: false, module: 'classifications', handler: 'list' },
  { method: 'POST', path: CLASSIFICATIONS, permission: 'classifications.create', write: true, module: 'classifications', handler: 'create' },
  { method: 'GET', path: CLASSIFICATION, permission: 'classifications.view', write: false, module: 'classifications', handler: 'show' },
  { method: 'PATCH', path: CLASSIFICATION, permission: 'classifications.update', write: true, module: 'classifications', handler: 'update' },
  { method: 'DELETE', path: CLASSIFICATION, permission: 'classifications.delete', write: true, module: 'classifications', handler: 'remove' },

  { method: 'GET', path: '/api/v3/configurations', permission: 'configurations.view', write: false, module: 'configurations', handler: 'list' },
  { method: 'POST', path: '/api/v3/configurations', permission: 'configurations.create', write: true, module: 'configurations', handler: 'create' },
  { method: 'GET', path: '/api/v3/configurations/:id', permission: 'configurations.view', write: false, module: 'configurations', handler: 'show' },
  { method: 'PUT', path: '/api/v3/configurations/:id', permission: 'configurations.update', write: true, module: 'configurations', handler: 'update' },
  { method: 'DELETE', path: '/api/v3/configurations/:id', permission: 'configurations.delete', write: true, module: 'configurations', handler: 'destroy' },
  { method: 'POST', path: '/api/v3/configurations/:id/rotate', permission: 'configurations.rotate', write: true, module: 'configurations', handler: 'rotate' },

  { method: 'GET', path: '/api/v3/configurations/:id/keys', permission: 'configurations.view', write: false, module: 'keys', handler: 'list' },
  { method: 'POST', path: '/api/v3/configurations/:id/keys/:version/destroy', permission: 'configurations.rotate', write: true, module: 'keys', handler: 'destroy' },

  { method: 'GET', path: '/api/v3/api-keys', permission: 'api-keys.view', write: false, module: 'api-keys', handler: 'list' },
  { method: 'POST', path: '/api/v3/api-keys', permission: 'api-keys.create', write: true, module: 'api-keys', handler: 'create' },
  { method: 'GET', path: '/api/v3/api-keys/:id', permission: 'api-keys.view', write: false, module: 'api-keys', handler: 'show' },
  { method: 'POST', path: '/api/v3/api-keys/:id/revoke', permission: 'api-keys.revoke', write: true, module: 'api-keys', handler: 'revoke' },
  { method: 'POST', path: '/api/v3/api-keys/:id/rotate', permission: 'api-keys.rotate', write: true, module: 'api-keys', handler: 'rotate' },

  { method: 'GET', path: '/api/v3/users', permission: 'users.view', write: false, module: 'users', handler: 'list' },
  { method: 'POST', path: '/api/v3/users', permission: 'users.manage', write: true, module: 'users', handler: 'create' },
  { method: 'GET', path: '/api/v3/roles', permission: 'roles.view', write: false, module: 'users', handler: 'listRoles' },

  { method: 'GET', path: '/api/v3/logs/unified', permission: 'logs.view', write: false, module: 'logs', handler: 'listUnified', everyConfiguration: true },
  { method: 'GET', path: '/api/v3/logs/activity', permission: 'logs.view', write: false, module: 'logs', handler: 'listActivity', everyConfiguration: true },
  { method: 'GET', path: '/api/v3/logs/api', permission: 'logs.view', write: false, module: 'logs', handler: 'listApi', everyConfiguration: true },
  { method: 'GET', path: '/api/v3/logs/usage', permission: 'logs.view', write: false, module: 'logs', handler: 'listUsage', everyConfiguration: true },

  { method: 'POST', path: '/api/v2/auth/login', permission: null, write: false, module: 'auth', handler: 'login' },
  // Not a write: a token must be revocable on a replica too.
  { method: 'POST', path: '/api/v2/auth/logout', permission: null, write: false, module: 'auth', handler: 'logout' },
  { method: 'GET', path: '/api/v2/auth/userdetails', permission: null, write: false, module: 'auth', handler: 'userDetails' },

  { method: 'GET', path: SNAPSHOT_PATH, permission: 'sync.read', write: false, module: 'sync', handler: 'snapshot' },
  // A write: a replica has no fleet logs to collect, so it answers 409 like other writes.
  { method: 'POST', path: LOGS_PATH, permission: 'sync.write', write: true, module: 'sync', handler: 'receiveLogs' },
];
