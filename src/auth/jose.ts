/**
 * jose, loaded on first use: 46 modules, about 20 ms of every start, that only logins,
 * access tokens and the relay's end-user tokens need. A service that only proxies never
 * loads it. Its error classes are tested with `instanceof` only after a call through here
 * has loaded it, so they are the classes of the one copy loaded.
 */
export type Jose = typeof import('jose');

let loading: Promise<Jose> | undefined;
let loaded: Jose | null = null;

export function jose(): Promise<Jose> {
  loading ??= import('jose').then(
    (module) => (loaded = module),
    (err: unknown) => {
      // Tried again by the next caller rather than failing every later one.
      loading = undefined;
      throw err;
    },
  );
  return loading;
}

/**
 * Whether `err` is one of jose's errors (a token refused for what it is or carries). Asked
 * without waiting: before jose has loaded, nothing can have thrown one.
 */
export function isJoseError(err: unknown): err is InstanceType<Jose['errors']['JOSEError']> {
  return loaded !== null && err instanceof loaded.errors.JOSEError;
}
