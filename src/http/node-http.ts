/**
 * `node:http`, loaded through `require`. Since Node 22 the module exports `WebSocket`,
 * `CloseEvent` and `MessageEvent` as lazy getters over Node's bundled copy of undici, and an
 * ES `import` of `node:http` builds the module's namespace by reading every export: that
 * loads the whole bundle, about 12 MiB of resident memory the service never uses (we forward
 * with the npm `undici`). `require` reads no export it is not asked for. Every value from
 * `node:http` comes through here; type-only imports (`import type`) load nothing and may
 * name `node:http` directly. test/ops/loaded-modules.test.ts holds the service to it.
 */
import { createRequire } from 'node:module';

const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');

export const { Agent, createServer, METHODS, ServerResponse } = http;
export type Agent = import('node:http').Agent;
export type ServerResponse = import('node:http').ServerResponse;
