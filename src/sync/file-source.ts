/**
 * `state.source: file`: the config file's `seed` section is the management state. createApp
 * reconciles it at start; this watches the file and reconciles it again after each change.
 *
 * A reload reads and validates the whole file exactly as at start (`${VAR}` included), works
 * out password hashes off the event loop, then applies the seed in one store transaction
 * (node:sqlite is synchronous, so it runs between two requests and no request sees half of
 * it). Anything wrong keeps the last good state: the problems are logged and counted in
 * `svc_state_reload_failures_total`. Only `seed` is reloaded; other sections need a restart.
 */
import { statSync, watch, readFileSync, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { parseDocument } from 'yaml';
import { ConfigError, loadConfig, type Config } from '../config/load.ts';
import type { Store } from '../store/db.ts';
import { applySeed, SeedError, type PasswordPlan, type SeedDeps, type SeedInput, type SeedResult } from '../store/seed.ts';
import { planPasswordsAsync } from '../store/seed-plan.ts';
import { stateOf } from '../store/state-view.ts';
import type { LogWriter } from '../telemetry/log-writer.ts';
import type { Metrics } from '../telemetry/metrics.ts';

/** Editors write a file in several steps (truncate, write, rename); one reload after they settle. */
export const DEFAULT_DEBOUNCE_MS = 250;
/** Changes listed in one activity entry or log line; the rest are counted. */
const ACTIVITY_CHANGES = 20;
const LOGGED_CHANGES = 50;

export interface FileSourceServices {
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly logs: LogWriter;
}

export interface FileSourceOptions {
  /** The config file the process was started with. */
  readonly path: string;
  /** Variables for `${VAR}`, the same as at start. */
  readonly env: NodeJS.ProcessEnv;
  /** The configuration the process runs with: its seed is the one applied at start. */
  readonly running: Config;
  readonly deps: SeedDeps;
  readonly debounceMs?: number;
  /** Keys a reload generated (entries without `key`): shown once. Default: stderr, as at start. */
  readonly onCreatedApiKeys?: (keys: ReadonlyArray<{ name: string; key: string }>) => void;
}

export type ReloadOutcome = 'applied' | 'unchanged' | 'failed';

export class FileSource {
  readonly #services: FileSourceServices;
  readonly #options: FileSourceOptions;
  readonly #debounceMs: number;
  #watcher: FSWatcher | null = null;
  #timer: NodeJS.Timeout | null = null;
  /** Reloads run one after another: each waits for the one before. */
  #chain: Promise<unknown> = Promise.resolve();
  #stopped = false;
  /**
   * The file as last read. Events for other files of the directory (editor swap files) or a
   * rewrite with the same text cost no reload; a touch (new mtime) retries a failed one.
   */
  #lastSeen: { mtimeMs: number; text: string } | null = null;
  /** JSON of the seed last applied: a file whose seed is unchanged needs no transaction. */
  #appliedSeed: string;
  /** `svc_state_version`: 1 for the seed applied at start, +1 per applied reload. */
  #version = 1;
  /**
   * Per lowercased email, the password last applied and the hash it was checked against:
   * a reload that changes neither skips the scrypt (hashes are salted, so otherwise every
   * reload would verify every seeded password again).
   */
  readonly #verified = new Map<string, { password: string; hash: string | null }>();

  constructor(services: FileSourceServices, options: FileSourceOptions) {
    this.#services = services;
    this.#options = options;
    this.#debounceMs = options.debounceMs ?? DEFAULT_DEBOUNCE_MS;
    this.#appliedSeed = JSON.stringify(options.running.seed);
    this.#remember(options.running.seed);
  }

  start(): void {
    if (this.#watcher !== null || this.#stopped) return;
    // The directory, not the file: editors replace a file by renaming another over it, and a
    // Kubernetes ConfigMap volume swaps a `..data` symlink; a watch on the file itself would
    // stay on the old inode and miss both.
    this.#watcher = watch(dirname(this.#options.path), { persistent: false }, () => this.#schedule());
    this.#watcher.on('error', (error) => {
      this.#services.logger.error({ err: error, file: this.#options.path }, 'watching the configuration file failed: the seed is no longer reloaded');
    });
    // A change made between the start's load and this watch would otherwise wait for the next one.
    this.#schedule();
    this.#services.logger.info({ file: this.#options.path }, 'state.source is file: the seed is reloaded when the file changes');
  }

  /** Stops watching and waits for a reload in progress (its transaction must end before the store closes). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#watcher?.close();
    this.#watcher = null;
    await this.#chain;
  }

  /** Reads the file and applies its seed when it changed. The watcher calls this, debounced. */
  reload(): Promise<ReloadOutcome> {
    const next = this.#chain.then(() => this.#reloadOnce());
    this.#chain = next.catch(() => undefined);
    return next;
  }

  #schedule(): void {
    if (this.#stopped) return;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.reload();
    }, this.#debounceMs);
    this.#timer.unref();
  }

  async #reloadOnce(): Promise<ReloadOutcome> {
    if (this.#stopped) return 'unchanged';
    const { path, env } = this.#options;
    let seen: { mtimeMs: number; text: string };
    try {
      seen = { mtimeMs: statSync(path).mtimeMs, text: readFileSync(path, 'utf8') };
    } catch (error) {
      // Mid-replacement, or deleted: the next event retries.
      this.#lastSeen = null;
      return this.#fail([`${path}: cannot read the file (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`]);
    }
    if (this.#lastSeen !== null && this.#lastSeen.mtimeMs === seen.mtimeMs && this.#lastSeen.text === seen.text) return 'unchanged';
    // Written less than a debounce ago: a writer that truncates and then writes (`cat > file`)
    // may not be done, and half a seed is a valid seed that removes the other half. Events
    // can be missed or come early, so the file's own mtime is the last word.
    const age = Date.now() - seen.mtimeMs;
    if (age >= 0 && age < this.#debounceMs) {
      this.#schedule();
      return 'unchanged';
    }
    this.#lastSeen = seen;

    let config: Config;
    try {
      config = loadConfig({ path, text: seen.text, env });
    } catch (error) {
      return this.#fail(problemsOf(error));
    }
    this.#warnAboutRestart(config);
    const seedJson = JSON.stringify(config.seed);
    if (seedJson === this.#appliedSeed) return 'unchanged';
    if (!declaresSeed(seen.text)) {
      // An empty or cut-short file is valid YAML with an empty seed; applied, it would revoke
      // every seeded API key for good. Removing everything has to be said explicitly.
      return this.#fail(['seed: missing, which would remove everything the seed created; write "seed: {}" to mean that']);
    }

    try {
      const passwords = await this.#planPasswords(config.seed);
      if (this.#stopped) return 'unchanged';
      const started = performance.now();
      const result = await applySeed(this.#services.store, config.seed, this.#options.deps, { prune: true, passwords });
      this.#applied(config.seed, seedJson, result, performance.now() - started);
      return 'applied';
    } catch (error) {
      return this.#fail(problemsOf(error));
    }
  }

  /** The scrypt work of the reload, on libuv's thread pool and before the transaction. */
  #planPasswords(seed: SeedInput): Promise<PasswordPlan> {
    return planPasswordsAsync(this.#services.store, seed, (check) => {
      const known = this.#verified.get(check.email);
      return known?.password === check.password && known.hash === check.storedHash;
    });
  }

  #applied(seed: SeedInput, seedJson: string, result: SeedResult, applyMs: number): void {
    const { logger, metrics, logs } = this.#services;
    this.#appliedSeed = seedJson;
    this.#remember(seed);
    this.#version += 1;
    metrics.stateVersion.set(this.#version);
    logSeedResult(logger, result);
    logger.info(
      {
        file: this.#options.path,
        version: this.#version,
        changed: result.changes.length,
        changes: result.changes.slice(0, LOGGED_CHANGES),
        applyMs: Math.round(applyMs * 10) / 10,
      },
      'state reloaded from the configuration file',
    );
    if (result.createdApiKeys.length > 0) (this.#options.onCreatedApiKeys ?? printCreatedApiKeys)(result.createdApiKeys);
    if (result.changes.length === 0) return;
    const listed = result.changes.slice(0, ACTIVITY_CHANGES).join('; ');
    const more = result.changes.length > ACTIVITY_CHANGES ? ` and ${result.changes.length - ACTIVITY_CHANGES} more` : '';
    logs.activity({
      action: 'state.reloaded',
      description: `Reloaded the seed from ${this.#options.path}: ${listed}${more}.`,
      ip: '',
      userId: null,
      causerEmail: null,
      requestId: null,
      createdAt: new Date().toISOString(),
    });
  }

  #remember(seed: SeedInput): void {
    this.#verified.clear();
    for (const user of seed.users ?? []) {
      if (user.password === undefined) continue;
      const hash = stateOf(this.#services.store).userByEmail(user.email)?.passwordHash ?? null;
      this.#verified.set(user.email.toLowerCase(), { password: user.password, hash });
    }
  }

  /** Sections other than `seed` are read once, at start: say so rather than half-apply them. */
  #warnAboutRestart(config: Config): void {
    const running = this.#options.running as Record<string, unknown>;
    const loaded = config as Record<string, unknown>;
    const sections = Object.keys(loaded).filter((key) => key !== 'seed' && JSON.stringify(loaded[key]) !== JSON.stringify(running[key]));
    if (sections.length === 0) return;
    this.#services.logger.warn(
      { file: this.#options.path, sections },
      `the configuration file changed outside "seed" (${sections.join(', ')}): that requires a restart and is ignored until then`,
    );
  }

  #fail(problems: readonly string[]): 'failed' {
    this.#services.metrics.reloadFailures.inc();
    this.#services.logger.error(
      { file: this.#options.path, problems },
      `reloading the state from the configuration file failed (${problems.length === 1 ? '1 problem' : `${problems.length} problems`}): keeping the last good state`,
    );
    return 'failed';
  }
}

/** The warnings of a seed run; shared by the start and reloads. */
export function logSeedResult(logger: Logger, result: SeedResult): void {
  for (const warning of result.warnings) logger.warn(warning);
  if (result.keptConfigurations.length > 0) {
    logger.warn({ configurations: result.keptConfigurations }, `${result.keptConfigurations.length} configuration(s) removed from the seed were kept with their keys`);
  }
}

/** Whether the file has a `seed` key at all (loadConfig has already parsed it successfully). */
function declaresSeed(text: string): boolean {
  const tree: unknown = parseDocument(text, { merge: true }).toJS({ maxAliasCount: 100 });
  return typeof tree === 'object' && tree !== null && Object.hasOwn(tree, 'seed');
}

/** ConfigError and SeedError messages never hold a secret (keys and passwords are not echoed). */
function problemsOf(error: unknown): readonly string[] {
  if (error instanceof ConfigError || error instanceof SeedError) return error.problems;
  return [error instanceof Error ? error.message : String(error)];
}

function printCreatedApiKeys(keys: ReadonlyArray<{ name: string; key: string }>): void {
  for (const created of keys) {
    process.stderr.write(`created API key "${created.name}": ${created.key}\n(store it now; it will not be shown again)\n`);
  }
}
