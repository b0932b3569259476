/**
 * docs/configuration.md against the schema it documents (src/config/schema.ts): every key
 * of the schema has a row, every row is a key of the schema, the defaults written there are
 * the schema's own, and the examples load.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';
import { loadConfig } from '../../src/config/load.ts';
import { configSchema } from '../../src/config/schema.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOC = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8');

// ---------------------------------------------------------------------------------------
// The schema's keys, read from zod's definitions.

interface SchemaNode {
  readonly _zod: { readonly def: SchemaDef };
}

interface SchemaDef {
  readonly type: string;
  readonly shape?: Readonly<Record<string, SchemaNode>>;
  readonly element?: SchemaNode;
  readonly innerType?: SchemaNode;
  readonly in?: SchemaNode;
  readonly out?: SchemaNode;
  readonly options?: readonly SchemaNode[];
}

const WRAPPERS = new Set(['optional', 'default', 'prefault', 'nullable', 'nonoptional', 'readonly', 'catch']);

/** Dotted key paths, `[]` for list items: `seed.users[].email`. */
function schemaKeys(node: SchemaNode, prefix = '', out = new Set<string>()): Set<string> {
  const def = node._zod.def;
  if (def.type === 'object') {
    for (const [key, child] of Object.entries(def.shape ?? {})) {
      const path = prefix === '' ? key : `${prefix}.${key}`;
      out.add(path);
      schemaKeys(child, path, out);
    }
  } else if (def.type === 'array' && def.element !== undefined) {
    schemaKeys(def.element, `${prefix}[]`, out);
  } else if (WRAPPERS.has(def.type) && def.innerType !== undefined) {
    schemaKeys(def.innerType, prefix, out);
  } else if (def.type === 'pipe') {
    // z.preprocess and .transform: the object may sit on either side.
    if (def.in !== undefined) schemaKeys(def.in, prefix, out);
    if (def.out !== undefined) schemaKeys(def.out, prefix, out);
  } else if (def.type === 'union') {
    for (const option of def.options ?? []) schemaKeys(option, prefix, out);
  } else {
    // A leaf. Any other kind of wrapper would hide keys from this walk: teach it.
    const hidden = def.shape ?? def.element ?? def.innerType ?? def.in ?? def.options;
    assert.equal(hidden, undefined, `schemaKeys does not know zod type "${def.type}" at ${prefix}`);
  }
  return out;
}

const SCHEMA_KEYS = schemaKeys(configSchema as unknown as SchemaNode);

// ---------------------------------------------------------------------------------------
// The document's reference rows: | `key` | type | default | meaning |

interface Row {
  readonly key: string;
  readonly type: string;
  readonly defaultCell: string;
  readonly meaning: string;
}

function referenceRows(markdown: string): Row[] {
  const rows: Row[] = [];
  for (const line of markdown.split('\n')) {
    const match = /^\|\s*`([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)*)`\s*\|(.*)\|\s*$/.exec(line);
    if (match === null) continue;
    const cells = (match[2] ?? '').split('|').map((cell) => cell.trim());
    assert.equal(cells.length, 3, `expected | key | type | default | meaning | in: ${line}`);
    const [type = '', defaultCell = '', meaning = ''] = cells;
    rows.push({ key: match[1] ?? '', type, defaultCell, meaning });
  }
  return rows;
}

const ROWS = referenceRows(DOC);
const ROW_BY_KEY = new Map(ROWS.map((row) => [row.key, row]));

