import pg from 'pg';
import { ApiKeysRepository } from '../api-keys.ts';
import { ClassificationsRepository } from '../classifications.ts';
import { ConfigurationsRepository } from '../configurations.ts';
import { StoreUnavailableError } from '../../errors.ts';
import { ConcurrentSavepointError, TransactionEndedError, UnawaitedCallError, type Store, type Transaction } from '../db.ts';
import { LoginFailuresRepository } from '../login-failures.ts';
import { LogsRepository } from '../logs.ts';
import { MetaRepository } from '../meta.ts';
import { ReplicationRepository } from '../replication.ts';
import { RolesRepository } from '../roles.ts';
import { ShippedLogsRepository } from '../shipped-logs.ts';
import { StateRowsRepository } from '../state-rows.ts';
import { TokenRevocationsRepository } from '../token-revocations.ts';
import { UsersRepository } from '../users.ts';
import { prepareState } from '../state-view.ts';
import { inTransaction, PostgresExecutor, storeError, types, unreachable } from './executor.ts';
import { migratePostgres } from './schema.ts';
import { redactedUrl } from './url.ts';

/** How often the state version is read, besides the notifications that announce it. */
const STATE_POLL_MS = 500;
/** How soon a lost listening connection is made again, doubling up to the second bound. */
const LISTEN_RETRY_MS = 1_000;
const LISTEN_RETRY_MAX_MS = 30_000;
/** One instance of each repository: they hold no state, so every executor drives the same ones. */
function repositories() {
  return {
    roles: new RolesRepository(),
    users: new UsersRepository(),
    configurations: new ConfigurationsRepository(),
    apiKeys: new ApiKeysRepository(),
    classifications: new ClassificationsRepository(),
    logs: new LogsRepository(),
    tokenRevocations: new TokenRevocationsRepository(),
    loginFailures: new LoginFailuresRepository(),
    replication: new ReplicationRepository(),
    shippedLogs: new ShippedLogsRepository(),
    stateRows: new StateRowsRepository(),
    meta: new MetaRepository(),
  };
}

type Driven = Omit<Transaction, 'transaction'>;

function drive(executor: PostgresExecutor, repos: ReturnType<typeof repositories>): Driven {
  const out: Record<string, unknown> = {};
  for (const [name, repository] of Object.entries(repos)) out[name] = executor.drive(repository);
  return out as Driven;
}

export interface PostgresStoreOptions {
  /** Connections in the pool (default 10). */
  readonly max?: number;
  /**
   * false: follow the state version by the poll alone, without a listening connection (as
   * behind a pooler that cannot keep one); changes then arrive within STATE_POLL_MS.
   */
  readonly notifications?: boolean;
}

/**
 * Opens the store on the PostgreSQL database at `url` and migrates it to the newest schema
 * (once, under an advisory lock, however many instances start together). Every instance on
 * the database sees the others' writes within STATE_POLL_MS through the state version.
 */
