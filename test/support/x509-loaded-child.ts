/**
 * Run as a child process (test/crypto/certificates.test.ts): records every module the
 * service loads, starts it with the configuration in argv[2] (YAML), and prints one JSON
 * line saying whether `@peculiar/x509` was loaded by the time it listened.
 */
import { randomBytes } from 'node:crypto';
import { registerHooks } from 'node:module';

const loaded: string[] = [];
registerHooks({
  resolve(specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context);
    loaded.push(resolved.url);
    return resolved;
  },
});

const { createApp } = await import('../../src/app.ts');
const { loadConfig } = await import('../../src/config/load.ts');
const { createLogger } = await import('../../src/telemetry/logger.ts');

const app = await createApp(loadConfig({ text: process.argv[2]!, env: {} }), { logger: createLogger('silent'), env: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
await app.listen();
const x509 = loaded.some((url) => url.includes('/node_modules/@peculiar/x509/'));
await app.close();
process.stdout.write(`${JSON.stringify({ x509, modules: loaded.length })}\n`);
