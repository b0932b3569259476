/**
 * Test support: which modules the service loads, from a child process that starts it and
 * proxies one request (loaded-modules-child.ts).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const CHILD = new URL('./loaded-modules-child.ts', import.meta.url).pathname;
const KEY = `svc_${'LoadedModules'.padEnd(40, '0')}`;

/** A data-plane service: both listeners, one configuration with the child's destination, a key for it. */
export const LOADED_BASE = `server: { listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0 }
store: { path: ":memory:" }
seed:
  users: [{ name: Ada, email: ada@example.com, roles: [owner] }]
  api_keys: [{ name: loaded, user: ada@example.com, key: ${KEY} }]
  configurations: [{ name: payments, proxy_slug: payments, destinations: ["\${DESTINATION}"] }]
`;

export interface LoadedModules {
  /** How many resolutions the hook saw. */
  readonly modules: number;
  /** The status of the one `/proxy/payments` request. */
  readonly proxied: number;
  readonly x509: boolean;
  readonly undiciIndex: boolean;
  readonly nodeUndici: boolean;
  readonly promClientIndex: boolean;
  readonly openTelemetry: boolean;
  readonly jose: boolean;
  readonly relay: boolean;
  readonly managementApi: boolean;
}

export async function loadedModules(yaml: string): Promise<LoadedModules> {
  const { stdout } = await promisify(execFile)(process.execPath, [CHILD, yaml, KEY], { timeout: 60_000 });
  const report = JSON.parse(stdout) as LoadedModules;
  if (report.modules < 50) throw new Error(`the hook saw only ${report.modules} resolutions: it did not see the service load`);
  if (report.proxied !== 200) throw new Error(`the proxied request answered ${report.proxied}`);
  return report;
}
