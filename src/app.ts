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
import { checkRouteReferences } from './config/route-references.ts';
import { wrapDataKey } from './crypto/data-keys.ts';
import { Keyring } from './crypto/keyring.ts';
import { loadMasterKey, type MasterKey } from './crypto/master-key.ts';
import { CodecCache } from './dataplane/codecs.ts';
import { decryptRoute, encryptRoute, proxyRoute } from './dataplane/encryption-routes.ts';
import { rewrapRoute } from './dataplane/rewrap.ts';
import { Forwarder } from './dataplane/forwarder.ts';
import { EgressRoutes, egressRoute } from './dataplane/egress.ts';
import { compileRelayRoutes, RelayServer } from './dataplane/relay.ts';
import type { Resolver } from './dataplane/address-policy.ts';
import { FieldPathCache } from './dataplane/field-path-cache.ts';
import type { Services } from './dataplane/services.ts';
import type { RequestContext } from './http/context.ts';
import { sendJson } from './http/respond.ts';
import { Router } from './http/router.ts';
import { createHttpServer, type Handler } from './http/server.ts';
import { openStore, type Store } from './store/db.ts';
import { applySeed, type SeedDeps } from './store/seed.ts';
import { nowIso } from './store/sql.ts';
import { FileSource, logSeedResult } from './sync/file-source.ts';
import { createReplication, type Replication } from './sync/replica.ts';
import { createLogger } from './telemetry/logger.ts';
import { NotReadyError } from './errors.ts';
import { apiRoutes } from './api/index.ts';
import { mount } from './api/routes.ts';
import { openApiRoute } from './api/openapi.ts';
import { LogWriter } from './telemetry/log-writer.ts';
import { Metrics } from './telemetry/metrics.ts';
import { RetentionJob } from './telemetry/retention.ts';

export interface App {
  readonly services: Services;
  readonly server: Server;
  readonly admin: Server | null;
  /** The relay listener in front of the application (`relay` in the config), if any. */
  readonly relay: RelayServer | null;
  /** Keys created by the seed without a literal value: shown once, at first start. */
  readonly createdApiKeys: ReadonlyArray<{ name: string; key: string }>;
  /** The snapshot poller and log shipper of a `state.source: control-plane` service; null otherwise. */
  readonly replication: Replication | null;
  listen(): Promise<{ main: AddressInfo; admin: AddressInfo | null; relay: AddressInfo | null }>;
  close(): Promise<void>;
}

export interface AppOptions {
  readonly logger?: Logger;
  readonly env?: NodeJS.ProcessEnv;
  /** DNS for public-only destinations (tests use their own names). */
  readonly resolve?: Resolver;
  /** The file `config` was loaded from: with `state.source: file` its seed is reloaded when it changes. */
  readonly configPath?: string;
}

const PROXY_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export function buildRouter(): Router<Handler<Services>> {
  const router = new Router<Handler<Services>>()
    .add('GET', '/healthz', healthz)
    .add('GET', '/readyz', readyz)
    .add('GET', '/api/openapi.json', openApiRoute)
    .add('POST', '/api/v3/encryption/:slug/encrypt', encryptRoute)
    .add('POST', '/api/v3/encryption/:slug/decrypt', decryptRoute)
    .add('POST', '/api/v3/encryption/:slug/rewrap', rewrapRoute);
  for (const method of PROXY_METHODS) router.add(method, '/proxy/:slug', proxyRoute);
  for (const method of PROXY_METHODS) router.add(method, '/egress/:name/*rest', egressRoute);
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
    destination: ctx.destination,
    durationMs: Math.round(performance.now() - ctx.startedAt),
    ip: ctx.req.socket.remoteAddress ?? '',
    createdAt: nowIso(),
  });
}

async function metricsRoute(ctx: RequestContext, services: Services): Promise<void> {
  const { contentType, body } = await services.metrics.render();
  ctx.res.statusCode = 200;
  ctx.res.setHeader('content-type', contentType);
  ctx.res.end(body);
}

function healthz(ctx: RequestContext): void {
  sendJson(ctx, 200, { status: 'ok' });
}

function readyz(ctx: RequestContext, services: Services): void {
  if (!services.health.ready) throw new NotReadyError();
  try {
    services.store.db.prepare('SELECT 1').get();
  } catch {
    throw new NotReadyError();
  }
  sendJson(ctx, 200, { status: 'ready' });
}

