/**
 * The command line: `svc-sidecar serve`, `svc-sidecar init`, `svc-sidecar keys
 * rotate|rewrap|destroy` (src/cli/keys.ts) and `svc-sidecar store copy` (src/cli/store.ts).
 * Each command declares its options once; its `--help` and its parsing are made from that
 * table (src/cli/args.ts).
 *
 * Exit codes: 0 done, 1 refused or failed (an invalid configuration included), 2 the
 * command line was wrong (one line on stderr, pointing at the command's --help).
 */
import { randomBytes } from 'node:crypto';
import type { App } from '../app.ts';
import { apiKeyPrefix, generateApiKey, hashApiKey } from '../auth/api-keys.ts';
import { hashPassword } from '../auth/passwords.ts';
import { optionsHelp, parseOptions, UsageError, type OptionSpec, type OptionTable, type OptionValues } from './args.ts';
import { KEYS_COMMANDS } from './keys-commands.ts';
import { egressCa } from './egress-ca.ts';
import { STORE_COMMANDS } from './store.ts';
import { ConfigError, DEFAULT_CONFIG_PATH, loadConfig, type Config } from '../config/load.ts';
import { nearestName } from '../util/nearest.ts';
import { isUniqueViolation } from '../store/sql.ts';
import { openConfiguredStore } from '../store/db.ts';
import { passwordChecks, type PasswordPlan } from '../store/seed.ts';
import { decidePasswords, seedsAtStart } from '../store/seed-plan.ts';
import { createLogger } from '../telemetry/logger.ts';
import type { Logger } from 'pino';

const DEFAULT_OWNER_NAME = 'Owner';
const DEFAULT_OWNER_EMAIL = 'owner@svc-sidecar.local';

const CONFIG_OPTION: OptionSpec = { type: 'string', short: 'c', value: '<path>', description: `configuration file (default ${DEFAULT_CONFIG_PATH})` };
const HELP_OPTION: OptionSpec = { type: 'boolean', short: 'h', description: 'show this help' };

interface CommandBase {
  /** As typed after `svc-sidecar`: `serve`, `keys rotate`. */
  readonly name: string;
  readonly usage: string;
  readonly summary: string;
  readonly about: string;
  readonly options: OptionTable;
}

/** A command on the store and keys the configuration file names. */
interface ConfiguredCommand extends CommandBase {
  run(config: Config, configPath: string, values: OptionValues, positionals: string[]): Promise<number>;
}

/** A command whose options name all it works on: no configuration file is read. */
interface StandaloneCommand extends CommandBase {
  readonly standalone: true;
  run(values: OptionValues): Promise<number>;
}

type Command = ConfiguredCommand | StandaloneCommand;

const COMMANDS: readonly Command[] = [
  {
    name: 'serve',
    usage: 'serve [--config <path>]',
    summary: 'run the sidecar (the default command)',
    about:
      'Runs the sidecar until SIGTERM or SIGINT: the main listener, the admin listener and, when configured, the relay. ' +
      'The configuration is checked first and every problem is listed (exit 1). API keys the seed generates are printed once, on stderr.',
    options: { config: CONFIG_OPTION, help: HELP_OPTION },
    run: (config, configPath) => serve(config, configPath),
  },
  {
    name: 'init',
    usage: 'init [--config <path>] [--name <name>] [--email <email>]',
    summary: 'create an owner user and an API key in the store, print them once, and exit',
    about:
      'Creates an owner user and an API key for them in the configured store (seeded as at start) and prints both once on stdout; ' +
      'only hashes are stored. Never listens. Refused when a user with the email exists, and on a replica (state.source: control-plane).',
    options: {
      config: CONFIG_OPTION,
      name: { type: 'string', value: '<name>', description: `the owner's name (default ${DEFAULT_OWNER_NAME})` },
      email: { type: 'string', value: '<email>', description: `the owner's email (default ${DEFAULT_OWNER_EMAIL})` },
      help: HELP_OPTION,
    },
    run: (config, _path, values) => init(config, stringOf(values['name']) ?? DEFAULT_OWNER_NAME, stringOf(values['email']) ?? DEFAULT_OWNER_EMAIL),
  },
  {
    name: 'egress-ca',
    usage: 'egress-ca [--config <path>] [--rotate]',
    summary: 'print the egress proxy CA certificate (PEM) for applications to trust; --rotate replaces it',
    about:
      'Prints the certificate of the egress proxy CA (egress_proxy.ca.cert_file) on stdout, and nothing else, so it can go straight into a file or a secret. ' +
      'When neither CA file exists they are created first, as the first start would (key mode 0600). With --rotate a new CA replaces the old one: ' +
      'give the new certificate to the applications and restart the service, which signs with the CA it started with. Never listens.',
    options: {
      config: CONFIG_OPTION,
      rotate: { type: 'boolean', description: 'replace the CA with a new key and certificate, and print the new certificate' },
      help: HELP_OPTION,
    },
    run: (config, _path, values) => egressCa(config, values['rotate'] === true),
  },
  ...Object.entries(KEYS_COMMANDS).map(
    ([sub, spec]): Command => ({
      name: `keys ${sub}`,
      usage: spec.usage,
      summary: spec.summary,
      about: `${spec.about} Works on the store and master key the configuration names; a running service on the same store follows at its next request.`,
      options: { config: CONFIG_OPTION, ...spec.options, help: HELP_OPTION },
      // The implementation loads the application: only when a keys command runs.
      run: async (config, _path, values, positionals) =>
        (await import('./keys.ts')).keys(config, [sub, ...positionals], {
          configuration: stringOf(values['configuration']),
          fields: stringOf(values['fields']),
          version: stringOf(values['version']),
          confirm: stringOf(values['confirm']),
          force: values['force'] === true,
          ndjson: values['ndjson'] === true,
        }),
    }),
  ),
  ...Object.entries(STORE_COMMANDS).map(
    ([sub, spec]): StandaloneCommand => ({
      name: `store ${sub}`,
      usage: spec.usage,
      summary: spec.summary,
      about: spec.about,
      options: { ...spec.options, help: HELP_OPTION },
      standalone: true,
      run: (values) => spec.run(values),
    }),
  ),
];

