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
import type { Config } from './config/load.ts';
import type { RelayConfig } from './config/schema.ts';
import { isLoopback, parseListen } from './config/listen.ts';
import { checkRouteReferences } from './config/route-references.ts';
import { timingSafeEqual } from 'node:crypto';
import { unwrapDataKey, wrapDataKey } from './crypto/data-keys.ts';
import { Keyring } from './crypto/keyring.ts';
import { loadMasterKey, type MasterKey } from './crypto/master-key.ts';
import { CodecCache } from './dataplane/codecs.ts';
import { decryptRoute, encryptRoute, proxyRoute } from './dataplane/encryption-routes.ts';
import { rewrapRoute } from './dataplane/rewrap.ts';
import { Forwarder } from './dataplane/forwarder.ts';
import { EgressRoutes, egressRoute } from './dataplane/egress.ts';
import type { RelayRoute, RelayServer } from './dataplane/relay.ts';
import { EgressProxy } from './dataplane/egress-proxy.ts';
import type { Resolver } from './dataplane/address-policy.ts';
import { FieldPathCache } from './dataplane/field-path-cache.ts';
import { dataLimits } from './dataplane/limits.ts';
import type { Services } from './services.ts';
import type { RequestContext } from './http/context.ts';
import { sendBody, sendJson } from './http/respond.ts';
import { Router } from './http/router.ts';
import { Listener, listenAll, routerHandler, type Handler, type ListenerOptions, type RequestHandler } from './http/listener.ts';
import { refuseUnknownSvcHeaders } from './http/svc-headers.ts';
import { openConfiguredStore, type Store } from './store/db.ts';
import { prepareState } from './store/state-view.ts';
import { applySeed, type PasswordPlan, type SeedDeps } from './store/seed.ts';
import { seedsAtStart } from './store/seed-plan.ts';
import { LogSampler } from './telemetry/log-sampler.ts';
import { recordApiLog } from './telemetry/usage.ts';
import { FileSource, logSeedResult } from './sync/file-source.ts';
import { createReplication, type Replication } from './sync/replica.ts';
import { createLogger } from './telemetry/logger.ts';
import { ControlPlaneOnlyError, MasterKeyMismatchError, NotReadyError } from './errors.ts';
import { apiRoutes } from './api/route-table.ts';
import { mount } from './api/routes.ts';
import { IdleMemoryRelease } from './telemetry/idle-memory.ts';
import { LogWriter } from './telemetry/log-writer.ts';
import { Metrics } from './telemetry/metrics.ts';
import { RetentionJob } from './telemetry/retention.ts';

export interface App {
  readonly services: Services;
  readonly server: Server;
  readonly admin: Server | null;
  /** The relay listener in front of the application (`relay` in the config), if any. */
  readonly relay: RelayServer | null;
  /** The application's HTTP(S)_PROXY (`egress_proxy` in the config), if any. */
  readonly egressProxy: EgressProxy | null;
  /** Keys created by the seed without a literal value: shown once, at first start. */
  readonly createdApiKeys: ReadonlyArray<{ name: string; key: string }>;
  /** The snapshot poller and log shipper of a `state.source: control-plane` service; null otherwise. */
  readonly replication: Replication | null;
  listen(): Promise<{ main: AddressInfo; admin: AddressInfo | null; relay: AddressInfo | null; egressProxy: AddressInfo | null }>;
  close(): Promise<void>;
}

export interface AppOptions {
  readonly logger?: Logger;
  readonly env?: NodeJS.ProcessEnv;
  /** DNS for public-only destinations (tests use their own names). */
  readonly resolve?: Resolver;
  /** The file `config` was loaded from: with `state.source: file` its seed is reloaded when it changes. */
  readonly configPath?: string;
  /**
   * `new-store`: apply the seed only to a store this start creates. CLI commands use it: a
   * live store's state is the API's too, and re-applying the seed there would undo what
   * the API changed since the service started (a rotated seeded API key, for one).
   * Default `always`, as `serve` does at every start.
   */
  readonly seed?: 'always' | 'new-store';
  /**
   * The store, opened by the caller before it loaded this module (`serve`: src/cli/run.ts),
   * and the seed's password decisions begun on it (`decidePasswords`), or null when
   * `seedsAtStart` said this start applies no seed: the app takes that answer as it is. The
   * app owns the store from here: it closes it whether it starts or fails. Without it the
   * app opens the store itself, after compiling the routes, and asks `seedsAtStart` itself.
   */
  readonly opened?: { readonly store: Store; readonly passwords: Promise<PasswordPlan> | null };
}

