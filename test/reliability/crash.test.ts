/**
 * Crash consistency (issue 7, item 3): the real service, as a child process on a SQLite
 * file, is killed with SIGKILL at a random moment of a burst of concurrent writes
 * (classifications, API keys, key rotations, and encrypt traffic that fills the api and
 * usage logs), then restarted on the same file with the same master key. Cycles share one
 * store, so state accumulates across them.
 *
 * After every kill, before the restart: `PRAGMA integrity_check` and `foreign_key_check`
 * on the file the dead process left (its WAL included), and every log row is well formed.
 * After the restart: /readyz answers 200, every classification and API key the API
 * acknowledged is there (and each new key authenticates), the keyring holds every
 * acknowledged key version with no gaps, and every token captured before any kill still
 * decrypts to its plaintext.
 *
 * Logs are not acknowledged writes: they are queued in memory and written in batches
 * (src/telemetry/log-writer.ts), so a kill loses what was still queued — entries recorded
 * since the last batch (at most `logs.flush_interval`, 50 ms by default, or a full batch of
 * `logs.batch_size`, 500 per kind, waiting for the next turn of the event loop) plus the
 * one batch the writer thread had not committed yet; only if the store had been refusing
 * batches could it be more, up to `logs.queue_limit`. The test measures that loss exactly,
 * by request id, and asserts what is guaranteed: rows present are well formed, none is
 * written twice, and no count the API showed before the kill shrinks after it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { Agent, request } from 'undici';
import { startChild, type Child } from '../support/child.ts';
import { scaled } from './scale.ts';

const CYCLES = scaled(3, 20);
/** The kill lands this long (uniformly drawn) after every kind of write has been acknowledged once. */
const MAX_KILL_DELAY_MS = scaled(1200, 4000);
/** Requests in flight at once during a burst, by kind. */
const WORKERS = { classifications: 2, apiKeys: 1, rotations: 2, encrypts: 3 } as const;
const DECRYPT_CHUNK = 1000;

const OWNER = `svc_${'CrashOwner'.padEnd(40, '0')}`;
const YAML = `
seed:
  users:
    - { name: Crash Owner, email: crash@example.com, roles: [owner] }
  api_keys:
    - { name: crash-owner, user: crash@example.com, key: ${OWNER} }
  configurations:
    - { name: vault, proxy_slug: vault }
`;
const TOKEN_VERSION = /^svc:(\d+):/;
const LOG_KINDS = ['api', 'usage', 'activity'] as const;
type LogKind = (typeof LOG_KINDS)[number];

interface Reply {
  status: number;
  json: any;
}

async function send(agent: Agent, base: string, method: 'GET' | 'POST', path: string, options: { key?: string; body?: unknown; requestId?: string } = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'x-svc-authorization': options.key ?? OWNER };
  if (options.requestId !== undefined) headers['x-svc-request-id'] = options.requestId;
  let body: string | undefined;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  const res = await request(base + path, { method, headers, body, dispatcher: agent });
  // Acknowledged means the whole answer arrived, not just its status line.
  const text = await res.body.text();
  let json: unknown = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    // an unparsable body is reported through the status check of the caller
  }
  return { status: res.statusCode, json };
}

/** Everything acknowledged across all cycles: what must survive every later kill. */
interface Ledger {
  /** id → name */
  readonly classifications: Map<number, string>;
  readonly apiKeys: Array<{ id: string; key: string; cycle: number }>;
  /** Each acknowledged rotation's version, and a value encrypted after it. */
  readonly rotations: Array<{ version: number; token: string; plaintext: string }>;
  readonly tokens: Array<{ token: string; plaintext: string }>;
  /** The highest total each log list reported. */
  readonly observed: Record<LogKind, number>;
}

