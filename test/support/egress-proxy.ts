/**
 * Test support for the egress proxy: an HTTPS vendor stand-in with its own CA (given to
 * the proxy as `trust_file`), and the service started with an `egress_proxy` block.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { call, startApp, type Running, type StartOptions } from './app.ts';

/** The vendor stand-in's CA: what `trust_file` names. */
export { TEST_CA_FILE as VENDOR_CA_FILE } from './test-pki.ts';
import { SERVER_CERT, SERVER_KEY, TEST_CA_FILE as VENDOR_CA_FILE } from './test-pki.ts';

export interface VendorRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface Vendor {
  readonly port: number;
  readonly received: VendorRequest[];
  /** TLS connections accepted: a refused request must not have made one. */
  connections: number;
}

export type VendorAnswer = (request: VendorRequest, res: ServerResponse) => void;

/** Answers 200 with the JSON `{ method, url, body }` of what it got, by default. */
/**
 * The default vendor answers, as a payment API does, with what it made of the request and
 * not the request itself: the SHA-256 of the body it received, so a client can tell the
 * vendor got the plaintext without the answer repeating it (an answer that repeated it
 * would be refused by the echo guard).
 */
const ECHO: VendorAnswer = (request, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ method: request.method, path: request.url.split('?')[0], sha256: sha256(request.body) }));
};

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** An HTTPS server on 127.0.0.1 with a certificate for `localhost` and `127.0.0.1`, signed by VENDOR_CA_FILE. */
export async function startVendor(t: TestContext, answer: VendorAnswer = ECHO, certificate?: { cert: string; key: string }): Promise<Vendor> {
  const received: VendorRequest[] = [];
  const server = createHttpsServer(
    {
      cert: certificate?.cert ?? SERVER_CERT,
      key: certificate?.key ?? SERVER_KEY,
    },
    (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const request = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() };
        received.push(request);
        answer(request, res);
      });
    },
  );
  const vendor: Vendor = { port: 0, received, connections: 0 };
  server.on('secureConnection', () => vendor.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  (vendor as { port: number }).port = (server.address() as AddressInfo).port;
  return vendor;
}

export interface ProxyRunning extends Running {
  /** `http://127.0.0.1:<port>`: what HTTP_PROXY / HTTPS_PROXY would say. */
  readonly proxyUrl: string;
  readonly proxyPort: number;
  /** The installation CA the application trusts (PEM). */
  readonly caPem: string;
  readonly caDir: string;
}

/** A fresh directory for the CA files, removed when the test ends. */
export function caDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-egress-ca-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * The service with `egress_proxy: { <proxyYaml> }` (indented two spaces, without the
 * `listen`, `ca` and `trust_file` lines, which are written here).
 */
export async function startProxy(t: TestContext, proxyYaml: string, options: StartOptions & { dir?: string; listen?: string } = {}): Promise<ProxyRunning> {
  const dir = options.dir ?? caDir(t);
  const yaml = `
egress_proxy:
  listen: ${options.listen ?? '127.0.0.1:0'}
  ca: { cert_file: ${join(dir, 'ca', 'egress-ca.pem')}, key_file: ${join(dir, 'ca', 'egress-ca.key')} }
  trust_file: ${VENDOR_CA_FILE}
${proxyYaml}`;
  const running = await startApp(t, yaml, undefined, options);
  const address = running.app.egressProxy!.listener.server.address() as AddressInfo;
  return {
    ...running,
    proxyUrl: `http://127.0.0.1:${address.port}`,
    proxyPort: address.port,
    caPem: readFileSync(join(dir, 'ca', 'egress-ca.pem'), 'utf8'),
    caDir: join(dir, 'ca'),
  };
}

/** Tokens for `values` under the `payments` configuration, through /proxy (JSON paths `a.b`). */
export async function tokensFor(url: string, values: Record<string, Record<string, string>>, fields: string): Promise<any> {
  const res = await call(url, '/proxy/payments', { body: JSON.stringify(values), headers: { 'x-svc-fields': fields } });
  if (res.status !== 200) throw new Error(`tokenising failed: ${res.status} ${res.text}`);
  return res.json;
}