/**
 * `GET /api/openapi.json`. The document is a few megabytes of objects once built and few
 * callers ever read it, so it is loaded on the first request rather than at start.
 */
async function openApiRoute(ctx: RequestContext): Promise<void> {
  const { openApiRoute: serve } = await import('./api/openapi.ts');
  serve(ctx);
}

const PROXY_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export function buildRouter(): Router<Handler<Services>> {
  const router = new Router<Handler<Services>>()
    .add('GET', '/healthz', healthz)
    .add('GET', '/readyz', readyz)
    .add('GET', '/api/openapi.json', openApiRoute)
    .add('POST', '/api/v3/encryption/:slug/encrypt', dataPlane(encryptRoute))
    .add('POST', '/api/v3/encryption/:slug/decrypt', dataPlane(decryptRoute))
    .add('POST', '/api/v3/encryption/:slug/rewrap', dataPlane(rewrapRoute));
  for (const method of PROXY_METHODS) router.add(method, '/proxy/:slug', dataPlane(proxyRoute));
  for (const method of PROXY_METHODS) router.add(method, '/egress/:name/*rest', dataPlane(egressRoute));
  mount(router, apiRoutes);
  return router;
}

/**
 * A data-plane route: on a control plane whose store is PostgreSQL (DESIGN §16) it is
 * refused, loudly. Those instances serve the management API, login and replication; the
 * sidecars (replicas), each on its own copy of the state, serve the data.
 */
function dataPlane(handler: Handler<Services>): Handler<Services> {
  return (ctx, services) => {
    if (services.store.kind === 'postgres') throw new ControlPlaneOnlyError();
    return handler(ctx, services);
  };
}

/**
 * Routes `handler`'s requests once the state view is current: on PostgreSQL that may mean
 * reading the state first (prepareState), on SQLite it never waits.
 */
function withCurrentState(store: Store, handler: RequestHandler): RequestHandler {
  // On SQLite the view is made as it is read: nothing to wait for, nothing to wrap.
  if (store.kind !== 'postgres') return handler;
  return (ctx) => {
    // Liveness and readiness read no state: they answer while the database is away (and
    // /readyz says so, from its own ping).
    if (HEALTH_PATHS.has(ctx.path)) return handler(ctx);
    const preparing = prepareState(store);
    // A database that cannot be reached fails it with StoreUnavailableError: 503.
    return preparing === undefined ? handler(ctx) : preparing.then(() => handler(ctx));
  };
}

const HEALTH_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz']);

/** The admin listener's routes (`server.admin_listen`): health and metrics, never the API. */
export function buildAdminRouter(): Router<Handler<Services>> {
  return new Router<Handler<Services>>().add('GET', '/healthz', healthz).add('GET', '/readyz', readyz).add('GET', '/metrics', metricsRoute);
}

/**
 * The end of every exchange on a listener: metrics for all, and an api log entry for what
 * DESIGN §10 logs — every authenticated /api and /proxy request on the main listener, and
 * every relay or egress route's request (named by the route, `ctx.logPath`). Requests that
 * fail authentication or match no route write nothing to the store (DESIGN §13): they are
 * counted, and sampled in the process log. Every request but a health check counts as
 * work for the idle memory release.
 */
