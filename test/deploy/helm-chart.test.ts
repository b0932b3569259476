/**
 * Static checks of the Helm chart (helm itself does not run here): the plain YAML files
 * parse, Chart.yaml has what `helm lint` requires, every template's actions are well formed
 * and refer only to values and helpers that exist, and the svc.yaml files the chart renders
 * pass the service's own configuration schema.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, stringify } from 'yaml';
import { loadConfig } from '../../src/config/load.ts';
import { parseDuration } from '../../src/config/units.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CHART = join(ROOT, 'helm', 'svc-sidecar');
const TEMPLATES = join(CHART, 'templates');
const API_KEY = `svc_${'Ab3d'.repeat(10)}`;
const SYNC_KEY = `svc_${'S'.repeat(40)}`;

// semver.org's regular expression for a version (no leading "v").
const SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;

type Tree = Record<string, unknown>;

function read(path: string): string {
  return readFileSync(path, 'utf8');
}

function parseYamlFile(path: string): unknown {
  const docs = parseAllDocuments(read(path), { uniqueKeys: true });
  assert.equal(docs.length, 1, `${path}: expected one YAML document`);
  const [doc] = docs;
  assert.ok(doc !== undefined);
  assert.deepEqual(doc.errors.map(String), [], `${path}: YAML errors`);
  assert.deepEqual(doc.warnings.map(String), [], `${path}: YAML warnings`);
  return doc.toJS();
}

function isTree(value: unknown): value is Tree {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function at(tree: unknown, path: readonly string[]): unknown {
  let node = tree;
  for (const key of path) {
    if (!isTree(node) || !Object.hasOwn(node, key)) return undefined;
    node = node[key];
  }
  return node;
}

function tree(value: unknown, what: string): Tree {
  assert.ok(isTree(value), `${what} should be a mapping`);
  return value;
}

function templateFiles(): string[] {
  return readdirSync(TEMPLATES)
    .filter((name) => /\.(ya?ml|tpl|txt)$/.test(name))
    .sort();
}

const values = tree(parseYamlFile(join(CHART, 'values.yaml')), 'values.yaml');
const chart = tree(parseYamlFile(join(CHART, 'Chart.yaml')), 'Chart.yaml');
const templates = new Map(templateFiles().map((name) => [name, read(join(TEMPLATES, name))]));

// ---------------------------------------------------------------------------------------
// Template checks, as functions so that they can be shown to catch what they look for.

interface Action {
  /** The text between the delimiters, without trim markers. */
  readonly body: string;
  readonly start: number;
  readonly end: number;
}

/** Splits a Go template into its actions; reports unbalanced or nested delimiters. */
function scanActions(text: string): { actions: Action[]; problems: string[] } {
  const actions: Action[] = [];
  const problems: string[] = [];
  let pos = 0;
  for (;;) {
    const open = text.indexOf('{{', pos);
    const stray = text.indexOf('}}', pos);
    if (stray !== -1 && (open === -1 || stray < open)) {
      problems.push(`"}}" without "{{" at offset ${stray}`);
    }
    if (open === -1) break;
    const close = text.indexOf('}}', open + 2);
    if (close === -1) {
      problems.push(`"{{" at offset ${open} is never closed`);
      break;
    }
    const raw = text.slice(open + 2, close);
    if (raw.includes('{{')) problems.push(`"{{" inside the action at offset ${open}`);
    const body = raw.replace(/^-\s/, '').replace(/\s-$/, '').trim();
    actions.push({ body, start: open, end: close + 2 });
    pos = close + 2;
  }
  return { actions, problems };
}

const BLOCK_OPENERS = new Set(['if', 'range', 'with', 'define', 'block']);

/** Delimiters, block keywords (if/range/with/define … end), parentheses and quotes. */
function structureProblems(text: string): string[] {
  const { actions, problems } = scanActions(text);
  const stack: string[] = [];
  for (const { body, start } of actions) {
    if (body.startsWith('/*')) {
      if (!body.endsWith('*/')) problems.push(`comment at offset ${start} is not closed with "*/"`);
      continue;
    }
    // Strings become a bare placeholder, so what is left has no quotes unless one is unbalanced.
    const code = body.replace(/"(?:[^"\\]|\\.)*"|`[^`]*`/g, 'STR');
    if (/["`]/.test(code)) problems.push(`unbalanced quote in the action at offset ${start}`);
    let depth = 0;
    for (const char of code) {
      if (char === '(') depth += 1;
      if (char === ')') depth -= 1;
      if (depth < 0) break;
    }
    if (depth !== 0) problems.push(`unbalanced parentheses in the action at offset ${start}`);
    const keyword = /^[a-z]+/.exec(code)?.[0] ?? '';
    if (BLOCK_OPENERS.has(keyword)) stack.push(`${keyword} at offset ${start}`);
    else if (keyword === 'else' && stack.length === 0) problems.push(`"else" outside a block at offset ${start}`);
    else if (keyword === 'end' && stack.pop() === undefined) problems.push(`"end" without a block at offset ${start}`);
  }
  for (const open of stack) problems.push(`${open} has no "end"`);
  return problems;
}

/** `.Values.a.b` references (also `$.Values...`) that values.yaml does not define. */
function missingValues(text: string, defined: Tree): string[] {
  const missing = new Set<string>();
  for (const { body } of scanActions(text).actions) {
    for (const match of body.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
      const path = (match[1] ?? '').slice(1).split('.');
      if (at(defined, path) === undefined) missing.add(`.Values.${path.join('.')}`);
    }
  }
  return [...missing];
}

function valueReferences(text: string): string[] {
  return [...text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)].map((m) => (m[1] ?? '').slice(1));
}