/** One cycle's burst: who is writing, and which request ids were acknowledged when. */
class Burst {
  readonly cycle: number;
  readonly base: string;
  readonly agent = new Agent({ connections: 16, headersTimeout: 60_000, bodyTimeout: 60_000 });
  readonly ledger: Ledger;
  readonly configurationId: string;
  stopped = false;
  seq = 0;
  /** request id → performance.now() when its answer had fully arrived, per log kind it must produce. */
  readonly acked: Record<LogKind, Map<string, number>> = { api: new Map(), usage: new Map(), activity: new Map() };
  readonly counts = { classifications: 0, apiKeys: 0, rotations: 0, encrypts: 0 };
  /** Non-2xx answers, or failures before the kill. */
  readonly unexpected: string[] = [];
  /** Tokens written with a key version older than one already acknowledged. */
  readonly staleTokens: string[] = [];

  constructor(cycle: number, base: string, ledger: Ledger, configurationId: string) {
    this.cycle = cycle;
    this.base = base;
    this.ledger = ledger;
    this.configurationId = configurationId;
  }

  nextId(): string {
    return `crash-c${this.cycle}-${++this.seq}`;
  }

  ack(requestId: string, kinds: readonly LogKind[]): void {
    const at = performance.now();
    for (const kind of kinds) this.acked[kind].set(requestId, at);
  }

  call(method: 'GET' | 'POST', path: string, requestId: string, body?: unknown): Promise<Reply> {
    return send(this.agent, this.base, method, path, { requestId, body });
  }

  expect(reply: Reply, status: number, what: string): boolean {
    if (reply.status === status) return true;
    this.unexpected.push(`${what}: ${reply.status} ${JSON.stringify(reply.json)}`);
    return false;
  }

  async createClassification(): Promise<void> {
    const rid = this.nextId();
    const name = `crash ${this.cycle}.${this.seq}`;
    const reply = await this.call('POST', '/api/v3/classifications', rid, { name, bg_color: '#112233', fg_color: '#ffffff' });
    if (!this.expect(reply, 201, 'create classification')) return;
    this.ack(rid, ['api', 'activity']);
    await this.ledger.classifications.set(reply.json.id, name);
    this.counts.classifications++;
  }

  async createApiKey(): Promise<void> {
    const rid = this.nextId();
    const reply = await this.call('POST', '/api/v3/api-keys', rid, { name: `crash-${this.cycle}-${this.seq}` });
    if (!this.expect(reply, 201, 'create API key')) return;
    this.ack(rid, ['api', 'activity']);
    this.ledger.apiKeys.push({ id: reply.json.id, key: reply.json.key, cycle: this.cycle });
    this.counts.apiKeys++;
  }

  async rotate(): Promise<void> {
    const rid = this.nextId();
    const reply = await this.call('POST', `/api/v3/configurations/${this.configurationId}/rotate`, rid);
    if (!this.expect(reply, 200, 'rotate')) return;
    this.ack(rid, ['api', 'activity']);
    const version = Number(valueOf(reply.json, 'key_version'));
    this.counts.rotations++;
    // A token written under the new version: if that version were lost, this value would be unreadable.
    const encrypted = await this.encrypt(`rotated ${this.cycle}.${this.seq}`);
    if (encrypted === null) return;
    if (tokenVersion(encrypted.token) < version) this.staleTokens.push(`${encrypted.token} after rotating to v${version}`);
    this.ledger.rotations.push({ version, ...encrypted });
  }

  async encryptTraffic(): Promise<void> {
    const encrypted = await this.encrypt(`plain ${this.cycle}.${this.seq} ${randomBytes(6).toString('hex')}`);
    if (encrypted !== null) this.ledger.tokens.push(encrypted);
  }

