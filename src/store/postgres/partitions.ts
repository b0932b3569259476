/**
 * The day partitions of the log tables (schema.ts, PARTITIONED_LOG_TABLES): made ahead,
 * and dropped whole by retention. The driver runs these for the `prepare-log-partitions`
 * and `drop-log-partitions` steps (query.ts), inside a transaction.
 *
 * Why a driver step and not statements in the logs repository: the work is DDL whose
 * table names and bounds are built from the day, reads PostgreSQL's catalogs, and has no
 * SQLite counterpart at all; the repository says what it means (make today's partitions,
 * drop what is past retention) and keeps the one retention logic for both databases.
 *
 * Both steps take one transaction-scoped advisory lock first, so instances doing them at
 * the same time (each opening the store, each running retention) take turns, and the one
 * that comes second finds the work done.
 */
import type { PoolClient } from 'pg';
import { PARTITIONED_LOG_TABLES } from './schema.ts';

/** Days after today whose partitions exist ahead, so that a day never starts in the DEFAULT partition. */
export const PARTITION_DAYS_AHEAD = 3;

const PARTITION_LOCK = 'svc_log_partitions';
const LOCK_TIMEOUT_MS = 5_000;
const DAY_MS = 24 * 60 * 60 * 1000;

type Client = Pick<PoolClient, 'query'>;

interface Partition {
  readonly name: string;
  /** The range's lower bound (inclusive) and upper bound (exclusive); null for DEFAULT. */
  readonly from: string | null;
  readonly to: string | null;
}

const RANGE = /^FOR VALUES FROM \('([^']*)'\) TO \('([^']*)'\)$/;

/** The partitions of `table`, as the catalog has them. */
async function partitionsOf(client: Client, table: string): Promise<Partition[]> {
  const { rows } = await client.query<{ name: string; bound: string }>(
    `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = CAST(to_regclass($1) AS oid)`,
    [table],
  );
  return rows.map(({ name, bound }) => {
    const range = RANGE.exec(bound);
    return { name, from: range?.[1] ?? null, to: range?.[2] ?? null };
  });
}

/** A day as partitions name it: `YYYY-MM-DD` (five-digit years and the like never reach a table name or a bound). */
const DAY = /^\d{4}-\d{2}-\d{2}$/;

/** Whether `text` is a day of the calendar written as DAY. */
function isDay(text: string): boolean {
  const time = DAY.test(text) ? Date.parse(`${text}T00:00:00.000Z`) : Number.NaN;
  return !Number.isNaN(time) && new Date(time).toISOString().startsWith(text);
}

/** `YYYY-MM-DD` of the UTC day `days` after the one holding `at`. */
function dayText(at: number, days: number): string {
  const text = new Date(Math.floor(at / DAY_MS) * DAY_MS + days * DAY_MS).toISOString().slice(0, 10);
  if (!DAY.test(text)) throw new RangeError(`No day partition for ${text}`);
  return text;
}

const quoted = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/**
 * Waits for the other instances' partition work, then bounds this one's waits for table
 * locks: DDL on a log table queues every later read and write of it behind its lock
 * request, so one stuck behind a long transaction gives up (and is tried again at the
 * next retention run) rather than stall the logs. Inside a caller's transaction the bound
 * holds for the rest of it.
 */
async function lockPartitions(client: Client): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [PARTITION_LOCK]);
  await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT_MS}ms'`);
}

/**
 * Makes the partitions of the day of `at` and of the PARTITION_DAYS_AHEAD days after it,
 * for every log table, where they do not exist yet; answers the names made.
 */
export async function prepareLogPartitions(client: Client, at: string): Promise<string[]> {
  const time = new Date(at).getTime();
  if (Number.isNaN(time)) throw new RangeError(`Not a timestamp: ${at}`);
  await lockPartitions(client);
  const days = Array.from({ length: PARTITION_DAYS_AHEAD + 1 }, (_, day) => dayText(time, day));
  const made: string[] = [];
  for (const table of PARTITIONED_LOG_TABLES) made.push(...(await makeDayPartitions(client, table, days)));
  return made;
}

/**
 * Makes the partitions of `table` (a log table) for `days` (`YYYY-MM-DD`; others are left
 * out) that it does not have yet, inside the caller's transaction and locks; answers the
 * names made.
 *
 * A day's rows may already sit in the DEFAULT partition (a store that was down when the
 * day began, or a replica whose clock runs ahead): PostgreSQL refuses a new partition
 * while its default partition holds rows of the new range. So a partition is made as a
 * table of its own, those rows move into it, and it is attached then (attaching reads the
 * DEFAULT partition through, to check it holds no more of them). Moving them also keeps
 * a retried shipped batch landing once: the row it repeats is where the retry goes.
 */
export async function makeDayPartitions(client: Client, table: (typeof PARTITIONED_LOG_TABLES)[number], days: Iterable<string>): Promise<string[]> {
  const partitions = await partitionsOf(client, table);
  const fallback = partitions.find((partition) => partition.from === null);
  const starts = new Set(partitions.map((partition) => partition.from));
  const made: string[] = [];
  for (const from of days) {
    if (!isDay(from) || starts.has(from)) continue;
    starts.add(from);
    const to = dayText(Date.parse(`${from}T00:00:00.000Z`), 1);
    const name = `${table}_p${from.replaceAll('-', '')}`;
    await client.query(`CREATE TABLE ${name} (LIKE ${table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
    if (fallback !== undefined) {
      await client.query(
        `WITH moved AS (DELETE FROM ${quoted(fallback.name)} WHERE created_at >= $1 AND created_at < $2 RETURNING *) INSERT INTO ${name} SELECT * FROM moved`,
        [from, to],
      );
    }
    // The bounds are day texts checked above: DDL takes no parameters.
    await client.query(`ALTER TABLE ${table} ATTACH PARTITION ${name} FOR VALUES FROM ('${from}') TO ('${to}')`);
    made.push(name);
  }
  return made;
}

/**
 * Drops the partitions of `table` (one of the log tables) whose range ends at or before
 * `before`: every row they hold was created before it. Answers how many rows went, as a
 * row-by-row delete would have; 0 for a table that is not partitioned.
 *
 * Each partition is detached before it is counted: from then on no insert reaches it
 * (a late row of that day lands in DEFAULT, where the row-by-row delete that follows
 * finds it), so the count is the rows dropped. DETACH holds the parent table's lock to
 * the end of the transaction, so readers and writers of that log wait for one count of a
 * day's partition (an index-only scan).
 */
export async function dropLogPartitions(client: Client, table: string, before: string): Promise<number> {
  if (!(PARTITIONED_LOG_TABLES as readonly string[]).includes(table)) return 0;
  await lockPartitions(client);
  let rows = 0;
  for (const partition of await partitionsOf(client, table)) {
    if (partition.to === null || partition.to > before) continue;
    const name = quoted(partition.name);
    await client.query(`ALTER TABLE ${table} DETACH PARTITION ${name}`);
    const { rows: counted } = await client.query<{ n: number | string }>(`SELECT count(*) AS n FROM ${name}`);
    rows += Number(counted[0]?.n ?? 0);
    await client.query(`DROP TABLE ${name}`);
  }
  return rows;
}
