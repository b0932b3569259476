/**
 * Assembles the service from a loaded configuration: store, master key, seed, caches,
 * routes and listeners. `main.ts` and the tests both start the service through here.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { Authenticator } from './auth/caller.ts';
import { generateApiKey, hashApiKey } from './auth/api-keys.ts';
import { hashPassword, verifyPassword } from './auth/passwords.ts';
import { parseListen, type Config } from './config/load.ts';
import { wrapDataKey } from './crypto/data-keys.ts';
import { Keyring } from './crypto/keyring.ts';
import { loadMasterKey, type MasterKey } from './crypto/master-key.ts';
import { CodecCache } from './dataplane/codecs.ts';
import { decryptRoute, encryptRoute } from './dataplane/encryption-routes.ts';
import { FieldPathCache } from './dataplane/field-path-cache.ts';
import type { Services } from './dataplane/services.ts';
import type { RequestContext } from './http/context.ts';
import { sendJson } from './http/respond.ts';
import { Router } from './http/router.ts';
import { createHttpServer, type Handler } from './http/server.ts';
import { openStore, type Store } from './store/db.ts';
import { applySeed } from './store/seed.ts';
import { createLogger } from './telemetry/logger.ts';
import { NotReadyError } from './errors.ts';
import { apiRoutes } from './api/index.ts';
import { mount } from './api/routes.ts';
import { LogWriter } from './telemetry/log-writer.ts';

export interface App {
  readonly services: Services;
  readonly server: Server;
  readonly admin: Server | null;
  /** Keys created by the seed without a literal value: shown once, at first start. */
  readonly createdApiKeys: ReadonlyArray<{ name: string; key: string }>;
  listen(): Promise<{ main: AddressInfo; admin: AddressInfo | null }>;
  close(): Promise<void>;
}

export interface AppOptions {
  readonly logger?: Logger;
  readonly env?: NodeJS.ProcessEnv;
}

export function buildRouter(): Router<Handler<Services>> {
  const router = new Router<Handler<Services>>()
    .add('GET', '/healthz', healthz)
    .add('GET', '/readyz', readyz)
    .add('POST', '/api/v3/encryption/:slug/encrypt', encryptRoute)
    .add('POST', '/api/v3/encryption/:slug/decrypt', decryptRoute);
  mount(router, apiRoutes);
  return router;
}

/** Every /api and /proxy request leaves an api log entry (DESIGN §10). */
function recordApiLog(ctx: RequestContext, services: Services): void {
  if (!ctx.path.startsWith('/api/') && !ctx.path.startsWith('/proxy/')) return;
  services.logs.api({
    requestId: ctx.id,
    method: ctx.req.method ?? 'GET',
    path: ctx.path.length > 1024 ? ctx.path.slice(0, 1024) : ctx.path,
    statusCode: ctx.res.statusCode,
    apiKeyId: ctx.apiKeyId,
    userId: ctx.userId,
    configurationId: ctx.configurationId,
    destination: null,
    durationMs: Math.round(performance.now() - ctx.startedAt),
    ip: ctx.req.socket.remoteAddress ?? '',
    createdAt: new Date().toISOString(),
  });
}

function healthz(ctx: RequestContext): void {
  sendJson(ctx, 200, { status: 'ok' });
}

function readyz(ctx: RequestContext, services: Services): void {
  try {
    services.store.db.prepare('SELECT 1').get();
  } catch (err) {
    throw new NotReadyError();
  }
  sendJson(ctx, 200, { status: 'ready' });
}

export function createApp(config: Config, options: AppOptions = {}): App {
  const logger = options.logger ?? createLogger(config.logging.level);
  const master = openMasterKey(config, logger, options.env ?? process.env);
  const store = openStore(config.store.path);
  let createdApiKeys: Array<{ name: string; key: string }>;
  try {
    createdApiKeys = seedStore(store, master, config).createdApiKeys;
  } catch (err) {
    store.close();
    throw err;
  }
  const services: Services = {
    config,
    logger,
    store,
    auth: new Authenticator(store),
    codecs: new CodecCache(store, master),
    fieldPaths: new FieldPathCache(),
    logs: new LogWriter(store, logger, {
      flushInterval: config.logs.flush_interval,
      batchSize: config.logs.batch_size,
      queueLimit: config.logs.queue_limit,
    }),
  };
  const serverOptions = {
    maxHeaderSize: config.server.max_header_size,
    headersTimeout: config.server.headers_timeout,
    requestTimeout: config.server.request_timeout,
    keepAliveTimeout: config.server.keep_alive_timeout,
  };
  const router = buildRouter();
  const server = createHttpServer(router, services, logger, serverOptions, (ctx) => recordApiLog(ctx, services));
  const admin =
    config.server.admin_listen === 'off'
      ? null
      : createHttpServer(
          new Router<Handler<Services>>().add('GET', '/healthz', healthz).add('GET', '/readyz', readyz),
          services,
          logger,
          serverOptions,
        );

  return {
    services,
    server,
    admin,
    createdApiKeys,
    async listen() {
      const main = await listenOn(server, config.server.listen);
      const adminAddress = admin === null ? null : await listenOn(admin, config.server.admin_listen);
      return { main, admin: adminAddress };
    },
    async close() {
      await Promise.all([closeServer(server, config.server.drain_timeout), admin === null ? undefined : closeServer(admin, 1000)]);
      services.logs.close();
      store.close();
    },
  };
}

function openMasterKey(config: Config, logger: Logger, env: NodeJS.ProcessEnv): MasterKey {
  const master = loadMasterKey({
    env,
    file: config.keys.master_key_file,
    onGenerated: (path) =>
      logger.warn({ path }, 'no master key was configured: generated a development key file; set SVC_MASTER_KEY or keys.master_key_file in production'),
  });
  if (master.insecurePermissions) logger.warn({ path: config.keys.master_key_file }, 'the master key file is readable by other users; chmod 600 it');
  logger.info({ fingerprint: master.fingerprint() }, 'master key loaded');
  return master;
}

function seedStore(store: Store, master: MasterKey, config: Config) {
  return applySeed(store, config.seed, {
    hashPassword,
    verifyPassword,
    wrapKey: (configurationId, version, key) => wrapDataKey(master, configurationId, version, key),
    generateDataKey: Keyring.generateKey,
    generateKeyringId: Keyring.generateId,
    hashApiKey,
    generateApiKey,
  });
}

function listenOn(server: Server, address: string): Promise<AddressInfo> {
  const { host, port } = parseListen(address);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

/** Stops accepting, lets in-flight requests finish within `timeout` ms, then cuts the rest. */
function closeServer(server: Server, timeout: number): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => server.closeAllConnections(), timeout);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}
