/**
 * jose, loaded on first use: 46 modules, about 20 ms of every start, that only logins,
 * access tokens and the relay's end-user tokens need. A service that only proxies never
 * loads it. Its error classes are tested with `instanceof` only after a call through here
 * has loaded it, so they are the classes of the one copy loaded.
 */
export type Jose = typeof import('jose');

let loading: Promise<Jose> | undefined;

export function jose(): Promise<Jose> {
  loading ??= import('jose').catch((err: unknown) => {
    // Tried again by the next caller rather than failing every later one.
    loading = undefined;
    throw err;
  });
  return loading;
}
