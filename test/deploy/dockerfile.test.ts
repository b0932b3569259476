/**
 * The Dockerfile's rules (issue 6), checked statically: docker does not run here. The
 * checks are functions returning problems, run on the real Dockerfile (no problems) and on
 * bad examples (the problems they exist to catch).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOCKERFILE = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const DOCKERIGNORE = readFileSync(join(ROOT, '.dockerignore'), 'utf8');
const PACKAGE = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } };

interface Instruction {
  readonly keyword: string;
  readonly args: string;
  readonly line: number;
}

interface Stage {
  readonly base: string;
  readonly name: string | undefined;
  readonly instructions: Instruction[];
}

/** Instructions with continuation lines joined and comments dropped, grouped by stage. */
function parseDockerfile(text: string): Stage[] {
  const instructions: Instruction[] = [];
  let pending = '';
  let startLine = 0;
  text.split('\n').forEach((raw, index) => {
    const line = raw.trimEnd();
    if (pending === '' && (line.trim() === '' || line.trimStart().startsWith('#'))) return;
    // Comment lines inside a continued instruction are skipped by docker too.
    if (pending !== '' && line.trimStart().startsWith('#')) return;
    if (pending === '') startLine = index + 1;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1)} `;
      return;
    }
    const full = (pending + line).trim();
    pending = '';
    const match = /^(\S+)\s*(.*)$/s.exec(full);
    if (match !== null) instructions.push({ keyword: (match[1] ?? '').toUpperCase(), args: (match[2] ?? '').trim(), line: startLine });
  });
  const stages: Stage[] = [];
  for (const instruction of instructions) {
    if (instruction.keyword === 'FROM') {
      const [base = '', as, name] = instruction.args.replace(/--platform=\S+\s+/, '').split(/\s+/);
      stages.push({ base, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else {
      const stage = stages.at(-1);
      if (stage === undefined) continue; // ARG before FROM
      stage.instructions.push(instruction);
    }
  }
  return stages;
}

/** `["a", "b"]` (exec form) → its words; shell form → undefined. */
function execForm(args: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined;
  try {
    const value: unknown = JSON.parse(args);
    return Array.isArray(value) && value.every((v) => typeof v === 'string') ? (value as string[]) : undefined;
  } catch {
    return undefined;
  }
}

// node:24, node:24.x or node:24.x.y, a slim variant, optionally pinned by digest.
const OFFICIAL_NODE_24_SLIM = /^(?:docker\.io\/(?:library\/)?)?node:24(?:\.\d+){0,2}-(?:[a-z]+-)?slim(?:@sha256:[0-9a-f]{64})?$/;

function dockerfileProblems(text: string): string[] {
  const problems: string[] = [];
  const stages = parseDockerfile(text);
  const names = new Set(stages.flatMap((s) => (s.name === undefined ? [] : [s.name])));
  if (stages.length < 2) problems.push('not multi-stage: expected at least 2 FROM');
  for (const stage of stages) {
    if (names.has(stage.base)) continue; // FROM an earlier stage
    if (!OFFICIAL_NODE_24_SLIM.test(stage.base)) problems.push(`base image ${stage.base} is not an official node:24 slim tag`);
  }
  const all = stages.flatMap((s) => s.instructions);
  const runs = all.filter((i) => i.keyword === 'RUN').map((i) => i.args);
  if (!runs.some((r) => /\bnpm ci\b[^&;|]*(--omit=dev|--production)\b/.test(r))) problems.push('no `npm ci --omit=dev` (production dependencies only)');
  if (runs.some((r) => /\bnpm (install|i)\b/.test(r))) problems.push('`npm install` instead of `npm ci` (the lockfile must decide)');
  for (const add of all.filter((i) => i.keyword === 'ADD')) {
    if (/\bhttps?:\/\//.test(add.args)) problems.push(`line ${add.line}: ADD of a URL`);
  }

  const final = stages.at(-1);
  if (final === undefined) return [...problems, 'no FROM'];
  const index = (keyword: string) => final.instructions.findLastIndex((i) => i.keyword === keyword);
  const cmdAt = index('CMD');
  const userAt = index('USER');
  const cmd = final.instructions[cmdAt];
  const user = final.instructions[userAt];
  if (cmd === undefined) {
    problems.push('the final stage has no CMD');
  } else {
    const words = execForm(cmd.args);
    if (words === undefined) problems.push('CMD is not in exec form (signals would go to a shell, not to node)');
    else {
      // `node [--v8-flag ...] src/main.ts serve`
      const script = words.slice(1).filter((w) => !w.startsWith('--'));
      if (words[0] !== 'node' || script.slice(0, 2).join(' ') !== 'src/main.ts serve') problems.push(`CMD runs ${words.join(' ')}, not node src/main.ts serve`);
    }
  }
  if (user === undefined || userAt > cmdAt) problems.push('no USER before CMD in the final stage');
  else if (/^(root|0)(:|$)/.test(user.args)) problems.push('USER is root');
  else if (!/^\d+(:\d+)?$/.test(user.args)) problems.push('USER is not numeric (Kubernetes runAsNonRoot cannot verify a name)');
  const healthcheck = final.instructions.find((i) => i.keyword === 'HEALTHCHECK');
  if (healthcheck === undefined || /^NONE$/i.test(healthcheck.args)) problems.push('no HEALTHCHECK');
  else {
    if (!healthcheck.args.includes('/healthz')) problems.push('HEALTHCHECK does not hit /healthz');
    if (/\b(curl|wget)\b/.test(healthcheck.args)) problems.push('HEALTHCHECK uses curl/wget, which slim images lack');
  }
  const exposed = final.instructions.filter((i) => i.keyword === 'EXPOSE').flatMap((i) => i.args.split(/\s+/).map((p) => p.replace(/\/tcp$/, '')));
  if (!exposed.includes('8080')) problems.push('8080 is not exposed');
  if (!final.instructions.some((i) => i.keyword === 'ENV' && /\bNODE_ENV=production\b/.test(i.args))) problems.push('NODE_ENV=production is not set');
  return problems;
}

const stages = parseDockerfile(DOCKERFILE);
const final = stages.at(-1);

describe('Dockerfile', () => {
  it('follows every rule', () => {
    assert.deepEqual(dockerfileProblems(DOCKERFILE), []);
  });

  it('has a dependency stage and a runtime stage on the same official node:24 slim image', () => {
    assert.ok(stages.length >= 2);
    assert.equal(new Set(stages.map((s) => s.base)).size, 1, 'one base image, so the runtime is the Node that installed the dependencies');
    assert.match(final?.base ?? '', OFFICIAL_NODE_24_SLIM);
  });

  it('runs as uid 10001, created explicitly, from WORKDIR /app', () => {
    const instructions = final?.instructions ?? [];
    assert.equal(instructions.findLast((i) => i.keyword === 'USER')?.args, '10001:10001');
    assert.ok(instructions.some((i) => i.keyword === 'RUN' && /useradd\b.*--uid 10001\b/.test(i.args)));
    assert.equal(instructions.findLast((i) => i.keyword === 'WORKDIR')?.args, '/app');
  });

  it('copies node_modules from the dependency stage, and only src, config and package.json besides', () => {
    const copies = (final?.instructions ?? []).filter((i) => i.keyword === 'COPY').map((i) => i.args);
    const deps = stages.find((s) => s !== final)?.name;
    assert.ok(deps !== undefined, 'the dependency stage is named');
    assert.ok(copies.some((c) => c.startsWith(`--from=${deps} `) && c.includes('node_modules')));
    const local = copies.filter((c) => !c.startsWith('--from=')).map((c) => c.split(/\s+/).slice(0, -1).join(' '));
    assert.deepEqual(local.sort(), ['config', 'package.json', 'src']);
  });

  it('gives the user a writable /app/data volume', () => {
    const instructions = final?.instructions ?? [];
    assert.ok(instructions.some((i) => i.keyword === 'RUN' && /mkdir -p \/app\/data\b/.test(i.args) && /chown 10001:10001 \/app\/data\b/.test(i.args)));
    assert.ok(instructions.some((i) => i.keyword === 'VOLUME' && i.args.includes('/app/data')));
  });

  it('exposes the API and the admin port, and serves the config the chart mounts', () => {
    const exposed = (final?.instructions ?? []).filter((i) => i.keyword === 'EXPOSE').flatMap((i) => i.args.split(/\s+/));
    assert.deepEqual(exposed.sort(), ['8080', '9090']);
    const cmd = execForm((final?.instructions ?? []).findLast((i) => i.keyword === 'CMD')?.args ?? '');
    assert.deepEqual(cmd, ['node', '--max-semi-space-size=4', '--heap-growing-percent=50', '--no-allocation-site-pretenuring', 'src/main.ts', 'serve', '--config', '/app/config/svc.yaml']);
    // The compile cache is filled at build time, so the service does not strip types at start.
    assert.match(DOCKERFILE, /^ENV NODE_COMPILE_CACHE=\S+$/m);
    assert.match(DOCKERFILE, /^RUN node src\/main\.ts --help/m);
    // The same environment `npm start` gives the service.
    assert.match(DOCKERFILE, /^ENV MALLOC_ARENA_MAX=1$/m);
    assert.match(DOCKERFILE, /^ENV MALLOC_MMAP_THRESHOLD_=32768$/m);
    assert.match(PACKAGE.scripts.start, /\bMALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=32768 node --max-semi-space-size=4 --heap-growing-percent=50 --no-allocation-site-pretenuring src\/main\.ts serve\b/);
  });

  it('checks health with node itself', () => {
    const healthcheck = (final?.instructions ?? []).find((i) => i.keyword === 'HEALTHCHECK')?.args ?? '';
    assert.match(healthcheck, /CMD \["node", "-e", .*fetch\('http:\/\/127\.0\.0\.1:8080\/healthz'\)/);
  });
});

describe('the Dockerfile checks catch', () => {
  const good = DOCKERFILE;

  it('a single stage', () => {
    const single = 'FROM node:24-bookworm-slim\nRUN npm ci --omit=dev\nUSER 10001\nEXPOSE 8080\nENV NODE_ENV=production\nHEALTHCHECK CMD ["node","-e","fetch(\'http://127.0.0.1:8080/healthz\')"]\nCMD ["node","src/main.ts","serve"]\n';
    assert.deepEqual(dockerfileProblems(single), ['not multi-stage: expected at least 2 FROM']);
  });

  it('a base image that is not node:24 slim', () => {
    assert.match(dockerfileProblems(good.replaceAll('node:24-bookworm-slim', 'node:22-bookworm-slim')).join(), /node:22-bookworm-slim is not an official node:24 slim/);
    assert.match(dockerfileProblems(good.replaceAll('node:24-bookworm-slim', 'node:24-bookworm')).join(), /is not an official node:24 slim/);
    assert.deepEqual(dockerfileProblems(good.replaceAll('node:24-bookworm-slim', `node:24.11.1-trixie-slim@sha256:${'a'.repeat(64)}`)), []);
  });

  it('root, a missing USER, or USER after CMD', () => {
    assert.match(dockerfileProblems(good.replace('USER 10001:10001', 'USER root')).join(), /USER is root/);
    assert.match(dockerfileProblems(good.replace('USER 10001:10001', 'USER svc')).join(), /not numeric/);
    assert.match(dockerfileProblems(good.replace('USER 10001:10001', '')).join(), /no USER before CMD/);
    assert.match(dockerfileProblems(`${good.replace('USER 10001:10001', '')}\nUSER 10001\n`).join(), /no USER before CMD/);
  });

  it('development dependencies, npm install, and ADD of a URL', () => {
    assert.match(dockerfileProblems(good.replace('--omit=dev ', '')).join(), /npm ci --omit=dev/);
    assert.match(dockerfileProblems(good.replace('npm ci --omit=dev', 'npm install --omit=dev')).join(), /npm install/);
    assert.match(dockerfileProblems(`${good}\nADD https://example.com/x.tgz /tmp/\n`).join(), /ADD of a URL/);
  });

  it('a missing or curl-based HEALTHCHECK, a shell-form or wrong CMD, no EXPOSE 8080', () => {
    const withoutHealthcheck = good.replace(/^HEALTHCHECK[\s\S]*?\n(?=\n)/m, '');
    assert.notEqual(withoutHealthcheck, good);
    assert.match(dockerfileProblems(withoutHealthcheck).join(), /no HEALTHCHECK/);
    assert.match(dockerfileProblems(good.replace(/CMD \["node", "-e".*\]/, 'CMD curl -f http://127.0.0.1:8080/healthz')).join(), /curl/);
    assert.match(dockerfileProblems(good.replace(/^CMD \[.*$/m, 'CMD ["npm", "start"]')).join(), /not node src\/main.ts serve/);
    assert.match(dockerfileProblems(good.replace(/^CMD \[.*$/m, 'CMD node src/main.ts serve')).join(), /exec form/);
    assert.match(dockerfileProblems(good.replace('EXPOSE 8080 9090', 'EXPOSE 9090')).join(), /8080 is not exposed/);
  });
});

describe('.dockerignore', () => {
  const entries = DOCKERIGNORE.split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));

  it('keeps dependencies, local data, version control, tests and benchmarks out of the build context', () => {
    for (const entry of ['node_modules', 'data', '.git', 'test', 'bench']) assert.ok(entries.includes(entry), `.dockerignore lacks ${entry}`);
    for (const entry of ['*.db', 'master.key']) assert.ok(entries.includes(entry), `.dockerignore lacks ${entry} (a local store or key anywhere in the tree)`);
  });

  it('does not exclude what the image copies', () => {
    for (const needed of ['src', 'config', 'package.json', 'package-lock.json']) {
      assert.ok(!entries.some((e) => e === needed || e === `${needed}/` || e === `/${needed}`), `.dockerignore excludes ${needed}`);
    }
  });
});
