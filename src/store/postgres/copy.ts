/**
 * Writing a copied store into PostgreSQL (store/copy.ts): one transaction that checks the
 * database is empty, replaces the built-in roles and permissions with the source's, inserts
 * every table's rows with their ids in multi-row INSERTs, and moves each identity sequence
 * past the ids copied. A failure anywhere rolls all of it back.
 */
import pg from 'pg';
import { COPY_TABLES, CopyRefusedError, type CopiedTable, type CopyOptions, type CopySource } from '../copy.ts';
import { toParameter, types } from './executor.ts';
import { makeDayPartitions } from './partitions.ts';
import { PARTITIONED_LOG_TABLES } from './schema.ts';

/** PostgreSQL takes at most 65,535 parameters in one statement. */
const MAX_PARAMETERS = 65_535;
const DEFAULT_BATCH_ROWS = 1_000;
/** The migration's bookkeeping and the state version: they describe the database, not the store's rows. */
const OWN_TABLES = new Set(['svc_schema', 'svc_state']);
const DEFAULT_LOCK_TIMEOUT_MS = 10_000;
/** SQLSTATE lock_not_available: the lock timeout passed. */
const LOCK_NOT_AVAILABLE = '55P03';

const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`;

export async function copyIntoPostgres(url: string, source: CopySource, options: CopyOptions = {}): Promise<CopiedTable[]> {
  const client = new pg.Client({ connectionString: url, types });
  await client.connect();
  try {
    await client.query('BEGIN');
    try {
      const copied = await copyInTransaction(client, source, options);
      await client.query('COMMIT');
      return copied;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      if (error instanceof Error && (error as { code?: unknown }).code === LOCK_NOT_AVAILABLE) {
        throw new CopyRefusedError('another connection is using the target database (is a control plane running on it?): stop it and copy again');
      }
      throw error;
    }
  } finally {
    await client.end().catch(() => {});
  }
}

async function copyInTransaction(client: pg.Client, source: CopySource, options: CopyOptions): Promise<CopiedTable[]> {
  const batchRows = options.batchRows ?? DEFAULT_BATCH_ROWS;
  // SET takes no parameters; the value is an integer of ours.
  await client.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.trunc(options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS))}`);
  // A partitioned log table is one table here; its day partitions are where it keeps its rows.
  const targetTables = (
    await client.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname`,
    )
  ).rows
    .map((row) => row.name)
    .filter((name) => !OWN_TABLES.has(name));
  checkTables(targetTables, source.tables());

  // Nothing else writes while the copy runs: the emptiness checked next stays true until commit.
  await client.query(`LOCK TABLE ${COPY_TABLES.map((table) => quote(table.name)).join(', ')} IN EXCLUSIVE MODE`);
  const occupied: string[] = [];
  for (const table of COPY_TABLES) {
    if (table.builtIn === true) continue;
    const { rows } = await client.query<{ found: boolean }>(`SELECT EXISTS (SELECT 1 FROM ${quote(table.name)}) AS found`);
    if (rows[0]!.found) occupied.push(table.name);
  }
  if (occupied.length > 0) {
    throw new CopyRefusedError(`the target database already holds rows (in ${occupied.join(', ')}): copy only into a new, empty database`);
  }
  // Children first; the source's roles and permissions take their place with the same ids.
  for (const table of COPY_TABLES.filter((entry) => entry.builtIn === true).reverse()) await client.query(`DELETE FROM ${quote(table.name)}`);

  const copied: CopiedTable[] = [];
  for (const table of COPY_TABLES) {
    const columns = await targetColumns(client, table.name);
    checkColumns(table.name, columns, source.columns(table.name));
    if (isLogTable(table.name)) {
      // Each day of the rows gets its partition before they go in, while the DEFAULT
      // partition is empty: rows left there would be read through again as each later
      // day's partition is attached.
      await makeDayPartitions(client, table.name, source.days(table.name));
    }
    const size = Math.max(1, Math.min(batchRows, Math.floor(MAX_PARAMETERS / columns.length)));
    const head = `INSERT INTO ${quote(table.name)} (${columns.map(quote).join(', ')}) VALUES `;
    let rows = 0;
    for (const batch of source.batches(table.name, columns, table.order, size)) {
      const values: unknown[] = [];
      const tuples: string[] = [];
      for (const row of batch) {
        const start = values.length;
        tuples.push(`(${row.map((_, i) => `$${start + i + 1}`).join(', ')})`);
        for (const value of row) values.push(toParameter(value));
      }
      await client.query(head + tuples.join(', '), values);
      rows += batch.length;
    }
    copied.push({ table: table.name, rows });
  }

  // New rows must get new ids: every identity sequence moves past the highest id copied
  // (or handed out before, where the source remembers it). `seq` columns were generated
  // by these inserts and are past their rows already.
  const identities = (
    await client.query<{ table_name: string; column_name: string }>(
      `SELECT table_name, column_name FROM information_schema.columns
       WHERE table_schema = current_schema() AND is_identity = 'YES' AND column_name <> 'seq' ORDER BY table_name`,
    )
  ).rows.filter((row) => !OWN_TABLES.has(row.table_name));
  for (const { table_name: table, column_name: column } of identities) {
    if (column !== 'id') throw new Error(`store copy: identity column ${table}.${column} is not one this build knows how to carry over`);
    const highest = source.highestId(table);
    await client.query(
      `SELECT setval(pg_get_serial_sequence($1, 'id'), greatest($2::bigint, coalesce(max(id), 0), 1), greatest($2::bigint, coalesce(max(id), 0)) > 0) FROM ${quote(table)}`,
      [quote(table), highest],
    );
  }
  return copied;
}

function isLogTable(name: string): name is (typeof PARTITIONED_LOG_TABLES)[number] {
  return (PARTITIONED_LOG_TABLES as readonly string[]).includes(name);
}

/** Both stores must have exactly the tables this build copies: a table left out would be lost without a word. */
function checkTables(target: readonly string[], source: readonly string[]): void {
  const known = new Set(COPY_TABLES.map((table) => table.name));
  const unknown = [...new Set([...target, ...source])].filter((name) => !known.has(name));
  if (unknown.length > 0) throw new Error(`store copy does not know the table(s) ${unknown.join(', ')}: run the copy with the build that made the stores`);
  const missing = COPY_TABLES.map((table) => table.name).filter((name) => !target.includes(name) || !source.includes(name));
  if (missing.length > 0) throw new Error(`store copy: table(s) ${missing.join(', ')} missing from ${target.length < source.length ? 'the target' : 'the source'}`);
}

async function targetColumns(client: pg.Client, table: string): Promise<string[]> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT column_name AS name FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = $1 AND column_name <> 'seq' ORDER BY ordinal_position`,
    [table],
  );
  return rows.map((row) => row.name);
}

function checkColumns(table: string, target: readonly string[], source: readonly string[]): void {
  const onlyTarget = target.filter((name) => !source.includes(name));
  const onlySource = source.filter((name) => !target.includes(name));
  if (onlyTarget.length > 0 || onlySource.length > 0) {
    const parts = [
      onlySource.length > 0 ? `only the source has ${onlySource.join(', ')}` : '',
      onlyTarget.length > 0 ? `only the target has ${onlyTarget.join(', ')}` : '',
    ].filter((part) => part !== '');
    throw new Error(`store copy: the columns of ${table} differ between the stores (${parts.join('; ')})`);
  }
}
