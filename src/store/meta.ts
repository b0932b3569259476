import { get, run, type Step } from './query.ts';

const GET = 'SELECT value FROM store_meta WHERE name = ?';
const SET = 'INSERT INTO store_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value';

/** Named values about the store itself (`store_meta`), never part of a snapshot. */
export class MetaRepository {
  *get(name: string): Step<string | undefined> {
    return (yield* get<{ value: string }>(GET, name))?.value;
  }

  *set(name: string, value: string): Step<void> {
    yield* run(SET, name, value);
  }
}
