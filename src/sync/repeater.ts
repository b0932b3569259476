/**
 * Runs a task again and again — once at a time, each run scheduled after the previous one
 * ends, at a delay the caller picks from its outcome (an interval, or a backoff after
 * failures) — until stopped. The replica's poller and the log shipper share it.
 */
export class Repeater<T> {
  readonly #task: () => Promise<T>;
  /** The delay before the next run, from the last run's outcome; null stops repeating. */
  readonly #next: (outcome: { ok: true; value: T } | { ok: false; error: unknown }) => number | null;
  #timer: NodeJS.Timeout | null = null;
  #inFlight: Promise<T> | null = null;
  #stopped = false;

  constructor(task: () => Promise<T>, next: (outcome: { ok: true; value: T } | { ok: false; error: unknown }) => number | null) {
    this.#task = task;
    this.#next = next;
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  start(delay: number): void {
    this.#stopped = false;
    this.#schedule(delay);
  }

  /** Runs the task now, or joins the run in flight. */
  runOnce(): Promise<T> {
    this.#inFlight ??= this.#task().finally(() => {
      this.#inFlight = null;
    });
    return this.#inFlight;
  }

  /** Stops scheduling and waits for the run in flight, if any, to end. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    await this.#inFlight?.catch(() => {});
  }

  #schedule(delay: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.runOnce().then(
        (value) => this.#reschedule({ ok: true, value }),
        (error: unknown) => this.#reschedule({ ok: false, error }),
      );
    }, delay);
    // The listeners keep the process alive; repeating alone must not.
    this.#timer.unref();
  }

  #reschedule(outcome: { ok: true; value: T } | { ok: false; error: unknown }): void {
    if (this.#stopped) return;
    const delay = this.#next(outcome);
    if (delay !== null) this.#schedule(delay);
  }
}
