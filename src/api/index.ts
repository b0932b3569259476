import type { ApiRoute } from './routes.ts';
import { routes as apiKeys } from './api-keys.ts';
import { routes as auth } from './auth.ts';
import { routes as classifications } from './classifications.ts';
import { routes as configurations } from './configurations.ts';
import { routes as keys } from './keys.ts';
import { routes as logs } from './logs.ts';
import { routes as sync } from './sync.ts';
import { routes as users } from './users.ts';

/** Every management route: the table behind authorization and docs/permissions.md. */
export const apiRoutes: readonly ApiRoute[] = [...classifications, ...configurations, ...keys, ...apiKeys, ...users, ...logs, ...auth, ...sync];