/** What a condition comes to for given values; undefined when these checks cannot tell. */
type Truth = boolean | undefined;

/** Go templates' truth: false, 0, nil, "" and empty lists and maps are false. */
function truthy(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === 0 || value === '') return false;
  if (Array.isArray(value)) return value.length > 0;
  if (isTree(value)) return Object.keys(value).length > 0;
  return true;
}

/**
 * Evaluates an `if` condition made of `.Values` paths, `not`, `and`, `or` and parentheses
 * against `v`. Anything else (include, comparisons, variables) is undecided.
 */
function evaluate(condition: string, v: Tree): Truth {
  const tokens = condition.match(/\(|\)|"(?:[^"\\]|\\.)*"|[^\s()]+/g) ?? [];
  let i = 0;
  const call = (): Truth => {
    const head = tokens[i];
    if (head === 'not') {
      i += 1;
      const operand = term();
      return operand === undefined ? undefined : !operand;
    }
    if (head === 'and' || head === 'or') {
      i += 1;
      const operands: Truth[] = [];
      while (i < tokens.length && tokens[i] !== ')') operands.push(term());
      if (operands.length < 2) return undefined;
      const decisive = head === 'and' ? false : true;
      if (operands.includes(decisive)) return decisive;
      return operands.includes(undefined) ? undefined : !decisive;
    }
    if (head === '(' || head?.startsWith('.Values.') === true) return term();
    // Another function: skip its arguments.
    let depth = 0;
    while (i < tokens.length && !(depth === 0 && tokens[i] === ')')) {
      if (tokens[i] === '(') depth += 1;
      if (tokens[i] === ')') depth -= 1;
      i += 1;
    }
    return undefined;
  };
  const term = (): Truth => {
    const token = tokens[i];
    i += 1;
    if (token === '(') {
      const inner = call();
      if (tokens[i] !== ')') return undefined;
      i += 1;
      return inner;
    }
    if (token?.startsWith('.Values.') === true) return truthy(at(v, token.slice('.Values.'.length).split('.')));
    return undefined;
  };
  const result = call();
  return i === tokens.length ? result : undefined;
}

/**
 * The template with its actions taken out: an action alone on its line(s) is dropped, an
 * inline one becomes a placeholder scalar. Without `v`, every branch of every `if` is kept,
 * so this is an over-approximation of any rendering: its YAML must still parse, and it shows
 * the shape. With `v`, an `if` (or `else if`) whose condition `evaluate` decides keeps only
 * the branch those values take; undecided ones keep every branch.
 */
function skeleton(text: string, v?: Tree): string {
  const { actions } = scanActions(text);
  // decided: this block's branch is chosen by v; active: the current branch is kept; done: a branch was taken.
  const frames: Array<{ decided: boolean; active: boolean; done: boolean }> = [];
  const emitting = (): boolean => frames.every((frame) => frame.active);
  let out = '';
  let pos = 0;
  for (const { body, start, end } of actions) {
    const lineStart = text.lastIndexOf('\n', start - 1) + 1;
    const nextNewline = text.indexOf('\n', end);
    const lineEnd = nextNewline === -1 ? text.length : nextNewline;
    const alone = text.slice(lineStart, start).trim() === '' && text.slice(end, lineEnd).trim() === '';
    if (alone && lineStart >= pos) {
      if (emitting()) out += text.slice(pos, lineStart);
      pos = Math.min(lineEnd + 1, text.length);
    } else {
      if (emitting()) out += `${text.slice(pos, start)}TEMPLATED`;
      pos = end;
    }
    const keyword = /^[a-z]+/.exec(body)?.[0] ?? '';
    if (BLOCK_OPENERS.has(keyword)) {
      const truth = keyword === 'if' && v !== undefined ? evaluate(body.slice(2).trim(), v) : undefined;
      frames.push(truth === undefined ? { decided: false, active: true, done: false } : { decided: true, active: truth, done: truth });
    } else if (keyword === 'else') {
      const frame = frames.at(-1);
      if (frame === undefined || !frame.decided) continue;
      const rest = body.slice(4).trim();
      if (frame.done) frame.active = false;
      else if (rest === '') frame.active = frame.done = true;
      else {
        const truth = rest.startsWith('if ') && v !== undefined ? evaluate(rest.slice(3), v) : undefined;
        if (truth === undefined) Object.assign(frame, { decided: false, active: true });
        else Object.assign(frame, { active: truth, done: truth });
      }
    } else if (keyword === 'end') {
      frames.pop();
    }
  }
  if (emitting()) out += text.slice(pos);
  return out;
}

/** The skeleton of a template as YAML: null when it renders nothing (for `v`). */
function renderedSkeleton(name: string, v?: Tree): Tree | null {
  const text = templates.get(name);
  assert.ok(text !== undefined, `templates/${name} is missing`);
  const docs = parseAllDocuments(skeleton(text, v), { uniqueKeys: true });
  assert.ok(docs.length <= 1, `templates/${name}: expected at most one document`);
  const [doc] = docs;
  if (doc === undefined) return null;
  assert.deepEqual(doc.errors.map(String), [], `templates/${name}: the skeleton is not valid YAML`);
  const js: unknown = doc.toJS();
  return js === null ? null : tree(js, `templates/${name}`);
}

