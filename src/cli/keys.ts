/**
 * `svc-sidecar keys rotate|rewrap|destroy`: key rotation without going through HTTP,
 * against the store and master key named by the configuration file. The store is opened
 * the way `serve` opens it (createApp, never listening), so migrations and master-key
 * checks are the same, except that the seed is applied only to a store that does not
 * exist yet: on a live one it would undo changes made through the API. The operations
 * are the API's own functions. A running service on the same store picks the change up
 * at its next request (its codec cache follows the configuration row's updated_at).
 *
 * stdout carries only the result (the new version, the rewrapped document); everything
 * else goes to stderr. Exit codes: 0 done, 1 refused or failed, 2 bad usage.
 */
import { userInfo } from 'node:os';
import { createApp, type App } from '../app.ts';
import { rotateKey } from '../api/configurations.ts';
import { destroyKeyVersion, FORCED } from '../api/keys.ts';
import type { Config } from '../config/load.ts';
import { rewrapDocument } from '../dataplane/rewrap.ts';
import { JSON_FORMAT, NDJSON_FORMAT } from '../fields/formats.ts';
import { InvalidFieldPathsError, SvcError, ValidationError } from '../errors.ts';
import { compileFieldPaths, FieldMatcher } from '../fields/paths.ts';
import type { Configuration } from '../store/configurations.ts';
import { createLogger } from '../telemetry/logger.ts';

export interface KeysArgs {
  readonly configuration?: string;
  readonly fields?: string;
  readonly version?: string;
  readonly confirm?: string;
  readonly force?: boolean;
  readonly ndjson?: boolean;
}

export interface KeysIo {
  readonly stdin: AsyncIterable<Buffer>;
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
}

const SUBCOMMANDS = ['rotate', 'rewrap', 'destroy'] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