  async encrypt(plaintext: string): Promise<{ token: string; plaintext: string } | null> {
    const rid = this.nextId();
    const res = await request(`${this.base}/api/v3/encryption/vault/encrypt`, {
      method: 'POST',
      dispatcher: this.agent,
      headers: { 'x-svc-authorization': OWNER, 'x-svc-request-id': rid, 'x-svc-fields': 'v', 'content-type': 'application/json' },
      body: JSON.stringify({ v: plaintext }),
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) {
      this.unexpected.push(`encrypt: ${res.statusCode} ${text}`);
      return null;
    }
    this.ack(rid, ['api', 'usage']);
    this.counts.encrypts++;
    return { token: (JSON.parse(text) as { v: string }).v, plaintext };
  }

  /** Reads the log totals, as a client watching the logs would. */
  async probeLogs(): Promise<void> {
    for (const kind of LOG_KINDS) {
      const rid = this.nextId();
      const reply = await this.call('GET', `/api/v3/logs/${kind}?per_page=1`, rid);
      if (!this.expect(reply, 200, `logs/${kind}`)) return;
      this.ack(rid, ['api']);
      this.ledger.observed[kind] = Math.max(this.ledger.observed[kind], reply.json.total);
    }
  }

  /** Runs `step` until the burst stops; a failure is only expected once the kill is under way. */
  async loop(step: () => Promise<void>, pauseMs = 0): Promise<void> {
    while (!this.stopped) {
      try {
        await step();
      } catch (err) {
        if (!this.stopped) this.unexpected.push(`cycle ${this.cycle}: ${String(err)}`);
        return;
      }
      if (pauseMs > 0) await sleep(pauseMs);
    }
  }

  start(): Promise<void[]> {
    const loops: Array<Promise<void>> = [];
    for (let i = 0; i < WORKERS.classifications; i++) loops.push(this.loop(() => this.createClassification()));
    for (let i = 0; i < WORKERS.apiKeys; i++) loops.push(this.loop(() => this.createApiKey()));
    // Paused: every rotation makes the next encrypt rebuild a keyring of all versions so far.
    for (let i = 0; i < WORKERS.rotations; i++) loops.push(this.loop(() => this.rotate(), 20));
    for (let i = 0; i < WORKERS.encrypts; i++) loops.push(this.loop(() => this.encryptTraffic()));
    loops.push(this.loop(() => this.probeLogs(), 100));
    return Promise.all(loops);
  }

  everyKindAcknowledged(): boolean {
    const c = this.counts;
    return c.classifications > 0 && c.apiKeys > 0 && c.rotations > 0 && c.encrypts > 0 && this.ledger.observed.api > 0;
  }
}

function valueOf(configuration: { values: Array<{ key: string; value: string }> }, key: string): string | undefined {
  return configuration.values.find((v) => v.key === key)?.value;
}

function tokenVersion(token: string): number {
  const match = TOKEN_VERSION.exec(token);
  return match === null ? 0 : Number(match[1]);
}

async function waitReady(base: string, timeoutMs = 30_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const status = await fetch(`${base}/readyz`).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) return;
    if (performance.now() > deadline) throw new Error(`/readyz did not answer 200 in ${timeoutMs} ms (last ${status})`);
    await sleep(20);
  }
}

interface FileCheck {
  integrity: string;
  foreignKeyViolations: number;
  malformed: Record<LogKind, number>;
  duplicated: number;
  /** Acknowledged requests of the burst whose log row is not in the file. */
  lost: Record<LogKind, number>;
  /** How long before the kill the oldest lost entry had been acknowledged, ms. */
  lostMaxAgeMs: number;
  rows: Record<LogKind, number>;
}

const ISO_GLOB = "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'";
/** Rows that break what the writer promises, beyond what the STRICT NOT NULL schema enforces. */
const MALFORMED: Record<LogKind, string> = {
  api: `SELECT count(*) AS n FROM api_logs WHERE NOT (created_at GLOB ${ISO_GLOB} AND status_code BETWEEN 100 AND 599 AND method IN ('GET','POST','PUT','PATCH','DELETE','HEAD','OPTIONS') AND path LIKE '/%' AND duration_ms >= 0 AND request_id <> '')`,
  usage: `SELECT count(*) AS n FROM usage_logs WHERE NOT (created_at GLOB ${ISO_GLOB} AND field_count >= 0 AND bytes >= 0 AND request_id <> '' AND configuration_id <> '')`,
  activity: `SELECT count(*) AS n FROM activity_logs WHERE NOT (created_at GLOB ${ISO_GLOB} AND action <> '' AND description <> '')`,
};
const TABLE: Record<LogKind, string> = { api: 'api_logs', usage: 'usage_logs', activity: 'activity_logs' };

