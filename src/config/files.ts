/**
 * Checks of the paths the file names, made while it is validated so a mistake is reported
 * with its key among the other problems, rather than as an EISDIR stack trace from
 * whatever opens the path later.
 */
import { statSync } from 'node:fs';
import type { Problem } from './problems.ts';
import { asRecord } from './tree.ts';

const MEMORY = ':memory:';

/** A store that does not exist yet will hold exactly the seed once started. */
export function storeIsNew(config: unknown): boolean {
  const store = asRecord(asRecord(config)?.store);
  // A database's contents cannot be known from here: assume it holds more than the seed.
  if (typeof store?.url === 'string') return false;
  const path = store?.path;
  if (typeof path !== 'string') return false;
  if (path === MEMORY) return true;
  try {
    statSync(path);
    return false;
  } catch (error) {
    // Anything but "no such file" (under a file, unreadable) is not a store to create.
    return (error as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Configured files that are directories, or that sit under something that is not one. */
export function fileProblems(config: unknown): Problem[] {
  const root = asRecord(config);
  const problems: Problem[] = [];
  const check = (path: readonly string[], value: unknown, example: string) => {
    if (typeof value !== 'string' || value === MEMORY) return;
    const problem = notAFile(value, example);
    if (problem !== undefined) problems.push({ path, message: problem });
  };
  const store = asRecord(root?.store);
  if (typeof store?.url !== 'string') check(['store', 'path'], store?.path, 'svc.db');
  check(['keys', 'master_key_file'], asRecord(root?.keys)?.master_key_file, 'master.key');
  return problems;
}

function notAFile(path: string, example: string): string | undefined {
  try {
    // Not `throwIfNoEntry: false`: it also hides ENOTDIR.
    if (statSync(path).isDirectory()) {
      return `"${path}" is a directory; give the path of a file in it, such as ${joinExample(path, example)}`;
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOTDIR') return `"${path}" cannot be a file: a part of the path before its name is a file, not a directory`;
    // ENOENT is fine (created at start); anything else (EACCES, say) is reported by whatever
    // opens the file, with its reason.
  }
  return undefined;
}

function joinExample(dir: string, name: string): string {
  return `${dir.replace(/\/+$/, '')}/${name}`;
}