function skeletonOf(name: string, v?: Tree): Tree {
  const manifest = renderedSkeleton(name, v);
  assert.ok(manifest !== null, `templates/${name} renders nothing`);
  return manifest;
}

/** The values with the PostgreSQL store (and whatever else is given) set. */
function withPostgres(extra: Tree = {}): Tree {
  return { ...structuredClone(values), postgres: { existingSecret: 'svc-db', urlKey: 'url' }, ...extra };
}

// ---------------------------------------------------------------------------------------

describe('Chart.yaml', () => {
  it('has the fields helm requires, with a semver version', () => {
    assert.equal(chart.apiVersion, 'v2');
    assert.equal(chart.name, 'svc-sidecar', 'the chart name must match its directory');
    assert.equal(chart.type, 'application');
    assert.equal(typeof chart.version, 'string');
    assert.match(String(chart.version), SEMVER);
    assert.equal(typeof chart.description, 'string');
    assert.ok(String(chart.description).trim().length > 20, 'a description that says what the chart deploys');
  });

  it("deploys the package's own version (appVersion = package.json version, a string)", () => {
    const pkg = JSON.parse(read(join(ROOT, 'package.json'))) as { version: string };
    // Unquoted, 0.10 would be the number 0.1 to YAML.
    assert.equal(typeof chart.appVersion, 'string');
    assert.equal(chart.appVersion, pkg.version);
  });
});

describe('values.yaml', () => {
  it('parses to a mapping with the documented groups', () => {
    for (const key of ['image', 'containerPorts', 'service', 'secrets', 'persistence', 'config', 'resources', 'probes', 'metrics', 'sidecar']) {
      assert.ok(Object.hasOwn(values, key), `values.yaml has no ${key}`);
    }
  });

  it('runs as the non-root user of the image, with a read-only root filesystem and no capabilities', () => {
    const pod = tree(values.podSecurityContext, 'podSecurityContext');
    const container = tree(values.securityContext, 'securityContext');
    assert.equal(pod.runAsNonRoot, true);
    assert.equal(container.runAsNonRoot, true);
    assert.equal(container.readOnlyRootFilesystem, true);
    assert.equal(container.allowPrivilegeEscalation, false);
    assert.deepEqual(at(container, ['capabilities', 'drop']), ['ALL']);
    // The sidecar snippet sets runAsUser next to these; a duplicate key would break it.
    assert.equal(container.runAsUser, undefined);
    const dockerUser = /^USER\s+(\d+)/m.exec(read(join(ROOT, 'Dockerfile')))?.[1];
    assert.equal(String(pod.runAsUser), dockerUser, "runAsUser is the Dockerfile's USER");
    assert.equal(pod.fsGroup, pod.runAsUser, 'fsGroup makes the data volume writable by that user');
  });

  it('sets resource requests and a memory limit for both the control plane and the sidecar', () => {
    for (const base of [['resources'], ['sidecar', 'resources']]) {
      assert.ok(at(values, [...base, 'requests', 'cpu']) !== undefined, `${base.join('.')}.requests.cpu`);
      assert.ok(at(values, [...base, 'requests', 'memory']) !== undefined, `${base.join('.')}.requests.memory`);
      assert.ok(at(values, [...base, 'limits', 'memory']) !== undefined, `${base.join('.')}.limits.memory`);
    }
  });

  it('probes liveness on /healthz and readiness on /readyz', () => {
    assert.equal(at(values, ['probes', 'liveness', 'path']), '/healthz');
    assert.equal(at(values, ['probes', 'readiness', 'path']), '/readyz');
    assert.equal(at(values, ['probes', 'startup', 'path']), '/healthz');
  });

  it('gives the pod longer than the drain timeout before SIGKILL', () => {
    const drain = parseDuration(at(values, ['config', 'server', 'drain_timeout']) ?? '10s');
    const grace = Number(values.terminationGracePeriodSeconds) * 1000;
    assert.ok(grace > drain, `terminationGracePeriodSeconds (${grace} ms) must exceed drain_timeout (${drain} ms)`);
  });

  it('leaves the ServiceMonitor off by default (it needs the Prometheus Operator CRDs)', () => {
    assert.equal(at(values, ['metrics', 'serviceMonitor', 'enabled']), false);
  });

  it('uses the ports the image exposes', () => {
    const exposed = (/^EXPOSE\s+(.+)$/m.exec(read(join(ROOT, 'Dockerfile')))?.[1] ?? '').split(/\s+/);
    assert.ok(exposed.includes(String(at(values, ['containerPorts', 'http']))));
    assert.ok(exposed.includes(String(at(values, ['containerPorts', 'admin']))));
  });
});

