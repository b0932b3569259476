/**
 * "Did you mean ...?": the candidate nearest a misspelt name. Imports nothing of ours, so
 * any area (configuration, headers) may use it.
 */

/** The candidate within `maxDistance` edits of `word`, the closest first (ties: the first listed); null if none. */
export function nearest(word: string, candidates: Iterable<string>, maxDistance = 2): string | null {
  let best: string | null = null;
  let cap = maxDistance + 1;
  for (const candidate of candidates) {
    const d = editDistance(word, candidate, cap);
    if (d < cap) {
      best = candidate;
      cap = d;
    }
  }
  return best;
}

/** Levenshtein distance, or `cap` as soon as it is known to be at least `cap`. */
export function editDistance(a: string, b: string, cap = Number.POSITIVE_INFINITY): number {
  if (Math.abs(a.length - b.length) >= cap) return cap;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const value = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      current.push(value);
      if (value < rowMin) rowMin = value;
    }
    if (rowMin >= cap) return cap;
    previous = current;
  }
  return Math.min(previous[b.length]!, cap);
}