const KEYS_SUBCOMMANDS = Object.keys(KEYS_COMMANDS);
const STORE_SUBCOMMANDS = Object.keys(STORE_COMMANDS);

const HELP = `usage: svc-sidecar <command> [options]

commands:
${COMMANDS.map((command) => `  ${command.usage}\n            ${command.summary}`).join('\n')}

Every command but store copy takes --config <path> (default ${DEFAULT_CONFIG_PATH}), and each has
its own help: svc-sidecar <command> --help (svc-sidecar keys rotate --help).
`;

const KEYS_HELP = `usage: svc-sidecar keys <${KEYS_SUBCOMMANDS.join('|')}> [options]

Key versions of an encryption configuration, without going through HTTP:
${COMMANDS.filter((command) => command.name.startsWith('keys ')).map((command) => `  ${command.usage}\n            ${command.summary}`).join('\n')}

Each has its own help: svc-sidecar keys rotate --help.
`;

const STORE_HELP = `usage: svc-sidecar store <${STORE_SUBCOMMANDS.join('|')}> [options]

The store itself:
${COMMANDS.filter((command) => command.name.startsWith('store ')).map((command) => `  ${command.usage}\n            ${command.summary}`).join('\n')}

Each has its own help: svc-sidecar store copy --help.
`;

/** Commands in groups (`keys rotate`): the group, its subcommands and its help. */
const GROUPS: ReadonlyMap<string, { readonly subcommands: readonly string[]; readonly help: string }> = new Map([
  ['keys', { subcommands: KEYS_SUBCOMMANDS, help: KEYS_HELP }],
  ['store', { subcommands: STORE_SUBCOMMANDS, help: STORE_HELP }],
]);

function commandHelp(command: Command): string {
  return `usage: svc-sidecar ${command.usage}\n\n${wrap(command.about)}\n\noptions:\n${optionsHelp(command.options)}\n`;
}

async function main(argv: string[]): Promise<number> {
  const [first, second] = argv;
  // No command, or options first: serve (`svc-sidecar --config x`), or the overall help.
  if (first === undefined || first.startsWith('-')) {
    if (first === '-h' || first === '--help') return help(HELP);
    return runCommand(commandNamed('serve'), argv);
  }
  const group = GROUPS.get(first);
  if (group !== undefined) {
    const { subcommands } = group;
    if (second === undefined || second.startsWith('-')) {
      if (argv.includes('-h') || argv.includes('--help')) return help(group.help);
      throw new UsageError(first, `expected one of ${subcommands.join(', ')}`);
    }
    const command = COMMANDS.find((candidate) => candidate.name === `${first} ${second}`);
    if (command === undefined) throw new UsageError(first, `unknown command "${first} ${second}"${didYouMean(second, subcommands)}: expected one of ${subcommands.join(', ')}`);
    return runCommand(command, argv.slice(2));
  }
  const command = COMMANDS.find((candidate) => candidate.name === first);
  if (command === undefined) {
    const names = ['serve', 'init', 'egress-ca', 'keys', 'store'];
    throw new UsageError('', `unknown command "${first}"${didYouMean(first, names)}: expected one of ${names.join(', ')}`);
  }
  return runCommand(command, argv.slice(1));
}