describe('the template checks themselves', () => {
  it('catch unbalanced delimiters and blocks', () => {
    assert.deepEqual(structureProblems('a: {{ .Values.x }}\n{{- if .Values.y }}b: 1{{ end }}'), []);
    assert.match(structureProblems('a: {{ .Values.x }').join(), /never closed/);
    assert.match(structureProblems('a: .Values.x }}').join(), /without "\{\{"/);
    assert.match(structureProblems('{{ if .Values.x }}a: 1').join(), /has no "end"/);
    assert.match(structureProblems('a: 1{{ end }}').join(), /"end" without a block/);
    assert.match(structureProblems('{{ include "x . }}').join(), /unbalanced quote/);
    assert.match(structureProblems('{{ printf "%s" (include "x" . }}').join(), /parentheses/);
  });

  it('decide an if from the values when they can, and keep every branch when they cannot', () => {
    const v: Tree = { a: 'x', b: '', c: { d: true }, e: [] };
    assert.equal(evaluate('.Values.a', v), true);
    assert.equal(evaluate('.Values.b', v), false);
    assert.equal(evaluate('.Values.missing.path', v), false);
    assert.equal(evaluate('.Values.e', v), false);
    assert.equal(evaluate('not .Values.b', v), true);
    assert.equal(evaluate('and .Values.a .Values.c.d (not .Values.b)', v), true);
    assert.equal(evaluate('and .Values.a (not .Values.a)', v), false);
    assert.equal(evaluate('or .Values.b (include "x" .)', v), undefined);
    assert.equal(evaluate('and .Values.b (include "x" .)', v), false);
    assert.equal(evaluate('include "x" .', v), undefined);
    assert.equal(evaluate('gt (int .Values.a) 1', v), undefined);
    const text = 'k:\n  {{- if .Values.a }}\n  one: 1\n  {{- else if .Values.b }}\n  two: 2\n  {{- else }}\n  three: 3\n  {{- end }}\n';
    assert.equal(skeleton(text, v), 'k:\n  one: 1\n');
    assert.equal(skeleton(text, { ...v, a: '' }), 'k:\n  three: 3\n');
    assert.equal(skeleton(text, { ...v, a: '', b: 'y' }), 'k:\n  two: 2\n');
    assert.equal(skeleton(text), 'k:\n  one: 1\n  two: 2\n  three: 3\n');
    assert.equal(skeleton('{{- if include "x" . }}\nk: {{ .Values.a }}\n{{- else }}\nl: 1\n{{- end }}\n', v), 'k: TEMPLATED\nl: 1\n');
  });

  it('catch a .Values reference that values.yaml lacks', () => {
    assert.deepEqual(missingValues('{{ .Values.image.tag }}{{ $.Values.service.port }}', values), []);
    assert.deepEqual(missingValues('{{ .Values.image.digest }}', values), ['.Values.image.digest']);
    assert.deepEqual(missingValues('{{ .Values.image.tag.more }}', values), ['.Values.image.tag.more']);
  });
});

