/**
 * Test support for replication: a control plane and replicas, each a real service started
 * in-process (createApp on port 0) on its own SQLite file, all with one master key.
 * Replicas present a replicas' key (`sync.read`, `sync.write` only), as docs/replication.md
 * says to.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { TestContext } from 'node:test';
import { createApp, type App } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { MasterKey } from '../../src/crypto/master-key.ts';
import { SnapshotMac } from '../../src/sync/snapshot-mac.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { call, KEYS, SEED } from '../support/app.ts';

/** `SVC_TEST_LOG=warn` shows what the services log (poll failures, rejections). */
const LOG_LEVEL = (process.env['SVC_TEST_LOG'] ?? 'silent') as 'silent';
export const MASTER_KEY = randomBytes(32).toString('base64');
const ENV = { SVC_MASTER_KEY: MASTER_KEY };
/** The MAC key every node of these tests derives. */
export const MAC = new SnapshotMac(new MasterKey(Buffer.from(MASTER_KEY, 'base64')));

export const SNAPSHOT = '/api/v3/sync/snapshot';
export const LOGS = '/api/v3/sync/logs';
export const json = (value: unknown) => JSON.stringify(value);

/** The replicas' key: sync.read and sync.write, nothing else; and one limited to `payments` (and the workspace groups). */
export const FLEET_KEY = `svc_${'Fleet'.padEnd(40, '0')}`;
export const SCOPED_FLEET_KEY = `svc_${'ScopedFleet'.padEnd(40, '0')}`;

/**
 * The common seed plus the replicas' keys, on a user of their own without a password (an
 * administrator, so the role grants sync.*): disabling a person does not stop replication.
 */
export const SYNC_SEED = SEED.replace(
  '  users:\n',
  `  users:
    - { name: Replicas, email: replicas@example.com, roles: [administrator] }
`,
).replace(
  '  api_keys:\n',
  `  api_keys:
    - { name: fleet, user: replicas@example.com, key: ${FLEET_KEY}, permissions: [sync.read, sync.write] }
    - { name: scoped-fleet, user: replicas@example.com, key: ${SCOPED_FLEET_KEY}, permissions: [sync.read, sync.write], configurations: [payments, workspace] }
`,
);

export interface Node {
  readonly app: App;
  /** What the service logged (at `info` and above), when started with `captureLogs`. */
  readonly logs: () => string;
  readonly url: string;
  readonly port: number;
  readonly storePath: string;
  close(): Promise<void>;
}

/** What each test started, closed (newest first) before its directory is removed. */
const closers = new WeakMap<TestContext, Array<() => Promise<void>>>();

export function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-sync-'));
  closers.set(t, []);
  t.after(async () => {
    for (const close of (closers.get(t) ?? []).reverse()) await close();
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/** Runs `close` when the test ends, before its directory is removed. */
export function onClose(t: TestContext, close: () => Promise<void>): void {
  const list = closers.get(t);
  if (list === undefined) throw new Error('call tempDir(t) first');
  list.push(close);
}

/** A service on its own store file; `port` 0 picks a free one. Closed when the test ends. */
export async function startNode(t: TestContext, options: { storePath: string; yaml: string; port?: number; captureLogs?: boolean }): Promise<Node> {
  const config = loadConfig({
    text: `
server: { listen: "127.0.0.1:${options.port ?? 0}", admin_listen: "off" }
store: { path: ${JSON.stringify(options.storePath)} }
keys: { master_key_file: /nonexistent/never-used.key }
logs: { flush_interval: 50ms }
logging: { level: silent }
${options.yaml}`,
    env: {},
  });
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const logger = options.captureLogs === true ? createLogger('info', sink) : createLogger(LOG_LEVEL);
  const app = await createApp(config, { logger, env: ENV });
  const { main } = await app.listen();
  let closed: Promise<void> | null = null;
  const close = () => (closed ??= app.close());
  onClose(t, close);
  return { app, logs: () => chunks.join(''), url: `http://127.0.0.1:${main.port}`, port: main.port, storePath: options.storePath, close };
}

export function startControlPlane(t: TestContext, storePath: string, port?: number, yaml = ''): Promise<Node> {
  return startNode(t, { storePath, yaml: `${yaml}\n${SYNC_SEED}`, port });
}

export interface ReplicaOptions {
  readonly pollMs?: number;
  readonly shipMs?: number;
  readonly key?: string;
  readonly captureLogs?: boolean;
}

/** `controlPlaneUrl`: one URL, or a list of instances to fail over between. */
export function replicaYaml(controlPlaneUrl: string | readonly string[], name: string, options: ReplicaOptions = {}): string {
  return `
state:
  source: control-plane
  control_plane: { url: ${JSON.stringify(controlPlaneUrl)}, api_key: "${options.key ?? FLEET_KEY}", poll_interval: ${options.pollMs ?? 200}ms, ship_interval: ${options.shipMs ?? 100}ms, replica_name: ${name} }
`;
}

export function startReplica(t: TestContext, storePath: string, controlPlaneUrl: string | readonly string[], name: string, options: ReplicaOptions = {}): Promise<Node> {
  return startNode(t, { storePath, yaml: replicaYaml(controlPlaneUrl, name, options), captureLogs: options.captureLogs });
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000, stepMs = 5): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, stepMs));
  }
}

export async function ready(node: Node): Promise<boolean> {
  const res = await fetch(`${node.url}/readyz`);
  await res.arrayBuffer();
  return res.status === 200;
}

export const waitReady = (node: Node) => waitFor(`${node.url} to be ready`, async () => ((await ready(node)) ? true : undefined));

export async function counter(node: Node, name: 'reloadFailures'): Promise<number> {
  const metric = await node.app.services.metrics[name].get();
  return metric.values[0]?.value ?? 0;
}

/** `svc_sync_snapshots_refused_total{reason}` of a node. */
export async function refused(node: Node, reason: string): Promise<number> {
  const metric = node.app.services.metrics.registry.getSingleMetric('svc_sync_snapshots_refused_total');
  const values = (await metric?.get())?.values ?? [];
  return values.find((v) => v.labels['reason'] === reason)?.value ?? 0;
}

export async function gauge(node: Node): Promise<number> {
  return (await node.app.services.metrics.stateVersion.get()).values[0]?.value ?? 0;
}

export const get = (node: Node, path: string, key: string = KEYS.owner) => call(node.url, path, { method: 'GET', key });