function finishRequest(services: Services, logsApiPaths: boolean, sampler: LogSampler, served: { requests: number }): (ctx: RequestContext) => void {
  return (ctx) => {
    if (!HEALTH_PATHS.has(ctx.path)) {
      served.requests++;
      services.metrics.requestEnded();
    }
    const status = ctx.res.statusCode;
    services.metrics.observeRequest(ctx.route, ctx.req.method ?? 'GET', status, (performance.now() - ctx.startedAt) / 1000);
    if (ctx.logPath !== null) {
      recordApiLog(ctx, services.logs, ctx.logPath);
    } else if (logsApiPaths && (ctx.path.startsWith('/api/') || ctx.path.startsWith('/proxy/'))) {
      if (ctx.apiKeyId !== null) recordApiLog(ctx, services.logs, ctx.path);
      else if (status === 401 || ctx.route === 'unmatched') sampler.note(status === 401 ? 'unauthenticated' : 'unmatched', { status, method: ctx.req.method, route: ctx.route });
    }
  };
}

/** Every request but a health check keeps the event-loop delay monitor running (telemetry/loop-delay.ts). */
function startRequest(services: Services): (ctx: RequestContext) => void {
  return (ctx) => {
    if (!HEALTH_PATHS.has(ctx.path)) services.metrics.requestStarted();
  };
}

/** On /api and /proxy, an `x-svc-` header svc-sidecar does not know is refused first (DESIGN §13). */
function mainHandler(route: RequestHandler): RequestHandler {
  return (ctx) => {
    if (ctx.path.startsWith('/api/') || ctx.path.startsWith('/proxy/')) refuseUnknownSvcHeaders(ctx.req.headers);
    return route(ctx);
  };
}

async function metricsRoute(ctx: RequestContext, services: Services): Promise<void> {
  const { contentType, body } = await services.metrics.render();
  sendBody(ctx, 200, contentType, Buffer.from(body));
}

function healthz(ctx: RequestContext): void {
  sendJson(ctx, 200, { status: 'ok' });
}

async function readyz(ctx: RequestContext, services: Services): Promise<void> {
  if (!services.health.ready) throw new NotReadyError();
  try {
    await services.store.ping();
  } catch {
    throw new NotReadyError();
  }
  sendJson(ctx, 200, { status: 'ready' });
}

/**
 * The relay's routes, compiled, and its server class. Its modules (http-proxy-3 and what
 * it requires) are loaded only where `relay:` is configured.
 */
async function compileRelay(config: RelayConfig): Promise<{ config: RelayConfig; routes: RelayRoute[]; RelayServer: typeof RelayServer }> {
  const { compileRelayRoutes, RelayServer } = await import('./dataplane/relay.ts');
  return { config, routes: compileRelayRoutes(config), RelayServer };
}