/** Refusals with a message for the operator: exit 1 (2 when the command line was wrong). */
class KeysCommandError extends Error {
  readonly exitCode: number;

  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

export async function keys(config: Config, positionals: readonly string[], args: KeysArgs, io: KeysIo = defaultIo()): Promise<number> {
  const sub = positionals[0];
  const say = (line: string) => io.stderr.write(`svc-sidecar keys${sub === undefined ? '' : ` ${sub}`}: ${line}\n`);
  try {
    const command = checkArgs(config, sub, positionals, args);
    const app = await createApp(config, { logger: createLogger(config.logging.level, io.stderr), seed: 'new-store' });
    try {
      // A seed-generated key is shown only by the run that creates it; this command's
      // stdout is reserved for its result, so name them and point to rotation instead.
      for (const created of app.createdApiKeys) say(`the seed created the API key "${created.name}"; its value is not shown here: rotate it through the API to get one`);
      const configuration = await findConfiguration(app, args.configuration!);
      switch (command) {
        case 'rotate':
          return await rotate(app, configuration, io);
        case 'rewrap':
          return await rewrap(app, configuration, args, io, say);
        case 'destroy':
          return await destroy(app, configuration, args, io);
      }
    } finally {
      await app.close();
    }
  } catch (err) {
    if (err instanceof KeysCommandError) {
      say(err.exitCode === 2 && sub !== undefined ? `${err.message}. See "svc-sidecar keys ${sub} --help".` : err.message);
      return err.exitCode;
    }
    if (err instanceof SvcError) {
      say(err.message);
      if (err instanceof ValidationError) {
        for (const [field, messages] of Object.entries(err.errors)) for (const message of messages) io.stderr.write(`  ${field}: ${message}\n`);
      }
      return 1;
    }
    throw err;
  }
}

/** Everything that can be checked before the store is opened. */
function checkArgs(config: Config, sub: string | undefined, positionals: readonly string[], args: KeysArgs): Subcommand {
  if (sub === undefined || !(SUBCOMMANDS as readonly string[]).includes(sub)) {
    throw new KeysCommandError(`expected one of ${SUBCOMMANDS.join(', ')}`, 2);
  }
  if (positionals.length > 1) throw new KeysCommandError(`unexpected argument "${positionals[1]}"`, 2);
  if (args.configuration === undefined || args.configuration.trim() === '') {
    throw new KeysCommandError('--configuration <name or proxy slug> is required', 2);
  }
  const command = sub as Subcommand;
  if (command !== 'rewrap' && (args.fields !== undefined || args.ndjson === true)) {
    throw new KeysCommandError('--fields and --ndjson apply to rewrap only', 2);
  }
  if (command !== 'destroy' && (args.version !== undefined || args.confirm !== undefined)) {
    throw new KeysCommandError('--version and --confirm apply to destroy only', 2);
  }
  if (command === 'destroy') {
    if (args.version === undefined || !/^[1-9][0-9]{0,9}$/.test(args.version)) throw new KeysCommandError('--version <N> (a key version, 1 or more) is required', 2);
    if (args.confirm === undefined) throw new KeysCommandError(`--confirm <configuration name>/v${args.version} is required: destroying a key version cannot be undone`, 2);
  }
  if (command === 'rewrap' && args.fields !== undefined) matcherOf(args.fields);
  // A control plane on PostgreSQL holds no data plane: tokens are rewrapped where they are
  // read, by a sidecar (its rewrap route) or on a SQLite store.
  if (command === 'rewrap' && config.store.url !== undefined) {
    throw new KeysCommandError('a control plane on PostgreSQL (store.url) rewraps no tokens: send them to a sidecar\'s /api/v3/encryption/{slug}/rewrap, or run this with a configuration that replicates from it');
  }
  // Rewrap only reads keys; rotate and destroy would be overwritten by the next snapshot.
  if (command !== 'rewrap' && config.state.source === 'control-plane') {
    throw new KeysCommandError('keys come from the control plane in this configuration; run this against the control plane instead');
  }
  return command;
}

async function findConfiguration(app: App, nameOrSlug: string): Promise<Configuration> {
  const { configurations } = app.services.store;
  const found = (await configurations.findByName(nameOrSlug)) ?? (await configurations.findBySlug(nameOrSlug));
  if (found === undefined) throw new KeysCommandError(`no configuration is named "${nameOrSlug}" or has that proxy slug`);
  if (found.type !== 'encryption') throw new KeysCommandError(`"${found.name}" is a ${found.type} configuration: only encryption configurations have keys`);
  return found;
}

async function rotate(app: App, configuration: Configuration, io: KeysIo): Promise<number> {
  const rotated = await rotateKey(app.services, configuration.id);
  recordActivity(app, 'configuration.rotated', `Rotated the key of configuration "${rotated.name}" to version ${rotated.keyVersion}`, 'rotate');
  io.stdout.write(`${rotated.keyVersion}\n`);
  return 0;
}

async function rewrap(app: App, configuration: Configuration, args: KeysArgs, io: KeysIo, say: (line: string) => void): Promise<number> {
  const matcher = args.fields === undefined ? FieldMatcher.anyToken() : matcherOf(args.fields);
  const result = await rewrapDocument(app.services, configuration, io.stdin, matcher, args.ndjson === true ? NDJSON_FORMAT : JSON_FORMAT);
  await new Promise<void>((resolve, reject) => io.stdout.write(result.body, (err) => (err == null ? resolve() : reject(err))));
  recordActivity(app, 'configuration.rewrapped', `Rewrapped ${result.rewrapped} tokens of configuration "${configuration.name}" to key version ${result.version}`, 'rewrap');
  say(`${result.rewrapped} tokens rewrapped to key version ${result.version}, ${result.kept} already at it`);
  return 0;
}

async function destroy(app: App, configuration: Configuration, args: KeysArgs, io: KeysIo): Promise<number> {
  const version = Number(args.version);
  const { forced } = await destroyKeyVersion(app.services, configuration, version, args.confirm, args.force === true);
  recordActivity(app, 'configuration.key_destroyed', `Destroyed key version ${version} of configuration "${configuration.name}"${forced ? FORCED : ''}`, 'destroy');
  io.stdout.write(`destroyed key version ${version} of "${configuration.name}"\n`);
  return 0;
}

function matcherOf(fields: string): FieldMatcher {
  try {
    const matcher = compileFieldPaths(fields);
    if (matcher === null) throw new KeysCommandError('--fields lists no field path', 2);
    return matcher;
  } catch (err) {
    if (err instanceof InvalidFieldPathsError) throw new KeysCommandError(err.message.replace('The x-svc-fields header', '--fields'), 2);
    throw err;
  }
}

/** No API user acts here: the entry names the command and the OS account that ran it. */
function recordActivity(app: App, action: string, description: string, sub: Subcommand): void {
  app.services.logs.activity({
    action,
    description: `${description}, by svc-sidecar keys ${sub} as OS user "${osUser()}".`,
    ip: '',
    userId: null,
    causerEmail: null,
    requestId: null,
    createdAt: new Date().toISOString(),
  });
}

function osUser(): string {
  try {
    return userInfo().username;
  } catch {
    // No passwd entry for the uid (common in containers).
    return String(process.getuid?.() ?? 'unknown');
  }
}

function defaultIo(): KeysIo {
  return { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr };
}