/** Reads the file the killed process left, WAL included, without writing to it (a recovery here would spare the service its own). */
function checkFile(path: string, burst: Burst, killedAt: number): FileCheck {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    const integrity = (db.prepare('PRAGMA integrity_check').all() as Array<{ integrity_check: string }>).map((r) => r.integrity_check).join('; ');
    const foreignKeyViolations = db.prepare('PRAGMA foreign_key_check').all().length;
    const malformed = { api: 0, usage: 0, activity: 0 };
    const lost = { api: 0, usage: 0, activity: 0 };
    const rows = { api: 0, usage: 0, activity: 0 };
    let duplicated = 0;
    let lostMaxAgeMs = 0;
    const prefix = `crash-c${burst.cycle}-%`;
    for (const kind of LOG_KINDS) {
      malformed[kind] = (db.prepare(MALFORMED[kind]).get() as { n: number }).n;
      rows[kind] = (db.prepare(`SELECT count(*) AS n FROM ${TABLE[kind]}`).get() as { n: number }).n;
      const written = db.prepare(`SELECT request_id AS id, count(*) AS n FROM ${TABLE[kind]} WHERE request_id LIKE ? GROUP BY request_id`).all(prefix) as Array<{ id: string; n: number }>;
      const present = new Set<string>();
      for (const row of written) {
        present.add(row.id);
        // Every burst request makes at most one row of each kind: more means a batch written twice.
        if (row.n > 1) duplicated += row.n - 1;
      }
      for (const [id, at] of burst.acked[kind]) {
        if (present.has(id)) continue;
        lost[kind]++;
        lostMaxAgeMs = Math.max(lostMaxAgeMs, killedAt - at);
      }
    }
    return { integrity, foreignKeyViolations, malformed, duplicated, lost, lostMaxAgeMs, rows };
  } finally {
    db.close();
  }
}

/** Every page of classifications, by id. */
async function allClassifications(agent: Agent, base: string): Promise<Map<number, string>> {
  const found = new Map<number, string>();
  for (let page = 1; ; page++) {
    const reply = await send(agent, base, 'GET', `/api/v3/classifications?per_page=100&sort=id&page=${page}`);
    assert.equal(reply.status, 200);
    for (const c of reply.json.data as Array<{ id: number; name: string }>) found.set(c.id, c.name);
    if (page >= reply.json.last_page) return found;
  }
}

