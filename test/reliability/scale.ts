/**
 * The reliability suite runs in two sizes: a short form inside `npm test`, and the full
 * form the figures come from, under `npm run test:stress` (SVC_STRESS=1).
 */
export const FULL = process.env['SVC_STRESS'] === '1';

/** `short` under `npm test`, `full` under `npm run test:stress`. */
export function scaled<T>(short: T, full: T): T {
  return FULL ? full : short;
}
