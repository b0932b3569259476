/**
 * A problem found in the config file, at a path into its tree. Every stage (YAML, interpolation,
 * schema, cross-field checks) produces these so they can all be reported in one go.
 */

export type ConfigPath = readonly (string | number)[];

export interface Problem {
  path: ConfigPath;
  message: string;
}

/** `seed.users.0.email`; the empty path (the document itself) is `(root)`. */
export function formatPath(path: ConfigPath): string {
  return path.length === 0 ? '(root)' : path.join('.');
}

export function formatProblem(problem: Problem): string {
  return `${formatPath(problem.path)}: ${problem.message}`;
}

/** True when `path` is `prefix` or lies below it. */
export function isWithin(path: ConfigPath, prefix: ConfigPath): boolean {
  return prefix.length <= path.length && prefix.every((segment, i) => String(segment) === String(path[i]));
}
