/** A configuration that cannot run, with every problem found. */
export class ConfigError extends Error {
  /** Every problem found, each `path.to.key: message`. */
  readonly problems: readonly string[];

  constructor(problems: readonly string[], source?: string, options?: { cause?: unknown }) {
    const where = source === undefined ? '' : ` in ${source}`;
    const count = problems.length === 1 ? '1 problem' : `${problems.length} problems`;
    super(`Invalid configuration${where} (${count}):\n  ${problems.join('\n  ')}`, options);
    this.name = 'ConfigError';
    this.problems = Object.freeze([...problems]);
  }
}