describe('templates', () => {
  it('include the objects the chart promises', () => {
    for (const name of [
      '_helpers.tpl',
      'NOTES.txt',
      'deployment.yaml',
      'service.yaml',
      'pvc.yaml',
      'secret.yaml',
      'configmap.yaml',
      'servicemonitor.yaml',
      'sidecar-snippet.yaml',
    ]) {
      assert.ok(templates.has(name), `templates/${name}`);
    }
  });

  for (const [name, text] of templates) {
    it(`${name}: delimiters, blocks, quotes and parentheses balance`, () => {
      assert.deepEqual(structureProblems(text), []);
    });

    it(`${name}: every .Values reference exists in values.yaml`, () => {
      assert.deepEqual(missingValues(text, values), []);
    });
  }

  it('refer only to helpers that _helpers.tpl defines, and define each once', () => {
    const defined: string[] = [];
    const used = new Set<string>();
    for (const text of templates.values()) {
      for (const m of text.matchAll(/\bdefine\s+"([^"]+)"/g)) defined.push(m[1] ?? '');
      for (const m of text.matchAll(/\b(?:include|template)\s+"([^"]+)"/g)) used.add(m[1] ?? '');
    }
    assert.equal(new Set(defined).size, defined.length, 'a helper is defined twice');
    assert.ok(used.size > 5);
    for (const name of used) assert.ok(defined.includes(name), `"${name}" is used but not defined`);
  });

  it('parse as YAML with every branch kept but the store\'s, each with apiVersion and kind', () => {
    const kindsFor = (v: Tree): string[] => {
      const kinds: string[] = [];
      for (const name of templates.keys()) {
        if (!name.endsWith('.yaml')) continue;
        const manifest = renderedSkeleton(name, v);
        if (manifest === null) continue;
        assert.equal(typeof manifest.apiVersion, 'string', `${name}: apiVersion`);
        kinds.push(String(manifest.kind));
      }
      return kinds.sort();
    };
    const monitored = (v: Tree): Tree => ({ ...v, metrics: { serviceMonitor: { ...tree(at(values, ['metrics', 'serviceMonitor']), 'metrics.serviceMonitor'), enabled: true } } });
    // The PodDisruptionBudget's condition counts instances, which these checks leave undecided.
    assert.deepEqual(kindsFor(monitored(values)), ['ConfigMap', 'ConfigMap', 'Deployment', 'PersistentVolumeClaim', 'PodDisruptionBudget', 'Secret', 'Service', 'ServiceMonitor']);
    assert.deepEqual(kindsFor(monitored(withPostgres())), ['ConfigMap', 'ConfigMap', 'Deployment', 'PodDisruptionBudget', 'Secret', 'Service', 'ServiceMonitor']);
    assert.ok(!kindsFor(values).includes('ServiceMonitor'), 'off by default');
    // Without values every branch is kept: all templates but the Deployment (whose store
    // branches set the same keys) still parse that way.
    for (const name of templates.keys()) {
      if (name.endsWith('.yaml') && name !== 'deployment.yaml') assert.ok(renderedSkeleton(name) !== null, name);
    }
  });

  it('the Deployment: one replica, Recreate, probes on the admin port, the data volume at /app/data', () => {
    const deployment = skeletonOf('deployment.yaml', values);
    assert.equal(at(deployment, ['spec', 'replicas']), 1);
    assert.equal(at(deployment, ['spec', 'strategy', 'type']), 'Recreate');
    const containers = at(deployment, ['spec', 'template', 'spec', 'containers']);
    assert.ok(Array.isArray(containers) && containers.length === 1);
    const container = tree(containers[0], 'container');
    for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
      assert.equal(at(container, [probe, 'httpGet', 'port']), 'admin', probe);
    }
    const mounts = container.volumeMounts as Array<{ name: string; mountPath: string; readOnly?: boolean }>;
    assert.deepEqual(
      mounts.map((m) => m.mountPath),
      ['/app/data', '/app/config', '/tmp'],
    );
    assert.equal(mounts.find((m) => m.mountPath === '/app/config')?.readOnly, true);
    const env = container.env as Array<{ name: string; valueFrom?: { secretKeyRef?: { key: string } } }>;
    assert.equal(env.find((e) => e.name === 'SVC_MASTER_KEY')?.valueFrom?.secretKeyRef?.key, 'SVC_MASTER_KEY');
    assert.equal(env.find((e) => e.name === 'SVC_API_KEY')?.valueFrom?.secretKeyRef?.key, 'SVC_API_KEY');
    assert.equal(env.find((e) => e.name === 'SVC_SYNC_KEY')?.valueFrom?.secretKeyRef?.key, 'SVC_SYNC_KEY', 'the seed creates the replicas\' key from it');
    const volumes = at(deployment, ['spec', 'template', 'spec', 'volumes']) as Array<Tree>;
    const data = volumes.find((v) => v.name === 'data');
    assert.ok(data !== undefined && 'persistentVolumeClaim' in data, 'the data volume is the claim when persistence is on');
    assert.equal(env.find((e) => e.name === 'SVC_STORE_URL'), undefined, 'no database URL on SQLite');
    assert.match(templates.get('deployment.yaml') ?? '', /\{\{- else \}\}\n(?:\s*\{\{-? \/\*.*\*\/\}\}\n)?\s*\{\{- \$_ := include "svc-sidecar\.replicas" \. \}\}\n/, 'the SQLite branch still checks controlPlane.replicas');
  });

  it('the Secret holds SVC_MASTER_KEY, SVC_API_KEY and SVC_SYNC_KEY, kept on uninstall', () => {
    const secret = skeletonOf('secret.yaml');
    assert.deepEqual(Object.keys(tree(secret.data, 'data')).sort(), ['SVC_API_KEY', 'SVC_MASTER_KEY', 'SVC_SYNC_KEY']);
    assert.equal(at(secret, ['metadata', 'annotations', 'helm.sh/resource-policy']), 'keep');
    const text = templates.get('secret.yaml') ?? '';
    // A new master key on upgrade would make every stored data key unreadable.
    assert.match(text, /lookup "v1" "Secret"/);
    assert.match(text, /randBytes 32/);
  });

  it('the Service exposes http and admin; the ServiceMonitor scrapes /metrics on admin', () => {
    const service = skeletonOf('service.yaml');
    const ports = at(service, ['spec', 'ports']) as Array<{ name: string; targetPort: string }>;
    assert.deepEqual(
      ports.map((p) => [p.name, p.targetPort]),
      [
        ['http', 'http'],
        ['admin', 'admin'],
      ],
    );
    const monitor = skeletonOf('servicemonitor.yaml');
    const [endpoint] = at(monitor, ['spec', 'endpoints']) as Array<Tree>;
    assert.equal(endpoint?.port, 'admin');
    assert.equal(endpoint?.path, '/metrics');
    assert.match(templates.get('servicemonitor.yaml') ?? '', /^\{\{- if \.Values\.metrics\.serviceMonitor\.enabled \}\}/);
  });

  it('the sidecar snippet is a ConfigMap with svc.yaml and container.yaml', () => {
    const snippet = skeletonOf('sidecar-snippet.yaml');
    assert.equal(snippet.kind, 'ConfigMap');
    assert.deepEqual(Object.keys(tree(snippet.data, 'data')).sort(), ['container.yaml', 'svc.yaml']);
    const container = String(at(snippet, ['data', 'container.yaml']));
    assert.match(container, /SVC_MASTER_KEY/);
    assert.match(container, /SVC_CP_KEY/);
    assert.match(container, /mountPath: \/app\/config/);
    // Sidecars present the replicas' key (sync.* only), never the owner's bootstrap key.
    const cpKey = container.slice(container.indexOf('name: SVC_CP_KEY'), container.indexOf('readinessProbe'));
    assert.match(cpKey, /key: SVC_SYNC_KEY/);
    assert.doesNotMatch(cpKey, /SVC_API_KEY/);
  });

  it('the sidecar runs exactly the image\'s command, node flags included', () => {
    // The node flags size the heap (docs/operations.md): a sidecar started without them
    // runs with V8's default young generation, several times the memory in every pod.
    const cmd = /^CMD (\[.*\])$/m.exec(read(join(ROOT, 'Dockerfile')))?.[1];
    assert.ok(cmd !== undefined, 'the Dockerfile has an exec-form CMD');
    const args = /^\s*args: (\[.*\])$/m.exec(templates.get('sidecar-snippet.yaml') ?? '')?.[1];
    assert.ok(args !== undefined, 'the snippet sets args');
    assert.deepEqual(JSON.parse(args), JSON.parse(cmd));
  });

  it('the chart README describes every top-level value', () => {
    const readme = read(join(CHART, 'README.md'));
    for (const key of Object.keys(values)) assert.ok(readme.includes(`\`${key}`), `README.md does not mention ${key}`);
  });

  it('every top-level value is used by some template', () => {
    const used = new Set([...templates.values()].flatMap((text) => valueReferences(text).map((path) => path.split('.')[0])));
    for (const key of Object.keys(values)) assert.ok(used.has(key), `values.yaml: ${key} is never used by a template`);
  });
});

