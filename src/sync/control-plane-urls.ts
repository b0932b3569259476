/**
 * Where a replica reaches its control plane: one base URL, or several instances serving
 * the same state (DESIGN §16), tried in the order listed.
 *
 * The rule: a failed request moves to the next instance at once, and the caller waits its
 * backoff only when every instance has failed in a row (a round). A success keeps the
 * instance that answered: a replica does not move back to an earlier one that returns,
 * since each move costs a failed request and both serve the same state. The snapshot
 * poller and the log shipper each keep their own, so one loop's failures (a log batch the
 * control plane refuses, say) never move the other off an instance that works for it, and
 * each round counts that loop's own failures only.
 */

/**
 * An endpoint of the control plane at `base`, keeping any path prefix the base has
 * (`https://cp.example/svc/` → `https://cp.example/svc/api/v3/...`).
 */
export function controlPlaneUrl(base: string, path: string): string {
  return new URL(path.replace(/^\//, ''), base.endsWith('/') ? base : `${base}/`).href;
}

/** A URL as logs and error messages may show it: no user name, password, query or fragment. */
export function shownUrl(base: string): string {
  const url = new URL(base);
  url.username = '';
  url.password = '';
  url.search = '';
  url.hash = '';
  return url.href;
}

/** The shortest wait for a control plane, whatever the interval: a slow network still gets a second. */
export const MIN_REQUEST_TIMEOUT_MS = 1_000;
/** The longest wait for an answer's headers, or a pause in its body. */
export const MAX_REQUEST_TIMEOUT_MS = 30_000;
/** The longest wait for a connection. */
export const MAX_CONNECT_TIMEOUT_MS = 10_000;

/**
 * The undici Agent timeouts of a loop that asks the control plane every `intervalMs`: an
 * instance that accepts and never answers (a hung process, a pod IP gone dark) holds a
 * request no longer than one interval, so the loop moves to the next instance within it
 * (DESIGN §16). Each is at least MIN_REQUEST_TIMEOUT_MS, at most the ceilings above and at
 * most `timeout` when given. The body timeout stays a pause between chunks, so a large
 * snapshot that keeps flowing still arrives, however long it takes in all.
 */
export function requestTimeouts(intervalMs: number, timeout?: number): { connectTimeout: number; headersTimeout: number; bodyTimeout: number } {
  const bounded = Math.max(MIN_REQUEST_TIMEOUT_MS, Math.min(timeout ?? MAX_REQUEST_TIMEOUT_MS, MAX_REQUEST_TIMEOUT_MS, intervalMs));
  return { connectTimeout: Math.min(bounded, MAX_CONNECT_TIMEOUT_MS), headersTimeout: bounded, bodyTimeout: bounded };
}

export class ControlPlaneUrls {
  readonly #bases: readonly string[];
  readonly #endpoints: readonly string[];
  #index = 0;
  /** Failures in a row in the current round. */
  #failedInRound = 0;
  /** The instance of the last success; null before the first. */
  #lastGood: number | null = null;

  /** `bases`: the configured URLs, at least one; `path`: the endpoint this caller uses on each. */
  constructor(bases: readonly string[], path: string) {
    if (bases.length === 0) throw new Error('at least one control-plane URL is needed');
    this.#bases = bases;
    this.#endpoints = bases.map((base) => controlPlaneUrl(base, path));
  }

  /** How many instances there are. */
  get count(): number {
    return this.#bases.length;
  }

  /** The position, in the configured list, of the instance to use now. */
  get index(): number {
    return this.#index;
  }

  /** The endpoint on the instance to use now. */
  get url(): string {
    return this.#endpoints[this.#index]!;
  }

  /** The instance to use now, as logs may show it. */
  get shown(): string {
    return shownUrl(this.#bases[this.#index]!);
  }

  /**
   * The last request failed and an instance of this round is still untried: the caller
   * tries it now, without its backoff. False after a success and after a round that failed
   * on every instance.
   */
  get retryAtOnce(): boolean {
    return this.#failedInRound > 0;
  }

  /** The position of the instance that answered last; null before the first answer. */
  get lastGood(): number | null {
    return this.#lastGood;
  }

  /**
   * The instance in use answered. True when that is another one than the last that did
   * (or the first answer since start): a change worth a line in the log.
   */
  succeeded(): boolean {
    this.#failedInRound = 0;
    const moved = this.#lastGood !== this.#index;
    this.#lastGood = this.#index;
    return moved;
  }

  /**
   * The instance in use failed: the next one is used from now on. True when this failure
   * ends a round in which every instance failed (always so with one URL); the caller then
   * waits its backoff before the next round, else it tries the next instance at once.
   */
  failed(): boolean {
    this.#index = (this.#index + 1) % this.#bases.length;
    this.#failedInRound++;
    if (this.#failedInRound < this.#bases.length) return false;
    this.#failedInRound = 0;
    return true;
  }
}
