/**
 * docs/operations.md against the code: every endpoint the runbook tells an operator to call
 * exists, every feature the code does not have yet is marked planned where the runbook
 * describes it, and replication (built) is described and linked to docs/replication.md.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildRouter } from '../../src/app.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOC = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');
const router = buildRouter();

/** Endpoints the runbook describes as planned (and so may not exist yet). */
const PLANNED_ENDPOINTS = new Set<string>();

/** `{a,b}` (shell brace expansion) → each alternative; `{id}`, `$ID` → a placeholder segment. */
function expand(path: string): string[] {
  const braces = /\{([^{}]*,[^{}]*)\}/.exec(path);
  if (braces !== null) {
    return (braces[1] ?? '').split(',').flatMap((alternative) => expand(path.replace(braces[0], alternative)));
  }
  return [path.replace(/\{[^{}]+\}|\$[A-Z_]+/g, 'x')];
}

/** `METHOD /api/...` in text, and the method and URL of each curl command. */
function documentedEndpoints(markdown: string): string[] {
  const found = new Set<string>();
  for (const m of markdown.matchAll(/\b(GET|POST|PUT|PATCH|DELETE) (\/api\/[^\s`"')]+)/g)) {
    for (const path of expand(m[2] ?? '')) found.add(`${m[1]} ${path}`);
  }
  for (const m of markdown.matchAll(/curl [^\n]*?(?:-X (GET|POST|PUT|PATCH|DELETE) )?"\$SVC(\/[^"]+)"/g)) {
    for (const path of expand(m[2] ?? '')) found.add(`${m[1] ?? 'GET'} ${path}`);
  }
  return [...found];
}

function routeExists(endpoint: string): boolean {
  const [method = '', path = ''] = endpoint.split(' ');
  try {
    router.find(method, path);
    return true;
  } catch {
    return false;
  }
}

/** The text of the `## title` section. */
function section(title: string): string {
  const start = DOC.indexOf(`\n## ${title}\n`);
  assert.notEqual(start, -1, `operations.md has no "## ${title}" section`);
  const end = DOC.indexOf('\n## ', start + 1);
  return DOC.slice(start, end === -1 ? undefined : end);
}

function source(path: string): string {
  return readFileSync(join(ROOT, 'src', path), 'utf8');
}

describe('docs/operations.md', () => {
  it('finds the endpoints the runbook calls', () => {
    const endpoints = documentedEndpoints(DOC);
    for (const expected of [
      'POST /api/v3/api-keys/x/revoke',
      'POST /api/v3/configurations/x/rotate',
      'PUT /api/v3/configurations/x',
      'POST /api/v3/encryption/payments/rewrap',
      'POST /api/v3/configurations/x/keys/1/destroy',
      'GET /api/v3/logs/usage',
    ]) {
      assert.ok(endpoints.includes(expected), expected);
    }
  });

  it('tells operators to call only endpoints that exist, or says they are planned', () => {
    const missing = documentedEndpoints(DOC).filter((endpoint) => !PLANNED_ENDPOINTS.has(endpoint) && !routeExists(endpoint));
    assert.deepEqual(missing, []);
    for (const endpoint of PLANNED_ENDPOINTS) {
      if (routeExists(endpoint)) continue;
      const path = endpoint.split(' ')[1]?.replace('/x/', '/{slug}/') ?? '';
      const paragraph = DOC.slice(Math.max(0, DOC.indexOf(path) - 200), DOC.indexOf(path));
      assert.match(paragraph, /Planned/, `${endpoint} is not built: the runbook must say it is planned`);
    }
  });

  it('lists every metric the service exports, and no other, or says metrics are planned', () => {
    const metricsSection = section('Metrics');
    if (!existsSync(join(ROOT, 'src', 'telemetry', 'metrics.ts'))) {
      assert.match(metricsSection, /## Metrics\n\n\*\*Planned\.\*\*/);
      return;
    }
    const exported = [...source('telemetry/metrics.ts').matchAll(/name: '(svc_[a-z_]+)'/g)].map((m) => m[1] ?? '');
    assert.ok(exported.length >= 5, 'metric names found in src/telemetry/metrics.ts');
    const documented = [...metricsSection.matchAll(/^\| `(svc_[a-z_]+)`/gm)].map((m) => m[1] ?? '');
    assert.deepEqual(exported.filter((name) => !documented.includes(name)), [], 'metrics missing from the table');
    assert.deepEqual(documented.filter((name) => !exported.includes(name)), [], 'documented metrics the service does not export');
    assert.doesNotMatch(metricsSection, /Planned/);
  });

  it('documents each keys subcommand the CLI has, or says the CLI is planned', () => {
    const cli = existsSync(join(ROOT, 'src', 'cli', 'keys.ts')) ? source('cli/keys.ts') : '';
    const subcommands = /SUBCOMMANDS = \[([^\]]*)\]/.exec(cli)?.[1]?.match(/[a-z]+/g) ?? [];
    if (subcommands.length === 0) {
      assert.match(DOC, /\*\*Planned CLI:\*\* `svc-sidecar keys/);
      return;
    }
    for (const sub of subcommands) assert.match(DOC, new RegExp(`node src/main\\.ts keys ${sub} `), `keys ${sub}`);
  });

  it('describes replication as built and links docs/replication.md', () => {
    assert.ok(existsSync(join(ROOT, 'docs', 'replication.md')), 'docs/replication.md exists');
    assert.match(DOC, /\]\(replication\.md(#[^)]*)?\)/, 'operations.md links replication.md');
    const scaling = section('Scaling out');
    assert.match(scaling, /\]\(replication\.md(#[^)]*)?\)/, '"Scaling out" links replication.md');
    for (const term of ['state.source: control-plane', 'poll_interval', '/api/v3/sync/snapshot']) {
      assert.ok(scaling.includes(term), `"Scaling out" names ${term}`);
    }
    assert.doesNotMatch(DOC, /\*\*Planned:?\*\*:? (?:the )?replication|replication \(planned/i, 'replication is built: not planned');
  });

  it('links only to sections of docs/replication.md that exist', () => {
    const slugs = new Set(
      [...readFileSync(join(ROOT, 'docs', 'replication.md'), 'utf8').matchAll(/^#{1,6} (.+)$/gm)].map((m) =>
        (m[1] ?? '')
          .toLowerCase()
          .replace(/[^\p{L}\p{N}\s_-]/gu, '')
          .replace(/ /g, '-'),
      ),
    );
    const anchors = [...DOC.matchAll(/\]\(replication\.md#([^)]+)\)/g)].map((m) => m[1] ?? '');
    assert.ok(anchors.length > 0, 'operations.md links sections of replication.md');
    assert.deepEqual(anchors.filter((anchor) => !slugs.has(anchor)), [], 'links to missing sections');
  });

  it('covers the runbook topics of issue 6', () => {
    for (const title of ['The master key', 'API keys', "Rotating a configuration's key", 'Backing up and restoring the store', 'Scaling out', 'Health and readiness', 'Metrics', 'Shutdown', 'Logs']) {
      assert.ok(section(title).length > 200, title);
    }
    assert.match(section('The master key'), /randomBytes\(32\)\.toString\('base64'\)/);
    assert.match(section('Backing up and restoring the store'), /PRAGMA integrity_check/);
    assert.match(section('Backing up and restoring the store'), /VACUUM INTO|\.backup/);
  });

  it('runs the control plane on PostgreSQL: configuration, backup with pg_dump, upgrade, what VACUUM must do', () => {
    const postgres = section('Running the control plane on PostgreSQL');
    for (const term of ['store.url', '${SVC_STORE_URL}', 'store.path', 'advisory lock', 'postgres.existingSecret', 'controlPlane.replicas', 'SVC_MASTER_KEY', 'pg_dump', 'pg_restore', 'VACUUM FULL data_keys']) {
      assert.ok(postgres.includes(term), `the section names ${term}`);
    }
    assert.match(postgres, /### Backing up and restoring the database\n/);
    assert.match(postgres, /### Upgrading on PostgreSQL\n/);
    // The message an operator sees is the one the code writes.
    const refusal = /`(The database's schema is version) N, (newer than this build knows) \(M\): (run a newer build\.)`/.exec(postgres);
    assert.ok(refusal !== null, 'quotes the refusal of a newer schema');
    const code = source('store/postgres/schema.ts');
    for (const part of refusal.slice(1)) assert.ok(code.includes(part), `src/store/postgres/schema.ts says "${part}"`);
    assert.ok(code.includes('pg_advisory_lock'), 'migrations do take an advisory lock');
    // The chart values the section tells operators to set exist.
    const chartValues = readFileSync(join(ROOT, 'helm', 'svc-sidecar', 'values.yaml'), 'utf8');
    for (const key of ['existingSecret', 'urlKey', 'replicas', 'minAvailable']) assert.match(chartValues, new RegExp(`^\\s+${key}:`, 'm'));
    assert.ok(postgres.includes('[Moving from SQLite to PostgreSQL](#moving-from-sqlite-to-postgresql)'), 'links the move by its heading');
    assert.ok(section('Scaling out').includes('](#running-the-control-plane-on-postgresql)'), '"Scaling out" points to it');
  });

  it('keeps the PostgreSQL section ahead of the one on moving from SQLite, wherever that lands', () => {
    const running = DOC.indexOf('\n## Running the control plane on PostgreSQL\n');
    assert.notEqual(running, -1);
    assert.ok(DOC.indexOf('\n## ', running + 1) !== -1, 'not the last section of the file');
    const moving = DOC.indexOf('\n## Moving from SQLite to PostgreSQL\n');
    if (moving !== -1) assert.ok(moving > running);
  });
});
