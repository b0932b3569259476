/**
 * The command line: `svc-sidecar serve [--config path]` and
 * `svc-sidecar init [--config path] [--name N] [--email E]` and
 * `svc-sidecar keys rotate|rewrap|destroy [--config path] --configuration C ...` (src/cli/keys.ts).
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { createApp, type App } from '../app.ts';
import { apiKeyPrefix, generateApiKey, hashApiKey } from '../auth/api-keys.ts';
import { hashPassword } from '../auth/passwords.ts';
import { keys, KEYS_OPTIONS, KEYS_USAGE } from './keys.ts';
import { ConfigError, DEFAULT_CONFIG_PATH, loadConfig, type Config } from '../config/load.ts';
import { isUniqueViolation } from '../store/sql.ts';
import { createLogger } from '../telemetry/logger.ts';

const DEFAULT_OWNER_NAME = 'Owner';
const DEFAULT_OWNER_EMAIL = 'owner@svc-sidecar.local';

const USAGE = `usage: svc-sidecar <command> [options]

commands:
  serve     run the sidecar (the default)
  init      create an owner user and an API key in the store, print them once, and exit
${KEYS_USAGE}
options:
  -c, --config <path>   configuration file (default ${DEFAULT_CONFIG_PATH})
      --name <name>     init: the owner's name (default ${DEFAULT_OWNER_NAME})
      --email <email>   init: the owner's email (default ${DEFAULT_OWNER_EMAIL})
  -h, --help            show this help
`;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      config: { type: 'string', short: 'c' },
      name: { type: 'string' },
      email: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
      ...KEYS_OPTIONS,
    },
  });
  const command = positionals[0] ?? 'serve';
  if (values.help === true) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (command !== 'serve' && command !== 'init' && command !== 'keys') {
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
  if (command === 'keys') return keys(config, positionals.slice(1), values);
  if (command === 'init') return init(config, values.name ?? DEFAULT_OWNER_NAME, values.email ?? DEFAULT_OWNER_EMAIL);
  return serve(config, configPath);
}

async function serve(config: Config, configPath: string): Promise<number> {
  const logger = createLogger(config.logging.level);
  const app = createApp(config, { logger, configPath });
  for (const created of app.createdApiKeys) {
    // Shown once: only the hash is stored.
    process.stderr.write(`created API key "${created.name}": ${created.key}\n(store it now; it will not be shown again)\n`);
  }
  let listening;
  try {
    listening = await app.listen();
  } catch (err) {
    // All listeners or none: nothing may keep running half-started.
    await app.close();
    throw err;
  }
  const { main: address, admin } = listening;
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

/**
 * Creates the first owner and an API key for them in the configured store (seeded only
 * when this creates the store) and prints both to stdout, once: only hashes are stored. Logs go to stderr so
 * stdout holds nothing but the secrets. Never listens.
 */
async function init(config: Config, name: string, email: string): Promise<number> {
  if (config.state.source === 'control-plane') {
    process.stderr.write('svc-sidecar init: users come from the control plane in this configuration; run init against the control plane instead.\n');
    return 1;
  }
  if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email) || name.trim() === '') {
    process.stderr.write('svc-sidecar init: --email must be an email address and --name must not be empty.\n');
    return 1;
  }
  // A live store is not seeded again: that would undo what the API changed (operations.md).
  const app = createApp(config, { logger: createLogger(config.logging.level, process.stderr), seed: 'new-store' });
  try {
    for (const created of app.createdApiKeys) process.stdout.write(`seed api key "${created.name}": ${created.key}\n`);
    const created = createOwner(app, name.trim(), email);
    if (typeof created === 'string') {
      process.stderr.write(`svc-sidecar init: ${created}; nothing was created.\n`);
      return 1;
    }
    process.stdout.write(`email: ${email}\npassword: ${created.password}\napi key: ${created.key}\n`);
    process.stderr.write('Store the password and the API key now: they are not stored in a readable form and will not be shown again.\n');
    return 0;
  } finally {
    // close() waits for helpers (the log writer's thread) that do not hold the event loop
    // open, so that a server is never kept alive by them; a CLI command has nothing else
    // holding it, and the process would exit mid-close with the activity entry unwritten.
    const keepAlive = setInterval(() => {}, 60_000);
    try {
      await app.close();
    } finally {
      clearInterval(keepAlive);
    }
  }
}

/** The reason when the email (or the key's name) is taken: init never changes an existing user. */
function createOwner(app: App, name: string, email: string): { password: string; key: string } | string {
  const { store, logs } = app.services;
  if (store.users.findByEmail(email) !== undefined) return `a user with the email ${email} already exists`;
  const owner = store.roles.findByName('owner');
  if (owner === undefined) throw new Error('the built-in role "owner" is missing from the store');
  // 144 random bits, as 24 URL-safe characters.
  const password = randomBytes(18).toString('base64url');
  const key = generateApiKey();
  const keyName = `init ${email}`;
  let user;
  try {
    user = store.transaction(() => {
      const created = store.users.create({ name, email, passwordHash: hashPassword(password), roleIds: [owner.id] });
      store.apiKeys.create({ name: keyName, prefix: apiKeyPrefix(key), keyHash: hashApiKey(key), userId: created.id });
      return created;
    });
  } catch (err) {
    if (isUniqueViolation(err)) return `a user with the email ${email} or an API key named "${keyName}" already exists`;
    throw err;
  }
  logs.activity({
    action: 'user.created',
    description: `${user.name} (${user.email}) created as owner, with the API key "${keyName}", by svc-sidecar init`,
    ip: '',
    userId: user.id,
    causerEmail: user.email,
    requestId: null,
    createdAt: new Date().toISOString(),
  });
  return { password, key };
}

/** Runs the command line and sets the exit code. */
export function run(argv: string[]): Promise<void> {
  return main(argv).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`svc-sidecar: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
