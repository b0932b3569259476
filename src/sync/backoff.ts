/**
 * When a replica next talks to its control plane. After a success: one interval, drawn
 * from [0.8, 1] × interval, so a fleet started together does not poll in lockstep and a
 * change still arrives within one interval. After n failures in a row: exponential,
 * interval × 2^n capped at `capFactor` × interval, with "equal jitter" (half fixed, half
 * random) so replicas that lost the control plane together do not return together.
 */
export class Backoff {
  readonly #interval: number;
  readonly #cap: number;
  readonly #random: () => number;
  #failures = 0;

  constructor(interval: number, options: { capFactor?: number; random?: () => number } = {}) {
    this.#interval = interval;
    this.#cap = interval * (options.capFactor ?? 10);
    this.#random = options.random ?? Math.random;
  }

  /** Failures in a row. */
  get failures(): number {
    return this.#failures;
  }

  /** Milliseconds to wait after a success. */
  succeeded(): number {
    this.#failures = 0;
    return Math.round(this.#interval * (0.8 + 0.2 * this.#random()));
  }

  /** Milliseconds to wait after a failure. */
  failed(): number {
    this.#failures++;
    const ceiling = Math.min(this.#cap, this.#interval * 2 ** Math.min(this.#failures, 30));
    return Math.round(ceiling / 2 + (ceiling / 2) * this.#random());
  }
}