export async function createApp(config: Config, options: AppOptions = {}): Promise<App> {
  const logger = options.logger ?? createLogger(config.logging.level);
  // Routes are compiled before the store opens, where the app opens it: a bad one stops
  // the start with nothing to undo.
  let egress: EgressRoutes;
  let relaySetup: Awaited<ReturnType<typeof compileRelay>> | null;
  try {
    egress = new EgressRoutes(config.egress);
    relaySetup = config.relay === undefined ? null : await compileRelay(config.relay);
  } catch (err) {
    await options.opened?.store.close();
    throw err;
  }
  const store = options.opened?.store ?? (await openConfiguredStore(config.store));
  let createdApiKeys: Array<{ name: string; key: string }> = [];
  let master: MasterKey;
  try {
    master = await openMasterKey(config, logger, options.env ?? process.env, store);
  } catch (err) {
    await store.close();
    throw err;
  }
  try {
    // `serve` decided before it loaded this module (its plan is null when it does not seed);
    // the first snapshot a replica receives replaces what its seed bootstrapped.
    const seeds = options.opened === undefined ? await seedsAtStart(config, store, options.seed ?? 'always') : options.opened.passwords !== null;
    if (seeds) {
      const seeded = await seedStore(store, master, config, (await options.opened?.passwords) ?? undefined);
      logSeedResult(logger, seeded);
      createdApiKeys = seeded.createdApiKeys;
    }
    // On PostgreSQL the request path reads a view loaded beforehand: the first one now.
    await prepareState(store);
    await checkRouteReferences(config, store);
  } catch (err) {
    await store.close();
    throw err;
  }
  // The log queue is read at scrape time, once services exist.
  const metrics = new Metrics(() => services.logs);
  const replication = await createReplication(config, store, master, logger, metrics);
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
      thread: config.logs.writer === 'thread',
    }),
    master,
    forwarder: new Forwarder({
      connectTimeout: config.forwarding.connect_timeout,
      headersTimeout: config.forwarding.headers_timeout,
      bodyTimeout: config.forwarding.body_timeout,
      resolve: options.resolve,
      metrics,
    }),
    limits: dataLimits(config.limits.max_value),
    egress,
    metrics,
    health: replication?.health ?? { ready: false },
  };
  // One state is applied at start: the seed.
  metrics.stateVersion.set(1);
  await replication?.resume();
  const retention = new RetentionJob(store, logger, { retention: config.logs.retention });
  // Requests served on the listeners that do work (not the admin one), health checks aside.
  const served = { requests: 0 };
  const idleRelease = new IdleMemoryRelease({ idleAfter: config.server.idle_memory_release, served: () => served.requests, logger, onRelease: () => metrics.memoryReleases.inc() });
  const fileSource =
    config.state.source === 'file' && options.configPath !== undefined
      ? new FileSource(services, { path: options.configPath, env: options.env ?? process.env, running: config, deps: seedDeps(master) })
      : null;
  const server = {
    maxHeaderSize: config.server.max_header_size,
    headersTimeout: config.server.headers_timeout,
    requestTimeout: config.server.request_timeout,
    keepAliveTimeout: config.server.keep_alive_timeout,
  };
  const sampler = new LogSampler(logger, 'requests refused before authentication or routing (not stored; counted in svc_http_requests_total)');
  const listenerOptions = (logsApiPaths: boolean): ListenerOptions => ({ server, logger, onStart: startRequest(services), onFinish: finishRequest(services, logsApiPaths, sampler, served) });
  const main = new Listener('main', config.server.listen, withCurrentState(store, mainHandler(routerHandler(buildRouter(), services))), listenerOptions(true));
  const relay = relaySetup === null ? null : new relaySetup.RelayServer(relaySetup.config, relaySetup.routes, services, listenerOptions(false));
  const admin =
    config.server.admin_listen === 'off'
      ? null
      : new Listener('admin', config.server.admin_listen, routerHandler(buildAdminRouter(), services), { server, logger });
  const egressProxy = config.egress_proxy === undefined ? null : new EgressProxy(config.egress_proxy, services, listenerOptions(false), options.resolve);
  const listeners = [main, ...(admin === null ? [] : [admin]), ...(relay === null ? [] : [relay.listener]), ...(egressProxy === null ? [] : [egressProxy.listener])];

  return {
    services,
    server: main.server,
    admin: admin?.server ?? null,
    relay,
    egressProxy,
    createdApiKeys,
    replication,
    async listen() {
      // The CA exists before anything listens: a healthy process can always hand it out.
      if (egressProxy !== null) {
        const ca = await egressProxy.prepare();
        if (ca.created) logger.warn({ cert_file: config.egress_proxy!.ca.cert_file }, 'egress proxy: created a new CA; the applications that use the proxy must trust its certificate (svc-sidecar egress-ca prints it)');
        if (ca.interruptedRotation === 'finished') logger.warn({ cert_file: config.egress_proxy!.ca.cert_file }, 'egress proxy: a CA rotation had stopped between writing the certificate and the key; it is finished, the new CA is in use');
        if (ca.interruptedRotation === 'discarded') logger.warn({ cert_file: config.egress_proxy!.ca.cert_file }, 'egress proxy: a CA rotation had stopped before replacing any file; the CA in place is kept and the rotation\'s files are removed');
        if (ca.insecurePermissions) logger.warn({ key_file: config.egress_proxy!.ca.key_file }, 'the egress proxy CA key file is readable by other users; chmod 600 it');
        if (!isLoopback(parseListen(config.egress_proxy!.listen).host)) {
          logger.warn({ listen: config.egress_proxy!.listen }, 'the egress proxy listens beyond loopback and asks no credentials: whoever reaches it can have tokens decrypted for the listed hosts; bind it to 127.0.0.1 in the application\'s pod');
        }
      }
      const addresses = await listenAll(listeners);
      const address = (listener: Listener | undefined) => (listener === undefined ? null : addresses[listeners.indexOf(listener)]!);
      if (relay !== null && config.relay?.protect === undefined) {
        logger.warn('relay.protect is not set: request bodies that match no route, or a route in another spelling, reach the application untransformed (docs/relay.md)');
      }
      if (relay !== null) logger.info({ relay: `${address(relay.listener)!.address}:${address(relay.listener)!.port}`, upstream: config.relay!.upstream, routes: relaySetup!.routes.length }, 'relay listening');
      retention.start();
      if (fileSource !== null) fileSource.start();
      else if (config.state.source === 'file') logger.warn('state.source is file but no configuration file path was given: the seed will not be reloaded');
      replication?.start();
      idleRelease.start();
      services.health.ready = true;
      if (egressProxy !== null) {
        const bound = address(egressProxy.listener)!;
        logger.info({ egress_proxy: `${bound.address}:${bound.port}`, hosts: config.egress_proxy!.hosts.length, unknown_hosts: config.egress_proxy!.unknown_hosts }, 'egress proxy listening');
      }
      return { main: address(main)!, admin: address(admin ?? undefined), relay: address(relay?.listener), egressProxy: address(egressProxy?.listener) };
    },
    async close() {
      // Readiness fails first, so load balancers stop sending while requests drain.
      services.health.ready = false;
      await Promise.all([main.close(config.server.drain_timeout), admin?.close(1000), relay?.close(config.server.drain_timeout), egressProxy?.close(config.server.drain_timeout)]);
      idleRelease.stop();
      await retention.stop();
      await fileSource?.stop();
      await replication?.stop();
      await services.logs.close();
      await services.forwarder.close();
      metrics.close();
      await store.close();
    },
  };
}