async function inParallel<T>(items: readonly T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/** Everything acknowledged so far is served by the restarted process. */
async function verifyServed(agent: Agent, base: string, ledger: Ledger, configurationId: string, cycle: number, last: boolean): Promise<{ tokensChecked: number; keyVersions: number }> {
  const classifications = await allClassifications(agent, base);
  for (const [id, name] of ledger.classifications) assert.equal(classifications.get(id), name, `cycle ${cycle}: acknowledged classification ${id} (${name}) is missing`);

  const keys = await send(agent, base, 'GET', '/api/v3/api-keys');
  assert.equal(keys.status, 200);
  const listed = new Map((keys.json as Array<{ id: string; status: string }>).map((k) => [k.id, k.status]));
  for (const k of ledger.apiKeys) assert.equal(listed.get(k.id), 'active', `cycle ${cycle}: acknowledged API key ${k.id} is missing`);
  // A listed row could still carry a hash that no longer matches: each key must let its holder in.
  // This cycle's keys every time; all of them after the last kill.
  const toAuthenticate = last ? ledger.apiKeys : ledger.apiKeys.filter((k) => k.cycle === cycle);
  await inParallel(toAuthenticate, 8, async (k) => {
    const me = await send(agent, base, 'GET', '/api/v2/auth/userdetails', { key: k.key });
    assert.equal(me.status, 200, `cycle ${cycle}: acknowledged API key ${k.id} does not authenticate`);
  });

  const versions = await send(agent, base, 'GET', `/api/v3/configurations/${configurationId}/keys`);
  assert.equal(versions.status, 200);
  const held = new Map((versions.json as Array<{ version: number; status: string }>).map((k) => [k.version, k.status]));
  for (const r of ledger.rotations) {
    assert.ok(held.has(r.version), `cycle ${cycle}: acknowledged key version ${r.version} is lost`);
    assert.notEqual(held.get(r.version), 'destroyed');
  }
  // Versions are numbered max+1 inside one transaction: a gap would be a commit lost under a later one.
  const max = Math.max(...held.keys());
  assert.deepEqual([...held.keys()].sort((a, b) => a - b), Array.from({ length: max }, (_, i) => i + 1), `cycle ${cycle}: key versions have gaps`);
  const configuration = await send(agent, base, 'GET', `/api/v3/configurations/${configurationId}`);
  assert.equal(Number(valueOf(configuration.json, 'key_version')), max);

  const tokens = [...ledger.rotations, ...ledger.tokens];
  for (let i = 0; i < tokens.length; i += DECRYPT_CHUNK) {
    const chunk = tokens.slice(i, i + DECRYPT_CHUNK);
    const res = await request(`${base}/api/v3/encryption/vault/decrypt`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'x-svc-authorization': OWNER, 'content-type': 'application/json' },
      body: JSON.stringify({ t: chunk.map((c) => c.token) }),
    });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200, `cycle ${cycle}: tokens captured before a kill no longer decrypt: ${text.slice(0, 500)}`);
    assert.deepEqual((JSON.parse(text) as { t: string[] }).t, chunk.map((c) => c.plaintext));
  }

  for (const kind of LOG_KINDS) {
    const reply = await send(agent, base, 'GET', `/api/v3/logs/${kind}?per_page=1`);
    assert.equal(reply.status, 200);
    assert.ok(reply.json.total >= ledger.observed[kind], `cycle ${cycle}: ${kind} logs went from ${ledger.observed[kind]} rows to ${reply.json.total}`);
    ledger.observed[kind] = reply.json.total;
  }
  return { tokensChecked: tokens.length, keyVersions: max };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

