/**
 * The management API's route table (src/api/route-table.ts) names each handler by module
 * and name, and routes.ts imports the module on the first request: every name must lead to
 * a function, and every handler a module exports must have a route.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { apiRoutes, type ApiModule } from '../../src/api/route-table.ts';
import { routeHandler } from '../../src/api/routes.ts';

const MODULES: readonly ApiModule[] = ['api-keys', 'auth', 'classifications', 'configurations', 'keys', 'logs', 'sync', 'users'];

test('every route of the table leads to a handler its module exports', async () => {
  for (const route of apiRoutes) assert.equal(typeof (await routeHandler(route)), 'function', `${route.method} ${route.path}`);
});

test('every handler a module exports has a route, and every module has one', async () => {
  for (const module of MODULES) {
    const { handlers } = (await import(`../../src/api/${module}.ts`)) as { handlers: Record<string, unknown> };
    const named = apiRoutes.filter((route) => route.module === module).map((route) => route.handler);
    assert.ok(named.length > 0, `${module} has a route`);
    assert.deepEqual(Object.keys(handlers).sort(), [...new Set(named)].sort(), `the handlers of src/api/${module}.ts`);
  }
});
