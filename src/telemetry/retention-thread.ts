/**
 * One retention run on a worker thread (see retention.ts), with its own connection to the
 * store's file: deleting an hour of a busy instance's logs is minutes of SQLite work, none
 * of which should run on the event loop that serves requests.
 *
 * workerData: the store path, the cutoff and a shared stop flag checked between chunks.
 * Posts `{ deleted }` (rows per kind) or `{ error }` once, then exits.
 */
import { DatabaseSync } from 'node:sqlite';
import { parentPort, workerData } from 'node:worker_threads';
import { DELETE_CHUNK, LOG_KINDS, LogsRepository, type LogKind } from '../store/logs.ts';

export interface RetentionThreadData {
  readonly path: string;
  readonly cutoff: string;
  /** Int32Array over a SharedArrayBuffer; non-zero means stop after the current chunk. */
  readonly stop: Int32Array;
}

export type RetentionThreadReply = { deleted: Record<LogKind, number> } | { error: string };

const port = parentPort;
if (port === null) throw new Error('retention-thread.ts runs as a worker thread');
const { path, cutoff, stop } = workerData as RetentionThreadData;

let reply: RetentionThreadReply;
const db = new DatabaseSync(path);
try {
  // Waiting on the log writer's lock is harmless on this thread.
  db.exec('PRAGMA busy_timeout = 5000');
  db.exec('PRAGMA synchronous = NORMAL');
  const logs = new LogsRepository(db);
  const deleted: Record<LogKind, number> = { activity: 0, api: 0, usage: 0 };
  sweep: for (const kind of LOG_KINDS) {
    for (;;) {
      if (Atomics.load(stop, 0) !== 0) break sweep;
      const n = logs.deleteChunkOlderThan(kind, cutoff);
      deleted[kind] += n;
      if (n < DELETE_CHUNK) break;
    }
  }
  reply = { deleted };
} catch (err) {
  reply = { error: err instanceof Error ? err.message : String(err) };
} finally {
  db.close();
}
port.postMessage(reply);
