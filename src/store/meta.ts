import type { DatabaseSync, StatementSync } from 'node:sqlite';

/** Named values about the store itself (`store_meta`), never part of a snapshot. */
export class MetaRepository {
  readonly #get: StatementSync;
  readonly #set: StatementSync;

  constructor(db: DatabaseSync) {
    this.#get = db.prepare('SELECT value FROM store_meta WHERE name = ?');
    this.#set = db.prepare('INSERT INTO store_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value');
  }

  get(name: string): string | undefined {
    return (this.#get.get(name) as { value: string } | undefined)?.value;
  }

  set(name: string, value: string): void {
    this.#set.run(name, value);
  }
}