export async function openPostgresStore(url: string, options: PostgresStoreOptions = {}): Promise<Store> {
  const pool = new pg.Pool({ connectionString: url, max: options.max ?? 10, types });
  // A client that loses its connection must not take the process down: idle, the pool
  // drops it; checked out, the query it runs fails and the caller answers for that.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  let created: boolean;
  try {
    created = (await migratePostgres(pool)).from === 0;
    // Today's log partitions and the next days', before the first row of them arrives;
    // retention makes them again as the days go (postgres/partitions.ts). No state table
    // is written.
    await new PostgresExecutor(pool, null, () => {}).run(new LogsRepository().preparePartitions());
  } catch (error) {
    await pool.end();
    // Said with the database it tried (without the password), which the driver's own words
    // ("connect ECONNREFUSED 127.0.0.1:5432") leave out.
    const cause = error instanceof StoreUnavailableError ? error.cause : error;
    if (unreachable(cause)) throw new Error(`cannot reach the store's database at ${redactedUrl(url)}: ${(cause as Error).message}`, { cause });
    throw error;
  }

  let generation = 0;
  let version = -1;
  let closed = false;
  /** The state version has reached `now`: the stamp moves once per version, however it is learnt. */
  const reached = (now: number): void => {
    if (now > version) {
      version = now;
      generation++;
    }
  };
  const readVersion = async (): Promise<void> => {
    const { rows } = await pool.query<{ version: number }>('SELECT version FROM svc_state WHERE id = 1');
    reached(rows[0]?.version ?? 0);
  };
  /**
   * After a write of this instance to the state has committed: the version it made is read
   * at once (the stamp must move before the writer goes on, not when the notice comes) and
   * the view rebuilt. If the version cannot be read, the stamp moves anyway.
   */
  const followWrite = async (): Promise<void> => {
    await readVersion().catch(() => {
      generation++;
    });
    await prepareState(store);
  };
  // Another instance's commit is announced at once; the poll covers what the listening
  // connection misses, and while it is lost it is made again, a little later each time.
  let listener: pg.Client | null = null;
  let relisten: NodeJS.Timeout | null = null;
  const listen = async (): Promise<void> => {
    const client = new pg.Client({ connectionString: url, types });
    client.on('error', () => {});
    client.on('notification', (message) => {
      const announced = Number(message.payload);
      if (Number.isSafeInteger(announced)) reached(announced);
    });
    try {
      await client.connect();
      await client.query('LISTEN svc_state');
    } catch (error) {
      await client.end().catch(() => {});
      throw error;
    }
    listener = client;
    client.once('end', () => {
      if (listener === client) listener = null;
      listenAgain(LISTEN_RETRY_MS);
    });
  };
  const listenAgain = (delay: number): void => {
    if (closed || relisten !== null) return;
    relisten = setTimeout(() => {
      relisten = null;
      // Whatever was announced meanwhile is caught up by reading the version.
      listen().then(
        () => readVersion().catch(() => {}),
        () => listenAgain(Math.min(delay * 2, LISTEN_RETRY_MAX_MS)),
      );
    }, delay);
    relisten.unref();
  };
  try {
    await readVersion();
    if (options.notifications !== false) await listen();
  } catch (error) {
    closed = true;
    await pool.end();
    throw storeError(error);
  }
  const poll = setInterval(() => {
    readVersion().catch(() => {});
  }, STATE_POLL_MS);
  poll.unref();

  // A state write through this instance is followed up by `afterStateWrite` (below), which
  // its caller awaits.
  const executor = new PostgresExecutor(pool, null, () => {});
  const repos = repositories();

  /**
   * A transaction on its own client; nested ones are savepoints, one at a time. `wrote` is
   * told of every write to the state tables, for the commit to announce.
   */
  const begin = async <T>(client: pg.PoolClient, depth: number, wrote: () => void, fn: (tx: Transaction) => Promise<T>): Promise<T> => {
    let ended = false;
    let inner = false;
    const repositoriesOf = drive(executor.within(client, wrote), repos);
    // Calls not yet answered. One still running when the callback returns (a call not
    // awaited) would otherwise run after the commit, on a client handed to someone else.
    const running = new Set<Promise<unknown>>();
    const guard = <R>(run: () => Promise<R>): Promise<R> => {
      if (ended) return Promise.reject(new TransactionEndedError());
      const call = run();
      running.add(call);
      call.then(
        () => running.delete(call),
        () => running.delete(call),
      );
      return call;
    };
    const handle: Record<string, unknown> = {};
    for (const [name, repository] of Object.entries(repositoriesOf)) {
      const methods: Record<string, (...args: unknown[]) => Promise<unknown>> = {};
      for (const [key, method] of Object.entries(repository as Record<string, (...args: unknown[]) => Promise<unknown>>)) {
        methods[key] = (...args) => guard(() => method(...args));
      }
      handle[name] = Object.freeze(methods);
    }
    handle['lock'] = (key: string): Promise<void> =>
      guard(async () => {
        await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [key]);
      });
    handle['transaction'] = <N>(nested: (tx: Transaction) => Promise<N>): Promise<N> =>
      guard(async () => {
        if (inner) throw new ConcurrentSavepointError();
        inner = true;
        const name = `svc_tx_${depth + 1}`;
        await client.query(`SAVEPOINT ${name}`);
        try {
          const value = await begin(client, depth + 1, wrote, nested);
          await client.query(`RELEASE SAVEPOINT ${name}`);
          return value;
        } catch (error) {
          await client.query(`ROLLBACK TO SAVEPOINT ${name}`);
          await client.query(`RELEASE SAVEPOINT ${name}`);
          throw error;
        } finally {
          inner = false;
        }
      });
    try {
      const value = await fn(handle as Transaction);
      if (running.size > 0) {
        await Promise.allSettled([...running]);
        throw new UnawaitedCallError();
      }
      return value;
    } finally {
      ended = true;
    }
  };

  const store: Store = {
    kind: 'postgres',
    path: redactedUrl(url),
    created,
    ...drive(executor, repos),
    async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
      let wroteState = false;
      const value = await inTransaction(pool, (client) => begin(client, 0, () => (wroteState = true), fn));
      if (wroteState) await followWrite();
      return value;
    },
    changeStamp: () => generation,
    othersCommitStamp: () => version,
    async ping() {
      await pool.query('SELECT 1');
    },
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(poll);
      if (relisten !== null) clearTimeout(relisten);
      const last = listener as pg.Client | null;
      listener = null;
      await last?.end().catch(() => {});
      await pool.end();
    },
  };
  // A write through the store resolves once the state view includes it, so whatever the
  // caller reads next (the response it presents, the next request) sees the write.
  executor.afterStateWrite = followWrite;
  return store;
}