// ---------------------------------------------------------------------------------------
// The svc.yaml files the chart renders. These mirror `svc-sidecar.config` and
// `svc-sidecar.sidecarConfig` in _helpers.tpl: keep them in step.

function controlPlaneConfig(v: Tree): Tree {
  const config = structuredClone(tree(v.config, 'config'));
  const server = isTree(config.server) ? config.server : {};
  server.listen = `0.0.0.0:${String(at(v, ['containerPorts', 'http']))}`;
  server.admin_listen = `0.0.0.0:${String(at(v, ['containerPorts', 'admin']))}`;
  return { ...config, server, store: { path: '/app/data/svc.db' }, keys: { master_key_file: '/app/data/master.key' } };
}

function controlPlaneConfigOnPostgres(v: Tree): Tree {
  return { ...controlPlaneConfig(v), store: { url: '${SVC_STORE_URL}' } };
}

function sidecarConfig(v: Tree, relay: boolean, egressProxy = false): Tree {
  const sidecar = tree(v.sidecar, 'sidecar');
  const config: Tree = {
    server: {
      listen: `127.0.0.1:${String(at(sidecar, ['ports', 'api']))}`,
      admin_listen: `0.0.0.0:${String(at(sidecar, ['ports', 'admin']))}`,
    },
    store: { path: '/app/data/svc.db' },
    keys: { master_key_file: '/app/data/master.key' },
    state: {
      source: 'control-plane',
      control_plane: { url: `http://svc-sidecar.default.svc:${String(at(v, ['service', 'port']))}`, api_key: '${SVC_CP_KEY}', poll_interval: sidecar.pollInterval },
    },
    logging: { level: sidecar.logLevel },
  };
  if (relay) {
    config.relay = {
      listen: `0.0.0.0:${String(at(sidecar, ['ports', 'relay']))}`,
      upstream: at(sidecar, ['relay', 'upstream']),
      routes: [{ name: 'patients', match: { method: 'POST', path: '/patients/*' }, configuration: 'payments', request: { encrypt: ['ssn'] } }],
    };
  }
  const egress = sidecar.egress;
  if (Array.isArray(egress) && egress.length > 0) config.egress = egress;
  if (egressProxy) {
    config.egress_proxy = {
      listen: `127.0.0.1:${String(at(sidecar, ['ports', 'egressProxy']))}`,
      ca: { cert_file: '/app/egress-ca/egress-ca.pem', key_file: '/app/data/egress-ca.key' },
      unknown_hosts: at(sidecar, ['egressProxy', 'unknownHosts']),
      hosts: [{ match: 'api.stripe.com', configuration: 'payments', routes: [{ match: { method: 'POST', path: '/v1/payment_methods' }, request: { decrypt: ['card[number]'] } }] }],
    };
  }
  return config;
}

