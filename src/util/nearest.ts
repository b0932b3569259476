/**
 * "Did you mean ...?" for misspelt names: the known name nearest to an unknown one, when one
 * is within two edits. An edit is an insertion, a deletion, a substitution or a swap of two
 * neighbouring characters (`lisetn` is one edit from `listen`). Short names get fewer edits,
 * one per three characters, or every four-letter key would "mean" some other one (`nope` is
 * two edits from `name`).
 */

const MAX_DISTANCE = 2;

/** The nearest of `known` to `name` (the first listed on a tie), or undefined. */
export function nearestName(name: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.min(MAX_DISTANCE, Math.floor(name.length / 3)) + 1;
  for (const candidate of known) {
    if (candidate === name) continue;
    const distance = editDistance(name, candidate, bestDistance);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/**
 * Optimal string alignment distance, or `limit` as soon as it is clear the distance is at
 * least that (names here are short, but the input is whatever the file says).
 */
export function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) >= limit) return limit;
  let beforePrevious: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let value = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) value = Math.min(value, beforePrevious[j - 2]! + 1);
      current.push(value);
      if (value < rowMin) rowMin = value;
    }
    if (rowMin >= limit) return limit;
    beforePrevious = previous;
    previous = current;
  }
  return Math.min(previous[b.length]!, limit);
}
