/**
 * Test support: starts the real service on port 0 with an in-memory store and a seed,
 * and stops it when the test ends.
 */
import { randomBytes } from 'node:crypto';
import type { TestContext } from 'node:test';
import { Writable } from 'node:stream';
import { createApp, seedDeps, type App, type AppOptions } from '../../src/app.ts';
import { loadConfig } from '../../src/config/load.ts';
import { applySeed, type SeedResult } from '../../src/store/seed.ts';
import { createLogger } from '../../src/telemetry/logger.ts';
import { assertDocumentedResponse } from './openapi-validator.ts';

const key = (name: string) => `svc_${name.padEnd(40, '0')}`;

export const KEYS = {
  owner: key('Owner'),
  dev: key('Dev'),
  viewer: key('Viewer'),
  outsider: key('Outsider'),
  scoped: key('Scoped'),
  encryptOnly: key('EncryptOnly'),
  grace: key('Grace'),
} as const;

export const SEED = `
seed:
  users:
    - { name: Ada Admin, email: ada@example.com, password: "correct horse", roles: [owner] }
    - { name: Dev Eloper, email: dev@example.com, roles: [developer] }
    - { name: Vi Ewer, email: viewer@example.com, roles: [viewer] }
    - { name: Out Sider, email: out@example.com, roles: [developer] }
    - { name: Grace Group, email: grace@example.com, roles: [developer] }
  api_keys:
    - { name: owner, user: ada@example.com, key: ${KEYS.owner} }
    - { name: dev, user: dev@example.com, key: ${KEYS.dev} }
    - { name: viewer, user: viewer@example.com, key: ${KEYS.viewer} }
    - { name: outsider, user: out@example.com, key: ${KEYS.outsider} }
    - { name: scoped, user: ada@example.com, key: ${KEYS.scoped}, configurations: [other] }
    - { name: encrypt-only, user: ada@example.com, key: ${KEYS.encryptOnly}, permissions: [data.encrypt] }
    - { name: grace, user: grace@example.com, key: ${KEYS.grace} }
  configurations:
    - { name: payments, proxy_slug: payments, fields: [card.number] }
    - { name: other, proxy_slug: other-config }
    - { name: lookup, proxy_slug: lookup, deterministic: true }
    - name: workspace
      type: provider
      provider: google
      groups: [{ id: g-nurses, name: Nurses, members: [grace@example.com] }]
  classifications:
    - { name: PHI, bg_color: "#aa0000", fg_color: "#ffffff", users: [ada@example.com] }
    - { name: PCI, bg_color: "#0000aa", fg_color: "#ffffff", roles: [owner] }
    # Lists nobody, so it admits nobody (DESIGN §13: no member, no access).
    - { name: Nobody, bg_color: "#00aa00", fg_color: "#000000" }
    - name: Ward
      bg_color: "#00aaaa"
      fg_color: "#000000"
      providers: [{ configuration: workspace, gws_groups: [{ id: g-nurses }] }]
`;

export interface Running {
  readonly app: App;
  readonly url: string;
  readonly port: number;
  /** Everything the service logged, for secrecy checks. */
  readonly logs: () => string;
  /** The admin listener's base URL, when started with `admin: true`. */
  readonly adminUrl: string | null;
}

/** `publicUrl` sets `server.public_url` (extraYaml cannot: the `server:` block is written here). */
export interface StartOptions extends Pick<AppOptions, 'resolve'> {
  readonly publicUrl?: string;
  /** Start the admin listener (metrics, health) on a free port too. */
  readonly admin?: boolean;
  /** More settings of the `keys:` block (extraYaml cannot: it is written here), e.g. `destroy_after: 0s`. */
  readonly keys?: string;
}

export async function startApp(t: TestContext, extraYaml = '', seed = SEED, { publicUrl, admin, keys, ...options }: StartOptions = {}): Promise<Running> {
  const text = `
server: { listen: 127.0.0.1:0, admin_listen: "${admin === true ? '127.0.0.1:0' : 'off'}", body_limit: 1mb${publicUrl === undefined ? '' : `, public_url: "${publicUrl}"`} }
store: { path: ":memory:" }
keys: { master_key_file: /nonexistent/never-used.key${keys === undefined ? '' : `, ${keys}`} }
logging: { level: debug }
${extraYaml}
${seed}`;
  const config = loadConfig({ text, env: {} });
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const env = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };
  const app = await createApp(config, { logger: createLogger('debug', sink), env, ...options });
  const { main, admin: adminAddress } = await app.listen();
  t.after(() => app.close());
  return {
    app,
    url: `http://127.0.0.1:${main.port}`,
    port: main.port,
    logs: () => chunks.join(''),
    adminUrl: adminAddress === null ? null : `http://127.0.0.1:${adminAddress.port}`,
  };
}

export interface CallOptions {
  key?: string | null;
  headers?: Record<string, string>;
  body?: string | Buffer;
  method?: string;
  contentType?: string | null;
}

export async function call(base: string, path: string, options: CallOptions = {}): Promise<{ status: number; headers: Headers; text: string; json: any }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key !== null) headers['x-svc-authorization'] = options.key ?? KEYS.owner;
  if (options.body !== undefined && options.contentType !== null) headers['content-type'] = options.contentType ?? 'application/json';
  const res = await fetch(base + path, { method: options.method ?? 'POST', headers, body: options.body });
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON; tests that care look at `text`
  }
  // Every response to a documented path must be what the OpenAPI document says (issue 3).
  assertDocumentedResponse(options.method ?? 'POST', new URL(base + path).pathname, res.status, res.headers.get('content-type'), json, res.headers);
  return { status: res.status, headers: res.headers, text, json };
}

/**
 * Applies `seed` (YAML with a `seed:` section, as SEED) to the running service's store, as
 * a reload of the config file does: the same applySeed, with the real password hashing and
 * key wrapping.
 */
export async function reseed(running: Running, seed: string): Promise<SeedResult> {
  const config = loadConfig({ text: `store: { path: ":memory:" }\n${seed}`, env: {} });
  return applySeed(running.app.services.store, config.seed, seedDeps(running.app.services.master));
}
