/**
 * The rows of a SQLite store, read for `store copy` (store/copy.ts): table by table, in
 * batches, so a large log table is never held whole in memory.
 */
import { DatabaseSync } from 'node:sqlite';
import type { CopySource, CopyValue } from '../copy.ts';
import type { Store } from '../db.ts';
import { sqliteConnection } from './connection.ts';
import { schemaVersion } from './migrations.ts';

/**
 * The schema version of the store in the file at `path`, read without writing to it: 0 for
 * a database no build of ours has migrated (another program's, or an empty file). Throws
 * when the file is not a SQLite database.
 */
export function storeVersionOf(path: string): number {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    return schemaVersion(db);
  } finally {
    db.close();
  }
}

/** A day as `toISOString()` begins: the form the log partitions are named by. */
const ISO_DAY = /^\d{4}-\d{2}-\d{2}$/;

/** A name read from the schema, quoted as an identifier. */
const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`;

export function sqliteCopySource(store: Store): CopySource {
  const db = sqliteConnection(store);
  return {
    tables() {
      const rows = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name").all() as Array<{ name: string }>;
      return rows.map((row) => row.name);
    },
    columns(table) {
      const rows = db.prepare('SELECT name FROM pragma_table_info(?) ORDER BY cid').all(table) as Array<{ name: string }>;
      return rows.map((row) => row.name);
    },
    *batches(table, columns, order, size) {
      const statement = db.prepare(`SELECT ${columns.map(quote).join(', ')} FROM ${quote(table)} ORDER BY ${order.map(quote).join(', ')}`);
      statement.setReturnArrays(true);
      let batch: CopyValue[][] = [];
      for (const row of statement.iterate() as Iterable<CopyValue[]>) {
        batch.push(row);
        if (batch.length === size) {
          yield batch;
          batch = [];
        }
      }
      if (batch.length > 0) yield batch;
    },
    highestId(table) {
      const rows = db.prepare(`SELECT coalesce(max(id), 0) AS n FROM ${quote(table)}`).get() as { n: number };
      // AUTOINCREMENT remembers ids of deleted rows (users, classifications): they stay unused.
      const counter = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name = 'sqlite_sequence'").get() === undefined
        ? undefined
        : (db.prepare('SELECT seq FROM sqlite_sequence WHERE name = ?').get(table) as { seq: number } | undefined);
      return Math.max(rows.n, counter?.seq ?? 0);
    },
    days(table) {
      // One seek of the created_at index per day: from the first row of a day straight to
      // the first of the next, whatever the number of rows in between.
      const first = db.prepare(`SELECT min(created_at) AS at FROM ${quote(table)} WHERE created_at >= ?`);
      const days: string[] = [];
      let from = '';
      for (;;) {
        const { at } = first.get(from) as { at: string | null };
        if (at === null) return days;
        const day = at.slice(0, 10);
        if (ISO_DAY.test(day)) {
          days.push(day);
          // The day with its last digit one higher sorts after every text that starts with
          // the day, and no later than the next day.
          from = `${day.slice(0, 9)}${String.fromCharCode(day.charCodeAt(9) + 1)}`;
        } else {
          // Not a time as the store writes it (no partition is made for it): on to the
          // next value, which sorts after this one and its NUL-extended self.
          from = `${at}\0`;
        }
      }
    },
    async consistently(fn) {
      // A read transaction: every table is read as of its first statement, whatever another
      // process commits meanwhile (WAL keeps that state for it).
      db.exec('BEGIN');
      try {
        db.prepare('SELECT count(*) FROM sqlite_schema').get();
        return await fn();
      } finally {
        db.exec('COMMIT');
      }
    },
  };
}
