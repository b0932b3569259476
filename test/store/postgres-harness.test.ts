import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { postgresUnavailable, startPostgres } from '../support/postgres.ts';

const skip = postgresUnavailable() ?? false;

/** True while a process with `pid` exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test('a throwaway PostgreSQL: databases of their own, advisory locks across sessions, and nothing left after stop', { skip }, async (t) => {
  const pg = await startPostgres();
  t.after(() => pg.stop());
  assert.match(pg.url, /^postgres:\/\/svc@127\.0\.0\.1:\d+\/postgres$/);
  assert.match(await pg.psql('postgres', 'SHOW listen_addresses'), /^127\.0\.0\.1\n$/);

  // Two databases: what one holds, the other does not.
  assert.match(await pg.createDatabase('first'), /\/first$/);
  await pg.createDatabase('second');
  await pg.psql('first', 'CREATE TABLE t (id integer PRIMARY KEY); INSERT INTO t VALUES (1)');
  assert.equal(await pg.psql('first', 'SELECT count(*) FROM t'), '1\n');
  await assert.rejects(pg.psql('second', 'SELECT count(*) FROM t'), /relation "t" does not exist/);

  // An advisory lock held by one session is refused to another, and free once it ends.
  const holder = pg.psql('first', 'SELECT pg_advisory_lock(42); SELECT pg_sleep(1.5)');
  const granted = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 42 AND granted";
  while ((await pg.psql('first', granted)) !== '1\n') await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(await pg.psql('first', 'SELECT pg_try_advisory_lock(42)'), 'f\n', 'another session is refused');
  await holder;
  assert.equal(await pg.psql('first', 'SELECT pg_try_advisory_lock(42)'), 't\n', 'free once the holder has gone');

  const pid = pg.pid;
  const dir = pg.dir;
  assert.ok(alive(pid));
  await pg.stop();
  assert.equal(alive(pid), false, 'the server process is gone');
  assert.equal(existsSync(dir), false, 'its directory is gone');
});

test('names that are not plain identifiers are refused before they reach SQL', { skip }, async (t) => {
  const pg = await startPostgres();
  t.after(() => pg.stop());
  await assert.rejects(pg.createDatabase('x; DROP DATABASE postgres'), /not a database name/);
  await assert.rejects(pg.createDatabase('Upper'), /not a database name/);
});
