/**
 * The log writer's thread (see log-writer.ts): its own connection to the store's file,
 * writing one batch per message, so SQLite's work (index updates, WAL checkpoints and
 * their fsync) happens beside the event loop that serves requests instead of on it.
 *
 * Messages in: a `LogBatch`, or `'close'`. Out: `{ ok: true }` or `{ ok: false, message }`
 * after each batch, in order.
 */
import { DatabaseSync } from 'node:sqlite';
import { parentPort, workerData } from 'node:worker_threads';
import { LogsRepository, type LogBatch } from '../store/logs.ts';

export interface ThreadData {
  readonly path: string;
}

export type ThreadReply = { ok: true } | { ok: false; message: string };

const port = parentPort;
if (port === null) throw new Error('log-writer-thread.ts runs as a worker thread');

const db = new DatabaseSync((workerData as ThreadData).path);
// Waiting for another connection's lock is harmless here: nothing else runs on this thread.
db.exec('PRAGMA busy_timeout = 5000');
// Same durability as the main connection (db.ts); the store is already in WAL mode.
db.exec('PRAGMA synchronous = NORMAL');
// The request_id indexes take random keys: a larger page cache keeps their inner pages in memory.
db.exec('PRAGMA cache_size = -16384');
const logs = new LogsRepository(db);

port.on('message', (message: LogBatch | 'close') => {
  if (message === 'close') {
    db.close();
    port.close();
    return;
  }
  let reply: ThreadReply;
  try {
    logs.insertBatch(message);
    reply = { ok: true };
  } catch (err) {
    reply = { ok: false, message: err instanceof Error ? err.message : String(err) };
  }
  port.postMessage(reply);
});
