// The body of a SqlThread (sql-thread.ts): its own connection to a store file, running the
// statements it was given, so that SQLite's work runs beside the event loop that serves
// requests instead of on it.
//
// Plain JavaScript on purpose: a worker that loads a .ts file loads Node's TypeScript
// stripper into its own isolate, about 17 MB of memory per thread (measured on Node 24),
// for a file this small. The types of its messages live in sql-thread.ts.
//
// workerData: { path, statements: { name: sql } }
// Messages in, each answered in order with { ok: true, changes } or { ok: false, message }:
//   { op: 'write', runs: [[name, [params, ...]], ...] }
//       every row of every run, in one transaction (all or none); changes: rows written
//   { op: 'sweep', names: [name, ...], params: [...], chunk: n, stop: Int32Array }
//       each named statement repeated, one transaction each, until it changes fewer than
//       `chunk` rows or `stop[0]` is set; changes: rows changed per name
//   'close' closes the connection and lets the thread end.
import { DatabaseSync } from 'node:sqlite';
import { parentPort, workerData } from 'node:worker_threads';

const { path, statements } = workerData;
const db = new DatabaseSync(path);
// Waiting for another connection's lock is harmless here: nothing else runs on this thread.
db.exec('PRAGMA busy_timeout = 5000');
// The same durability as the main connection (open.ts); the file is already in WAL mode.
db.exec('PRAGMA synchronous = NORMAL');
const prepared = new Map(Object.entries(statements).map(([name, sql]) => [name, db.prepare(sql)]));

function statement(name) {
  const found = prepared.get(name);
  if (found === undefined) throw new Error(`unknown statement ${name}`);
  return found;
}

function transaction(fn) {
  db.exec('BEGIN IMMEDIATE');
  try {
    const result = fn();
    db.exec('COMMIT');
    return result;
  } catch (err) {
    // Some errors (SQLITE_FULL, SQLITE_IOERR) roll the transaction back themselves.
    if (db.isTransaction) db.exec('ROLLBACK');
    throw err;
  }
}

function write(runs) {
  return transaction(() => {
    let changes = 0;
    for (const [name, rows] of runs) {
      const insert = statement(name);
      for (const params of rows) changes += Number(insert.run(...params).changes);
    }
    return changes;
  });
}

function sweep({ names, params, chunk, stop }) {
  const changes = [];
  for (const name of names) {
    const remove = statement(name);
    let total = 0;
    for (;;) {
      if (Atomics.load(stop, 0) !== 0) break;
      const n = transaction(() => Number(remove.run(...params).changes));
      total += n;
      if (n < chunk) break;
    }
    changes.push(total);
  }
  return changes;
}

parentPort.on('message', (message) => {
  if (message === 'close') {
    db.close();
    parentPort.close();
    return;
  }
  try {
    const changes = message.op === 'write' ? write(message.runs) : sweep(message);
    parentPort.postMessage({ ok: true, changes });
  } catch (err) {
    parentPort.postMessage({ ok: false, message: err instanceof Error ? err.message : String(err) });
  }
});