describe('the rendered svc.yaml', () => {
  it('leaves listeners, store and master key file to the chart (the template refuses them)', () => {
    const config = tree(values.config, 'config');
    assert.equal(config.store, undefined);
    assert.equal(config.keys, undefined);
    assert.equal(at(config, ['server', 'listen']), undefined);
    assert.equal(at(config, ['server', 'admin_listen']), undefined);
    assert.match(read(join(TEMPLATES, '_helpers.tpl')), /fail \(printf "config\.server\.%s is set by the chart/);
  });

  it('of the control plane passes the schema, seeding the API key from SVC_API_KEY', () => {
    const loaded = loadConfig({ text: stringify(controlPlaneConfig(values)), env: { SVC_API_KEY: API_KEY, SVC_SYNC_KEY: SYNC_KEY } });
    assert.equal(loaded.server.listen, '0.0.0.0:8080');
    assert.equal(loaded.server.admin_listen, '0.0.0.0:9090');
    assert.equal(loaded.store.path, '/app/data/svc.db');
    assert.notEqual(loaded.state.source, 'control-plane');
    assert.equal(loaded.seed.api_keys[0]?.key, API_KEY);
    const owner = loaded.seed.users.find((u) => u.email === loaded.seed.api_keys[0]?.user);
    assert.deepEqual(owner?.roles, ['owner']);
  });

  it('of the control plane seeds the replicas\' key from SVC_SYNC_KEY: sync.read and sync.write only, on a user of its own without a password', () => {
    const loaded = loadConfig({ text: stringify(controlPlaneConfig(values)), env: { SVC_API_KEY: API_KEY, SVC_SYNC_KEY: SYNC_KEY } });
    const key = loaded.seed.api_keys.find((k) => k.key === SYNC_KEY);
    assert.ok(key !== undefined);
    assert.deepEqual([...key.permissions].sort(), ['sync.read', 'sync.write']);
    const user = loaded.seed.users.find((u) => u.email === key.user);
    assert.ok(user !== undefined && user.password === undefined);
    assert.ok(user.roles.includes('administrator') || user.roles.includes('owner'), 'a role that grants sync.*');
    assert.notEqual(key.user, loaded.seed.api_keys.find((k) => k.key === API_KEY)?.user, 'not the bootstrap owner');
  });

  it('of the control plane fails without SVC_API_KEY or SVC_SYNC_KEY (so a missing Secret is loud)', () => {
    assert.throws(() => loadConfig({ text: stringify(controlPlaneConfig(values)), env: { SVC_SYNC_KEY: SYNC_KEY } }), /SVC_API_KEY is not set/);
    assert.throws(() => loadConfig({ text: stringify(controlPlaneConfig(values)), env: { SVC_API_KEY: API_KEY } }), /SVC_SYNC_KEY is not set/);
  });

  it('of a sidecar passes the schema: control-plane state, API on localhost only', () => {
    for (const relay of [false, true]) {
      const loaded = loadConfig({ text: stringify(sidecarConfig(values, relay)), env: { SVC_CP_KEY: API_KEY } });
      assert.equal(loaded.state.source, 'control-plane');
      assert.equal(loaded.state.control_plane?.api_key, API_KEY);
      assert.match(loaded.server.listen, /^127\.0\.0\.1:/);
      assert.equal(loaded.relay !== undefined, relay);
    }
  });

  it('of a sidecar with the egress proxy passes the schema: on localhost, the CA key apart from the shared certificate', () => {
    const loaded = loadConfig({ text: stringify(sidecarConfig(values, false, true)), env: { SVC_CP_KEY: API_KEY } });
    assert.match(loaded.egress_proxy!.listen, /^127\.0\.0\.1:15088$/);
    assert.equal(loaded.egress_proxy!.unknown_hosts, 'deny');
    assert.notEqual(dirname(loaded.egress_proxy!.ca.key_file), dirname(loaded.egress_proxy!.ca.cert_file), 'the application mounts the certificate\'s directory: the key is elsewhere');
    const snippet = templates.get('sidecar-snippet.yaml') ?? '';
    assert.match(snippet, /HTTPS_PROXY, value: "http:\/\/127\.0\.0\.1:\{\{ \.Values\.sidecar\.ports\.egressProxy \}\}"/);
    assert.match(snippet, /NODE_EXTRA_CA_CERTS, value: \/etc\/svc-egress-ca\/egress-ca\.pem/);
    assert.match(snippet, /- key: tls\.crt\n\s+path: egress-ca\.pem/, 'with caSecret the application gets the certificate alone');
  });

  it('the mirrors above follow the helpers (same keys set in _helpers.tpl)', () => {
    const helpers = read(join(TEMPLATES, '_helpers.tpl'));
    for (const fragment of ['"cert_file" "/app/egress-ca/egress-ca.pem" "key_file" "/app/data/egress-ca.key"', '"unknown_hosts" .Values.sidecar.egressProxy.unknownHosts', '"listen" (printf "0.0.0.0:%d"', '"admin_listen" (printf "0.0.0.0:%d"', '"path" "/app/data/svc.db"', '"url" "${SVC_STORE_URL}"', '"source" "control-plane"', '"api_key" "${SVC_CP_KEY}"', '"listen" (printf "127.0.0.1:%d"']) {
      assert.ok(helpers.includes(fragment), `_helpers.tpl no longer has ${fragment}`);
    }
  });
});

describe('the control plane on PostgreSQL (postgres.existingSecret)', () => {
  const DB_URL = 'postgres://svc:s3cret@db.example.internal:5432/svc';

  it('is off by default: SQLite on the claim, one instance, a budget only with more', () => {
    assert.equal(at(values, ['postgres', 'existingSecret']), '');
    assert.equal(at(values, ['postgres', 'urlKey']), 'url');
    assert.equal(at(values, ['controlPlane', 'replicas']), null, 'null: 2 on PostgreSQL, 1 on SQLite');
    assert.equal(at(values, ['controlPlane', 'pdb', 'enabled']), null, 'null: with more than one instance');
    assert.equal(at(values, ['controlPlane', 'pdb', 'minAvailable']), 1);
  });

  it('the Deployment: controlPlane.replicas instances (2 unless set), a rolling update that keeps them all serving', () => {
    const deployment = skeletonOf('deployment.yaml', withPostgres());
    assert.equal(at(deployment, ['spec', 'replicas']), 'TEMPLATED');
    assert.match(templates.get('deployment.yaml') ?? '', /^ {2}replicas: \{\{ include "svc-sidecar\.replicas" \. \}\}$/m);
    assert.equal(at(deployment, ['spec', 'strategy', 'type']), 'RollingUpdate');
    assert.equal(at(deployment, ['spec', 'strategy', 'rollingUpdate', 'maxUnavailable']), 0);
    assert.equal(at(deployment, ['spec', 'strategy', 'rollingUpdate', 'maxSurge']), 1);
    const helpers = templates.get('_helpers.tpl') ?? '';
    const replicas = helpers.slice(helpers.indexOf('define "svc-sidecar.replicas"'), helpers.indexOf('define "svc-sidecar.pdbEnabled"'));
    assert.match(replicas, /\$replicas := \.Values\.controlPlane\.replicas \}\}\n\{\{- if kindIs "invalid" \$replicas \}\}\n\{\{- \$replicas = 1 \}\}\n\{\{- if \.Values\.postgres\.existingSecret \}\}\n\{\{- \$replicas = 2 \}\}/);
  });

  it('the Deployment: the URL from the Secret as SVC_STORE_URL, the master key as before, no claim', () => {
    const deployment = skeletonOf('deployment.yaml', withPostgres());
    const [container] = at(deployment, ['spec', 'template', 'spec', 'containers']) as Tree[];
    const env = tree(container, 'container').env as Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>;
    const url = env.find((e) => e.name === 'SVC_STORE_URL');
    assert.ok(url?.valueFrom?.secretKeyRef !== undefined, 'SVC_STORE_URL comes from a Secret');
    const text = templates.get('deployment.yaml') ?? '';
    assert.match(text, /- name: SVC_STORE_URL\n\s+valueFrom:\n\s+secretKeyRef:\n\s+name: \{\{ \.Values\.postgres\.existingSecret \}\}\n\s+key: \{\{ \.Values\.postgres\.urlKey \}\}\n/);
    // Every instance unwraps the same data keys: one master key, from the same Secret.
    assert.equal(env.find((e) => e.name === 'SVC_MASTER_KEY')?.valueFrom?.secretKeyRef?.key, 'SVC_MASTER_KEY');
    const volumes = at(deployment, ['spec', 'template', 'spec', 'volumes']) as Tree[];
    const data = volumes.find((v) => v.name === 'data');
    assert.ok(data !== undefined && 'emptyDir' in data && !('persistentVolumeClaim' in data), '/app/data is an emptyDir');
    assert.ok(!volumes.some((v) => 'persistentVolumeClaim' in v));
    for (const v of [withPostgres({ persistence: { ...tree(values.persistence, 'persistence'), existingClaim: 'old-data' } })]) {
      const vols = at(skeletonOf('deployment.yaml', v), ['spec', 'template', 'spec', 'volumes']) as Tree[];
      assert.ok(!vols.some((vol) => 'persistentVolumeClaim' in vol), 'not even an existing claim');
    }
  });

  it('no PersistentVolumeClaim is created', () => {
    assert.equal(renderedSkeleton('pvc.yaml', withPostgres()), null);
    assert.equal(skeletonOf('pvc.yaml', values).kind, 'PersistentVolumeClaim', 'SQLite keeps its claim');
  });

  it('a PodDisruptionBudget (policy/v1) over the control-plane pods, by default whenever there is more than one', () => {
    const pdb = skeletonOf('pdb.yaml', withPostgres());
    assert.equal(pdb.apiVersion, 'policy/v1');
    assert.equal(pdb.kind, 'PodDisruptionBudget');
    assert.equal(at(pdb, ['spec', 'minAvailable']), 'TEMPLATED');
    const text = templates.get('pdb.yaml') ?? '';
    assert.match(text, /^\{\{- if include "svc-sidecar\.pdbEnabled" \. \}\}$/m);
    assert.match(text, /minAvailable: \{\{ \.Values\.controlPlane\.pdb\.minAvailable \}\}/);
    assert.match(text, /matchLabels:\n\s+\{\{- include "svc-sidecar\.selectorLabels" \. \| nindent 6 \}\}/, 'the Service\'s selector: control-plane pods only');
    // A budget no eviction can satisfy would hang every node drain.
    assert.match(text, /ge \(int \$minAvailable\) \$replicas\) \}\}\n\{\{- fail /);
    const helpers = templates.get('_helpers.tpl') ?? '';
    assert.match(helpers, /\$enabled := \.Values\.controlPlane\.pdb\.enabled \}\}\n\{\{- if kindIs "invalid" \$enabled \}\}\n\{\{- \$enabled = gt \(int \(include "svc-sidecar\.replicas" \.\)\) 1 \}\}/);
  });

  it('refuses more than one instance on SQLite (the render fails)', () => {
    const helpers = templates.get('_helpers.tpl') ?? '';
    assert.match(helpers, /\{\{- if and \(ne \$replicas 1\) \(not \.Values\.postgres\.existingSecret\) \}\}\n\{\{- fail \(printf "controlPlane\.replicas is %d, but the store is SQLite/);
  });

  it('the rendered svc.yaml has store.url "${SVC_STORE_URL}" and no store.path, and passes the schema', () => {
    const rendered = controlPlaneConfigOnPostgres(withPostgres());
    assert.deepEqual(rendered.store, { url: '${SVC_STORE_URL}' });
    assert.ok(!stringify(rendered).includes('s3cret'), 'the ConfigMap never holds the password');
    const loaded = loadConfig({ text: stringify(rendered), env: { SVC_API_KEY: API_KEY, SVC_SYNC_KEY: SYNC_KEY, SVC_STORE_URL: DB_URL } });
    assert.equal(loaded.store.url, DB_URL);
    assert.equal(loaded.seed.api_keys[0]?.key, API_KEY);
    assert.throws(() => loadConfig({ text: stringify(rendered), env: { SVC_API_KEY: API_KEY, SVC_SYNC_KEY: SYNC_KEY } }), /SVC_STORE_URL is not set/, 'a missing Secret key is loud');
    // The mirror picks the branch the helper does.
    const helpers = templates.get('_helpers.tpl') ?? '';
    assert.match(helpers, /\{\{- if \.Values\.postgres\.existingSecret \}\}\n\{\{- \$_ := set \$config "store" \(dict "url" "\$\{SVC_STORE_URL\}"\) \}\}\n\{\{- else \}\}\n\{\{- \$_ := set \$config "store" \(dict "path" "\/app\/data\/svc\.db"\) \}\}/);
  });
});
