import type { ApiRoute } from './routes.ts';

export const routes: ApiRoute[] = [];
