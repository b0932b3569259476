/**
 * Config file → validated, frozen `Config`, in one pass that reports every problem:
 * YAML → interpolation → schema (with cross-field rules). STYLE §8.
 */

import { readFileSync } from 'node:fs';
import { LineCounter, parseDocument, type YAMLError } from 'yaml';
import type { z } from 'zod';
import { ConfigError } from './config-error.ts';
import { interpolate } from './interpolate.ts';
import { nearestName } from '../util/nearest.ts';
import { formatProblem, isWithin, type Problem } from './problems.ts';
import { knownKeysAt } from './schema-keys.ts';
import { configSchema, type Config } from './schema.ts';

export { ConfigError } from './config-error.ts';
export { parseListen, type ListenAddress } from './listen.ts';
export type { Config } from './schema.ts';

/** Relative to the working directory, like the paths inside the file. */
export const DEFAULT_CONFIG_PATH = 'config/svc.yaml';

export interface LoadConfigOptions {
  /** File to read; also names the source in error messages when `text` is given. */
  path?: string;
  /** YAML text to use instead of reading `path`. */
  text?: string;
  /** Variables for `${VAR}`; defaults to `process.env`. */
  env?: NodeJS.ProcessEnv;
}

export function loadConfig(options: LoadConfigOptions = {}): Config {
  const source = options.path ?? (options.text === undefined ? DEFAULT_CONFIG_PATH : undefined);
  const text = options.text ?? readSource(source ?? DEFAULT_CONFIG_PATH);

  const parsed = parseYaml(text);
  if (parsed.problems.length > 0) throw new ConfigError(parsed.problems, source);

  // An empty file means "all defaults".
  const tree = parsed.value ?? {};
  const interpolated = interpolate(tree, options.env ?? process.env);
  const result = configSchema.safeParse(interpolated.value, { error: requiredMessage });

  const problems: Problem[] = [...interpolated.problems];
  if (!result.success) {
    // A value whose interpolation failed still holds its `${...}` text; whatever the schema
    // says about it only repeats the interpolation problem.
    const failed = interpolated.problems.map((problem) => problem.path);
    for (const problem of schemaProblems(result.error.issues)) {
      if (!failed.some((path) => isWithin(problem.path, path))) problems.push(problem);
    }
  }
  if (problems.length > 0 || !result.success) throw new ConfigError(problems.map(formatProblem), source);
  return deepFreeze(result.data) as Config;
}

function readSource(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const problem = code === 'EISDIR' ? 'is a directory, not a configuration file' : `cannot read the file (${code ?? (error as Error).message})`;
    throw new ConfigError([`${path}: ${problem}`], path, { cause: error });
  }
}

function parseYaml(text: string): { value: unknown; problems: string[] } {
  const lineCounter = new LineCounter();
  // `merge` keeps `<<: *anchor` working (YAML 1.1, still common for repeated blocks).
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, merge: true });
  // Warnings (an unknown !tag, say) are errors here: a config that parses "mostly" is wrong.
  const problems = [...doc.errors, ...doc.warnings].map((error) => yamlProblem(error, lineCounter));
  if (problems.length > 0) return { value: undefined, problems };
  try {
    return { value: doc.toJS({ maxAliasCount: 100 }), problems };
  } catch (error) {
    // toJS throws on an undefined alias or an alias bomb.
    return { value: undefined, problems: [`yaml: ${(error as Error).message}`] };
  }
}

function yamlProblem(error: YAMLError, lineCounter: LineCounter): string {
  const { line, col } = lineCounter.linePos(error.pos[0]);
  return `yaml: line ${line}, column ${col}: ${error.message}`;
}

function schemaProblems(issues: readonly z.core.$ZodIssue[]): Problem[] {
  const problems: Problem[] = [];
  for (const issue of issues) {
    const path = issue.path.map((segment) => (typeof segment === 'number' ? segment : String(segment)));
    if (issue.code === 'unrecognized_keys') {
      const known = knownKeysAt(configSchema, path);
      for (const key of issue.keys) {
        const nearest = nearestName(key, known);
        problems.push({ path: [...path, key], message: nearest === undefined ? 'unknown key' : `unknown key "${key}" (did you mean "${nearest}"?)` });
      }
    } else if (issue.code === 'invalid_type' && path.length === 0) {
      problems.push({ path, message: 'expected a mapping of sections (server, store, seed, ...)' });
    } else {
      problems.push({ path, message: issue.message });
    }
  }
  return problems;
}

// The default "Invalid input: expected string, received undefined" hides the point.
function requiredMessage(issue: z.core.$ZodRawIssue): string | undefined {
  return issue.code === 'invalid_type' && issue.input === undefined ? 'required' : undefined;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

