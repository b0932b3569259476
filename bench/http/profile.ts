/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`): self time per function and
 * inclusive time per function of this repository, so a profile can be read in a terminal.
 *
 *   node bench/http/profile.ts <file.cpuprofile> [top]
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Entry {
  /** `function file:line` (line 1-based). */
  readonly name: string;
  readonly ms: number;
  readonly share: number;
}

export interface ProfileSummary {
  readonly totalMs: number;
  readonly idleMs: number;
  readonly gcMs: number;
  readonly self: Entry[];
  /** Inclusive time of functions in src/ (a function on the stack twice counts once). */
  readonly inclusiveProject: Entry[];
  /** Self time grouped by file (or by `(native)` / `(program)` / `(garbage collector)`). */
  readonly byFile: Entry[];
}

const ROOT = new URL('../../', import.meta.url).pathname;

function where(frame: CallFrame): string {
  if (frame.url === '') return '';
  const path = frame.url.startsWith('file://') ? new URL(frame.url).pathname : frame.url;
  const shown = path.startsWith(ROOT) ? relative(ROOT, path) : path;
  return `${shown}:${frame.lineNumber + 1}`;
}

function nameOf(frame: CallFrame): string {
  const at = where(frame);
  return `${frame.functionName === '' ? '(anonymous)' : frame.functionName}${at === '' ? '' : ` ${at}`}`;
}

function fileOf(frame: CallFrame): string {
  if (frame.url === '') return frame.functionName === '' ? '(native)' : frame.functionName.startsWith('(') ? frame.functionName : '(native)';
  const at = where(frame);
  return at.slice(0, at.lastIndexOf(':'));
}

export function summarizeProfile(path: string): ProfileSummary {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  // timeDeltas[i] is the time before sample i; it is attributed to the sample it ends.
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]!;
    selfUs.set(id, (selfUs.get(id) ?? 0) + Math.max(0, profile.timeDeltas[i] ?? 0));
  }
  let totalUs = 0;
  for (const v of selfUs.values()) totalUs += v;

  const add = (map: Map<string, number>, key: string, us: number) => map.set(key, (map.get(key) ?? 0) + us);
  const self = new Map<string, number>();
  const files = new Map<string, number>();
  let idleUs = 0;
  let gcUs = 0;
  for (const [id, us] of selfUs) {
    const frame = byId.get(id)!.callFrame;
    add(self, nameOf(frame), us);
    add(files, fileOf(frame), us);
    if (frame.functionName === '(idle)') idleUs += us;
    if (frame.functionName === '(garbage collector)') gcUs += us;
  }

  // Inclusive time: walk the tree once, carrying the names already on the stack.
  const inclusive = new Map<string, number>();
  const subtree = new Map<number, number>();
  const total = (node: ProfileNode): number => {
    let us = selfUs.get(node.id) ?? 0;
    for (const c of node.children ?? []) us += total(byId.get(c)!);
    subtree.set(node.id, us);
    return us;
  };
  const root = profile.nodes[0]!;
  total(root);
  const walk = (node: ProfileNode, onStack: ReadonlySet<string>) => {
    const name = nameOf(node.callFrame);
    let next = onStack;
    if (where(node.callFrame).startsWith('src/') && !onStack.has(name)) {
      add(inclusive, name, subtree.get(node.id)!);
      next = new Set(onStack).add(name);
    }
    for (const c of node.children ?? []) walk(byId.get(c)!, next);
  };
  walk(root, new Set());

  const busyUs = totalUs - idleUs;
  const entries = (map: Map<string, number>) =>
    [...map]
      .map(([name, us]) => ({ name, ms: Math.round(us / 100) / 10, share: busyUs > 0 ? Math.round((us / busyUs) * 1000) / 10 : 0 }))
      .sort((a, b) => b.ms - a.ms);
  return {
    totalMs: Math.round(totalUs / 1000),
    idleMs: Math.round(idleUs / 1000),
    gcMs: Math.round(gcUs / 1000),
    self: entries(self).filter((e) => !e.name.startsWith('(idle)')),
    inclusiveProject: entries(inclusive),
    byFile: entries(files).filter((e) => e.name !== '(idle)'),
  };
}

export function formatProfile(s: ProfileSummary, top: number): string {
  const lines = [`profile: ${s.totalMs} ms sampled, ${s.idleMs} ms idle, ${s.gcMs} ms GC; shares are of busy time`];
  const table = (title: string, entries: readonly Entry[]) => {
    lines.push('', title);
    for (const e of entries.slice(0, top)) lines.push(`${e.share.toFixed(1).padStart(6)}%  ${e.ms.toFixed(1).padStart(9)} ms  ${e.name}`);
  };
  table('self time by function', s.self);
  table('self time by file', s.byFile);
  table('inclusive time, functions in src/', s.inclusiveProject);
  return lines.join('\n');
}

if (import.meta.main) {
  const [file, top] = process.argv.slice(2);
  if (file === undefined) throw new Error('usage: node bench/http/profile.ts <file.cpuprofile> [top]');
  console.log(formatProfile(summarizeProfile(file), Number(top ?? 30)));
}