async function runCommand(command: Command, args: string[]): Promise<number> {
  const { values, positionals, help: wantsHelp } = parseOptions(command.name, command.options, args);
  if (wantsHelp) return help(commandHelp(command));
  if (!command.name.startsWith('keys ') && positionals.length > 0) {
    const extra = positionals[0]!;
    // `svc-sidecar --config x init`: the command was taken for an argument of serve.
    const hint = command.name === 'serve' && ['init', 'keys'].includes(extra) ? ` (the command comes first: svc-sidecar ${extra} --config <path>)` : '';
    throw new UsageError(command.name, `unexpected argument "${extra}"${hint}`);
  }
  if ('standalone' in command) return command.run(values);
  const configPath = stringOf(values['config']) ?? DEFAULT_CONFIG_PATH;
  let config;
  try {
    config = loadConfig({ path: configPath, env: process.env });
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(configPath, err);
    throw err;
  }
  try {
    return await command.run(config, configPath, values, positionals);
  } catch (err) {
    // createApp checks what only the store can tell (the names routes refer to).
    if (err instanceof ConfigError) return reportConfigError(configPath, err);
    throw err;
  }
}

function reportConfigError(configPath: string, err: ConfigError): number {
  process.stderr.write(`svc-sidecar: ${configPath} is invalid:\n${err.problems.map((p) => `  - ${p}`).join('\n')}\n`);
  return 1;
}

function help(text: string): number {
  process.stdout.write(text);
  return 0;
}

function commandNamed(name: string): Command {
  return COMMANDS.find((command) => command.name === name)!;
}

function didYouMean(name: string, known: readonly string[]): string {
  const nearest = nearestName(name, known);
  return nearest === undefined ? '' : ` (did you mean "${nearest}"?)`;
}

function stringOf(value: string | boolean | undefined): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** Help paragraphs at about 88 columns. */
function wrap(text: string, width = 88): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === '' ? word : `${line} ${word}`;
    }
  }
  if (line !== '') lines.push(line);
  return lines.join('\n');
}

async function serve(config: Config, configPath: string): Promise<number> {
  const logger = createLogger(config.logging.level);
  const app = await startApp(config, configPath, logger);
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
 * Opens the store and begins the seed's scrypt work on libuv's thread pool before loading
 * the rest of the program (src/app.ts and what it imports, about 150 modules), so that the
 * two run side by side; then creates the app, which takes the store over.
 */
async function startApp(config: Config, configPath: string, logger: Logger): Promise<App> {
  const store = await openConfiguredStore(config.store);
  let passwords: Promise<PasswordPlan> | null;
  let createApp: typeof import('../app.ts').createApp;
  try {
    passwords = (await seedsAtStart(config, store, 'always')) ? decidePasswords(await passwordChecks(store, config.seed)) : null;
    // createApp awaits it; a failure before then (a bad route, the master key) must not
    // leave the plan's own failure unhandled.
    passwords?.catch(() => {});
    ({ createApp } = await import('../app.ts'));
  } catch (err) {
    await store.close();
    throw err;
  }
  return createApp(config, { logger, configPath, opened: { store, passwords } });
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
  const { createApp } = await import('../app.ts');
  const app = await createApp(config, { logger: createLogger(config.logging.level, process.stderr), seed: 'new-store' });
  try {
    for (const created of app.createdApiKeys) process.stdout.write(`seed api key "${created.name}": ${created.key}\n`);
    const created = await createOwner(app, name.trim(), email);
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
async function createOwner(app: App, name: string, email: string): Promise<{ password: string; key: string } | string> {
  const { store, logs } = app.services;
  if ((await store.users.findByEmail(email)) !== undefined) return `a user with the email ${email} already exists`;
  const owner = await store.roles.findByName('owner');
  if (owner === undefined) throw new Error('the built-in role "owner" is missing from the store');
  // 144 random bits, as 24 URL-safe characters.
  const password = randomBytes(18).toString('base64url');
  const key = generateApiKey();
  const keyName = `init ${email}`;
  // Hashed before the transaction: it may wait on nothing but the store.
  const passwordHash = hashPassword(password);
  let user;
  try {
    user = await store.transaction(async (tx) => {
      const created = await tx.users.create({ name, email, passwordHash, roleIds: [owner.id] });
      await tx.apiKeys.create({ name: keyName, prefix: apiKeyPrefix(key), keyHash: hashApiKey(key), userId: created.id });
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
      if (err instanceof UsageError) {
        const command = err.command === '' ? 'svc-sidecar' : `svc-sidecar ${err.command}`;
        process.stderr.write(`${command}: ${err.message}. See "${command} --help".\n`);
        process.exitCode = 2;
        return;
      }
      process.stderr.write(`svc-sidecar: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