/** The default cell as a YAML value, when it is exactly one `code` span. */
function documentedDefault(row: Row): { value: unknown } | undefined {
  const match = /^`([^`]+)`$/.exec(row.defaultCell);
  return match === null ? undefined : { value: parse(match[1] ?? '') as unknown };
}

function lookup(tree: unknown, path: readonly string[]): unknown {
  let node = tree;
  for (const key of path) {
    if (typeof node !== 'object' || node === null) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

function setIn(tree: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = tree;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string, unknown>;
  node[path.at(-1) ?? ''] = value;
}

/** Sections that cannot be present without some keys. */
const REQUIRED_SIBLINGS: Readonly<Record<string, Record<string, unknown>>> = {
  relay: { listen: '127.0.0.1:0', upstream: 'http://127.0.0.1:3000' },
  'relay.protect': { keys: ['ssn'], configuration: 'payments' },
  'relay.identity': { jwt: { jwks_url: 'https://login.example.com/certs' } },
  'relay.identity.jwt': { jwks_url: 'https://login.example.com/certs' },
  egress_proxy: { listen: '127.0.0.1:0' },
};

/** The sections on `path`, each with only what it requires (and the seed that names refer to). */
function requiredSections(path: readonly string[]): Record<string, unknown> {
  const root: Record<string, unknown> = path[0] === 'relay' ? { seed: { configurations: [{ name: 'payments' }] } } : {};
  let node = root;
  for (let i = 0; i < path.length; i++) {
    const child = { ...REQUIRED_SIBLINGS[path.slice(0, i + 1).join('.')] };
    node[path[i]!] = child;
    node = child;
  }
  return root;
}

const DEFAULTS = loadConfig({ text: '', env: {} });

// ---------------------------------------------------------------------------------------

describe('the schema walk', () => {
  it('finds the keys of every level, lists included', () => {
    for (const key of ['server', 'server.listen', 'state.control_plane.poll_interval', 'seed.users[].email', 'seed.classifications[].providers[].gws_groups[].id', 'relay.routes[].match.method', 'egress[].request.decrypt']) {
      assert.ok(SCHEMA_KEYS.has(key), key);
    }
    assert.ok(SCHEMA_KEYS.size > 100);
  });
});

describe('docs/configuration.md', () => {
  it('has a row for every key of the schema', () => {
    const missing = [...SCHEMA_KEYS].filter((key) => !ROW_BY_KEY.has(key));
    assert.deepEqual(missing, [], 'keys of src/config/schema.ts without a row in docs/configuration.md');
  });

  it('has a row for every top-level and second-level key of the loaded default configuration', () => {
    for (const [section, value] of Object.entries(DEFAULTS)) {
      assert.ok(ROW_BY_KEY.has(section), section);
      if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
        for (const key of Object.keys(value)) assert.ok(ROW_BY_KEY.has(`${section}.${key}`), `${section}.${key}`);
      }
    }
  });

  it('documents no key the schema does not have', () => {
    const stale = ROWS.map((row) => row.key).filter((key) => !SCHEMA_KEYS.has(key));
    assert.deepEqual(stale, [], 'rows for keys that src/config/schema.ts does not accept');
  });

  it('documents each key once, with a type, a default and a meaning', () => {
    assert.equal(ROW_BY_KEY.size, ROWS.length, 'a key has two rows');
    for (const row of ROWS) {
      assert.notEqual(row.type, '', `${row.key}: type`);
      assert.notEqual(row.defaultCell, '', `${row.key}: default`);
      assert.ok(row.meaning.length > 5, `${row.key}: meaning`);
    }
  });

  it('gives the schema default of every key outside lists that has one', () => {
    for (const key of SCHEMA_KEYS) {
      if (key.includes('[]')) continue;
      const value = lookup(DEFAULTS, key.split('.'));
      const isSection = typeof value === 'object' && value !== null && !Array.isArray(value);
      if (value === undefined || isSection) continue;
      const row = ROW_BY_KEY.get(key);
      assert.ok(row !== undefined && documentedDefault(row) !== undefined, `${key}: the default should be written as one \`value\` (schema: ${JSON.stringify(value)})`);
    }
  });

  it('states defaults that the schema agrees with', () => {
    let checked = 0;
    for (const row of ROWS) {
      const documented = documentedDefault(row);
      if (documented === undefined || row.key.includes('[]')) continue;
      const path = row.key.split('.');
      // The parent sections present (with only what they require), so that only the key
      // itself differs between the two.
      const parent = path.slice(0, -1);
      const base = requiredSections(parent);
      const explicit = structuredClone(base);
      setIn(explicit, path, documented.value);
      assert.deepEqual(
        loadConfig({ text: stringify(explicit), env: {} }),
        loadConfig({ text: stringify(base), env: {} }),
        `${row.key}: setting the documented default ${row.defaultCell} changes the configuration`,
      );
      checked += 1;
    }
    assert.ok(checked >= 30, `only ${checked} defaults were checked`);
  });

  it('has examples that load', () => {
    const blocks = [...DOC.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
    assert.ok(blocks.length >= 2);
    for (const block of blocks) {
      // Each variable the example refers to gets a value of the right shape; keys differ.
      const env: NodeJS.ProcessEnv = {};
      let n = 0;
      for (const [, name = ''] of block.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)) {
        n += 1;
        env[name] = name.endsWith('_KEY') ? `svc_${String(n).padStart(40, 'k')}` : 'a-value';
      }
      const config = loadConfig({ text: block, env });
      assert.ok(config.server.listen.length > 0);
    }
  });

  it('explains the interpolation forms', () => {
    for (const form of ['`${VAR}`', '`${VAR:-default}`', '`$${`', '`SVC_MASTER_KEY`']) assert.ok(DOC.includes(form), form);
  });
});
