/**
 * `${VAR}` / `${VAR:-default}` substitution in the string scalars of an already parsed YAML
 * tree. Working on parsed values rather than on the file's text means a variable's value is
 * only ever a string: a value such as "x\nadmin: true" cannot add keys, lists or anchors.
 * Keys are not interpolated: the shape of the file is fixed by what is written in it.
 *
 *   ${VAR}            VAR's value; an error if VAR is unset (set but empty gives "")
 *   ${VAR:-default}   VAR's value, or `default` when VAR is unset or empty (as in sh)
 *   $${               a literal "${" (before "{", "$$" stands for one "$")
 *
 * Every problem is collected with its path, so one run reports every missing variable.
 * Messages never quote the scalar itself: it may be a password.
 */

import type { ConfigPath, Problem } from './problems.ts';

export interface InterpolationResult {
  value: unknown;
  problems: Problem[];
}

const EXPRESSION = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;

export function interpolate(tree: unknown, env: NodeJS.ProcessEnv): InterpolationResult {
  const problems: Problem[] = [];
  const value = walk(tree, [], env, problems);
  return { value, problems };
}

function walk(node: unknown, path: ConfigPath, env: NodeJS.ProcessEnv, problems: Problem[]): unknown {
  if (typeof node === 'string') return interpolateScalar(node, path, env, problems);
  if (Array.isArray(node)) return node.map((item: unknown, index) => walk(item, [...path, index], env, problems));
  if (isPlainObject(node)) {
    // fromEntries defines own properties, so a "__proto__" key stays an (unknown) key
    // for the schema to reject instead of becoming the object's prototype.
    return Object.fromEntries(Object.entries(node).map(([key, child]) => [key, walk(child, [...path, key], env, problems)]));
  }
  return node;
}

function interpolateScalar(text: string, path: ConfigPath, env: NodeJS.ProcessEnv, problems: Problem[]): string {
  if (!text.includes('$')) return text;
  const result = interpolateString(text, env);
  if (result.errors.length === 0) return result.value;
  for (const message of result.errors) problems.push({ path, message });
  // Keep the text as written: the caller drops schema complaints about this path, which
  // would only repeat the interpolation problem in other words.
  return text;
}

/** Interpolates one string. Exported for tests and for callers outside the config file. */
export function interpolateString(text: string, env: NodeJS.ProcessEnv): { value: string; errors: string[] } {
  const errors: string[] = [];
  let out = '';
  let i = 0;
  while (i < text.length) {
    if (text[i] !== '$') {
      out += text[i];
      i += 1;
      continue;
    }
    // A run of dollars before "{" pairs up: each "$$" is one literal "$", and an odd one
    // left over starts an expression. So "$${" is a literal "${" and "$$${A}" is "$"
    // followed by A's value. Dollars anywhere else ("$5", "$$") are kept as written.
    let run = 0;
    while (text[i + run] === '$') run += 1;
    if (text[i + run] !== '{') {
      out += text.slice(i, i + run);
      i += run;
      continue;
    }
    out += '$'.repeat(Math.floor(run / 2));
    const brace = i + run;
    if (run % 2 === 0) {
      out += '{';
      i = brace + 1;
      continue;
    }
    const end = text.indexOf('}', brace + 1);
    if (end === -1) {
      errors.push('unterminated "${" (write "$${" for a literal "${")');
      break;
    }
    const expression = text.slice(brace + 1, end);
    i = end + 1;
    const match = EXPRESSION.exec(expression);
    if (match === null) {
      errors.push('invalid interpolation: expected ${NAME} or ${NAME:-default} with NAME matching [A-Za-z_][A-Za-z0-9_]* (write "$${" for a literal "${")');
      continue;
    }
    const [, name = '', fallback] = match;
    if (fallback !== undefined && fallback.includes('${')) {
      errors.push('invalid interpolation: a default cannot contain "${"');
      continue;
    }
    const value = env[name];
    if (fallback !== undefined) {
      out += value === undefined || value === '' ? fallback : value;
    } else if (value === undefined) {
      errors.push(`environment variable ${name} is not set`);
    } else {
      out += value;
    }
  }
  return { value: out, errors };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}