test(`kill -9 during sustained writes, ${CYCLES} times on one store: the store opens intact and nothing acknowledged is lost`, { timeout: scaled(120_000, 1_800_000) }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-crash-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { SVC_MASTER_KEY: randomBytes(32).toString('base64') };
  const storePath = join(dir, 'svc.db');
  const verifier = new Agent({ connections: 8 });
  t.after(() => verifier.close());

  let child: Child = await startChild(t, YAML, env, [], { dir });
  await waitReady(child.url);
  const vault = await send(verifier, child.url, 'GET', '/api/v3/configurations?per_page=100');
  const configurationId = (vault.json.data as Array<{ id: string; name: string }>).find((c) => c.name === 'vault')!.id;

  const ledger: Ledger = { classifications: new Map(), apiKeys: [], rotations: [], tokens: [], observed: { api: 0, usage: 0, activity: 0 } };
  const totals = { classifications: 0, apiKeys: 0, rotations: 0, encrypts: 0 };
  const logLost = { api: 0, usage: 0, activity: 0 };
  const logAcked = { api: 0, usage: 0, activity: 0 };
  let logLostMaxCycle = 0;
  let lostMaxAgeMs = 0;
  const restartMs: number[] = [];
  const killDelays: number[] = [];
  let served = { tokensChecked: 0, keyVersions: 0 };

  for (let cycle = 1; cycle <= CYCLES; cycle++) {
    const burst = new Burst(cycle, child.url, ledger, configurationId);
    const running = burst.start();
    const warmUntil = performance.now() + 20_000;
    while (!burst.everyKindAcknowledged() && burst.unexpected.length === 0 && performance.now() < warmUntil) await sleep(5);
    assert.deepEqual(burst.unexpected, [], `cycle ${cycle}: failures before the kill`);
    assert.ok(burst.everyKindAcknowledged(), `cycle ${cycle}: some kind of write was never acknowledged`);
    const delay = Math.random() * MAX_KILL_DELAY_MS;
    killDelays.push(delay);
    await sleep(delay);

    burst.stopped = true;
    const exited = once(child.process, 'exit');
    child.process.kill('SIGKILL');
    const killedAt = performance.now();
    await exited;
    await running;
    await burst.agent.destroy();
    assert.deepEqual(burst.unexpected, [], `cycle ${cycle}: failures before the kill`);
    assert.deepEqual(burst.staleTokens, [], `cycle ${cycle}: a value was encrypted under a key version older than one already acknowledged`);

    const file = checkFile(storePath, burst, killedAt);
    assert.equal(file.integrity, 'ok', `cycle ${cycle}: integrity_check`);
    assert.equal(file.foreignKeyViolations, 0, `cycle ${cycle}: foreign_key_check`);
    assert.deepEqual(file.malformed, { api: 0, usage: 0, activity: 0 }, `cycle ${cycle}: malformed log rows`);
    assert.equal(file.duplicated, 0, `cycle ${cycle}: log rows written twice`);
    // Activity entries are written before the answer (src/api/activity.ts): an acknowledged
    // management write always has its audit entry. Data-plane entries are batched.
    assert.equal(file.lost.activity, 0, `cycle ${cycle}: acknowledged writes without their activity entry`);
    for (const kind of LOG_KINDS) {
      logLost[kind] += file.lost[kind];
      logAcked[kind] += burst.acked[kind].size;
    }
    logLostMaxCycle = Math.max(logLostMaxCycle, file.lost.api + file.lost.usage + file.lost.activity);
    lostMaxAgeMs = Math.max(lostMaxAgeMs, file.lostMaxAgeMs);
    for (const kind of Object.keys(totals) as Array<keyof typeof totals>) totals[kind] += burst.counts[kind];

    const restartFrom = performance.now();
    child = await startChild(t, YAML, env, [], { dir });
    await waitReady(child.url);
    restartMs.push(performance.now() - restartFrom);
    served = await verifyServed(verifier, child.url, ledger, configurationId, cycle, cycle === CYCLES);
    t.diagnostic(`cycle ${cycle}: killed ${Math.round(delay)} ms in; acknowledged ${JSON.stringify(burst.counts)}; log entries lost ${JSON.stringify(file.lost)}; restart ${Math.round(restartMs.at(-1)!)} ms`);
  }

  const exited = once(child.process, 'exit');
  child.process.kill('SIGKILL');
  await exited;

  console.log(
    `RELIABILITY ${JSON.stringify({
      part: 'crash',
      cycles: CYCLES,
      acknowledged: { classifications: totals.classifications, api_keys: totals.apiKeys, key_rotations: totals.rotations, encrypts: totals.encrypts },
      lost: { classifications: 0, api_keys: 0, key_versions: 0, undecryptable_tokens: 0 },
      integrity_check: 'ok',
      key_versions: served.keyVersions,
      tokens_decrypted_after_last_restart: served.tokensChecked,
      log_entries_acknowledged: logAcked,
      log_entries_lost: logLost,
      log_entries_lost_max_per_kill: logLostMaxCycle,
      log_lost_oldest_ms_before_kill: Math.round(lostMaxAgeMs),
      kill_delay_ms: { min: Math.round(Math.min(...killDelays)), max: Math.round(Math.max(...killDelays)) },
      restart_ms_median: Math.round(median(restartMs)),
      restart_ms_max: Math.round(Math.max(...restartMs)),
    })}`,
  );
});