/**
 * The master key, checked against the store (DESIGN §13): a store keeps the check value of
 * the key its data keys are wrapped under, and a start with another key stops here rather
 * than answering 500 to every request. A store that holds wrapped keys never gets a fresh
 * development key generated beside it.
 */
async function openMasterKey(config: Config, logger: Logger, env: NodeJS.ProcessEnv, store: Store): Promise<MasterKey> {
  const recorded = await store.meta.get(MASTER_KEY_CHECK);
  const sample = await store.configurations.sampleWrappedKey();
  const master = loadMasterKey({
    env,
    file: config.keys.master_key_file,
    generate: recorded === undefined && sample === undefined,
    onGenerated: (path) =>
      logger.warn({ path }, 'no master key was configured: generated a development key file; set SVC_MASTER_KEY or keys.master_key_file in production'),
  });
  const check = master.checkValue();
  if (recorded !== undefined) {
    if (recorded.length !== check.length || !timingSafeEqual(Buffer.from(recorded), Buffer.from(check))) throw new MasterKeyMismatchError(store.path);
  } else {
    // A store from before check values: the key must open what the store holds.
    if (sample !== undefined) {
      try {
        unwrapDataKey(master, sample.configurationId, sample.version, sample.wrapped).fill(0);
      } catch {
        throw new MasterKeyMismatchError(store.path);
      }
    }
    await store.meta.set(MASTER_KEY_CHECK, check);
  }
  if (master.insecurePermissions) logger.warn({ path: config.keys.master_key_file }, 'the master key file is readable by other users; chmod 600 it');
  logger.info({ fingerprint: master.fingerprint() }, 'master key loaded');
  return master;
}

const MASTER_KEY_CHECK = 'master_key_check';

/**
 * With `state.source: file` the file is followed: what it no longer declares is removed.
 * `passwords`: decisions made beforehand; without them the scrypt work is done here.
 */
function seedStore(store: Store, master: MasterKey, config: Config, passwords?: PasswordPlan) {
  return applySeed(store, config.seed, seedDeps(master), { prune: config.state.source === 'file', ...(passwords === undefined ? {} : { passwords }) });
}

/** What applying a seed needs from outside the store (also used by tests that seed a running service). */
export function seedDeps(master: MasterKey): SeedDeps {
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
