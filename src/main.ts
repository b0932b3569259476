#!/usr/bin/env node
/**
 * The command line: `svc-sidecar serve [--config path]`.
 */
import { parseArgs } from 'node:util';
import { createApp } from './app.ts';
import { ConfigError, DEFAULT_CONFIG_PATH, loadConfig } from './config/load.ts';
import { createLogger } from './telemetry/logger.ts';

const USAGE = `usage: svc-sidecar <command> [options]

commands:
  serve     run the sidecar

options:
  -c, --config <path>   configuration file (default ${DEFAULT_CONFIG_PATH})
  -h, --help            show this help
`;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { config: { type: 'string', short: 'c' }, help: { type: 'boolean', short: 'h' } },
  });
  const command = positionals[0] ?? 'serve';
  if (values.help === true) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (command !== 'serve') {
    process.stderr.write(`unknown command "${command}"\n\n${USAGE}`);
    return 2;
  }
  const configPath = values.config ?? DEFAULT_CONFIG_PATH;
  let config;
  try {
    config = loadConfig({ path: configPath, env: process.env });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`svc-sidecar: ${configPath} is invalid:\n${err.problems.map((p) => `  - ${p}`).join('\n')}\n`);
      return 1;
    }
    throw err;
  }
  const logger = createLogger(config.logging.level);
  const app = createApp(config, { logger });
  for (const created of app.createdApiKeys) {
    // Shown once: only the hash is stored.
    process.stderr.write(`created API key "${created.name}": ${created.key}\n(store it now; it will not be shown again)\n`);
  }
  const { main: address, admin } = await app.listen();
  logger.info({ listen: `${address.address}:${address.port}`, admin: admin === null ? 'off' : `${admin.address}:${admin.port}` }, 'svc-sidecar listening');

  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      logger.info({ signal }, 'shutting down');
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  await app.close();
  logger.info('stopped');
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`svc-sidecar: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