export function createApp(config: Config, options: AppOptions = {}): App {
  const logger = options.logger ?? createLogger(config.logging.level);
  const master = openMasterKey(config, logger, options.env ?? process.env);
  // Routes are compiled before the store opens: a bad one stops the start with nothing to undo.
  const egress = new EgressRoutes(config.egress);
  const relayRoutes = config.relay === undefined ? null : compileRelayRoutes(config.relay);
  const store = openStore(config.store.path);
  let createdApiKeys: Array<{ name: string; key: string }> = [];
  try {
    // A replica's state is the control plane's snapshot: its seed only bootstraps one that
    // has never received a snapshot, and the first snapshot replaces it.
    if (config.state.source !== 'control-plane' || store.replication.getSync('applied') === undefined) {
      const seeded = seedStore(store, master, config);
      logSeedResult(logger, seeded);
      createdApiKeys = seeded.createdApiKeys;
    }
    checkRouteReferences(config, store);
  } catch (err) {
    store.close();
    throw err;
  }
  // The log queue is read at scrape time, once services exist.
  const metrics = new Metrics(() => services.logs);
  const replication = createReplication(config, store, logger, metrics);
  const services: Services = {
    config,
    logger,
    store,
    auth: Authenticator.fromConfig(store, master, config.auth),
    codecs: new CodecCache(store, master),
    fieldPaths: new FieldPathCache(),
    logs: new LogWriter(store, logger, {
      flushInterval: config.logs.flush_interval,
      batchSize: config.logs.batch_size,
      queueLimit: config.logs.queue_limit,
      enabled: config.logs.enabled,
    }),
    master,
    forwarder: new Forwarder({
      connectTimeout: config.forwarding.connect_timeout,
      headersTimeout: config.forwarding.headers_timeout,
      bodyTimeout: config.forwarding.body_timeout,
      resolve: options.resolve,
      metrics,
    }),
    egress,
    metrics,
    health: replication?.health ?? { ready: false },
  };
  // One state is applied at start: the seed.
  metrics.stateVersion.set(1);
  replication?.resume();
  const retention = new RetentionJob(store, logger, { retention: config.logs.retention });
  const fileSource =
    config.state.source === 'file' && options.configPath !== undefined
      ? new FileSource(services, { path: options.configPath, env: options.env ?? process.env, running: config, deps: seedDeps(master) })
      : null;
  const serverOptions = {
    maxHeaderSize: config.server.max_header_size,
    headersTimeout: config.server.headers_timeout,
    requestTimeout: config.server.request_timeout,
    keepAliveTimeout: config.server.keep_alive_timeout,
  };
  const router = buildRouter();
  const server = createHttpServer(router, services, logger, serverOptions, (ctx) => {
    metrics.observeRequest(ctx.route, ctx.req.method ?? 'GET', ctx.res.statusCode, (performance.now() - ctx.startedAt) / 1000);
    recordApiLog(ctx, services);
  });
  const relay = config.relay === undefined || relayRoutes === null ? null : new RelayServer(config.relay, relayRoutes, services, serverOptions);
  const admin =
    config.server.admin_listen === 'off'
      ? null
      : createHttpServer(
          new Router<Handler<Services>>().add('GET', '/healthz', healthz).add('GET', '/readyz', readyz).add('GET', '/metrics', metricsRoute),
          services,
          logger,
          serverOptions,
        );

  return {
    services,
    server,
    admin,
    relay,
    createdApiKeys,
    replication,
    async listen() {
      const main = await listenOn(server, config.server.listen);
      const adminAddress = admin === null ? null : await listenOn(admin, config.server.admin_listen);
      const relayAddress = relay === null ? null : await relay.listen();
      retention.start();
      if (fileSource !== null) fileSource.start();
      else if (config.state.source === 'file') logger.warn('state.source is file but no configuration file path was given: the seed will not be reloaded');
      replication?.start();
      services.health.ready = true;
      return { main, admin: adminAddress, relay: relayAddress };
    },
    async close() {
      // Readiness fails first, so load balancers stop sending while requests drain.
      services.health.ready = false;
      await Promise.all([
        closeServer(server, config.server.drain_timeout),
        admin === null ? undefined : closeServer(admin, 1000),
        relay?.close(config.server.drain_timeout),
      ]);
      await retention.stop();
      await fileSource?.stop();
      await replication?.stop();
      await services.logs.close();
      await services.forwarder.close();
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

/** With `state.source: file` the file is followed: what it no longer declares is removed. */
function seedStore(store: Store, master: MasterKey, config: Config) {
  return applySeed(store, config.seed, seedDeps(master), { prune: config.state.source === 'file' });
}

function seedDeps(master: MasterKey): SeedDeps {
  return {
    hashPassword,
    verifyPassword,
    wrapKey: (configurationId, version, key) => wrapDataKey(master, configurationId, version, key),
    generateDataKey: Keyring.generateKey,
    generateKeyringId: Keyring.generateId,
    hashApiKey,
    generateApiKey,
  };
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
