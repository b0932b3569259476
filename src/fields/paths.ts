/**
 * The field-path DSL of DESIGN §6, compiled once into a matcher the transformer walks
 * without allocating: `ssn, card.number, items.*.email, tags`.
 *
 * Paths become a trie; the trie is determinised lazily into `PathState`s (a state is the
 * set of trie nodes reachable at one position of the document). A state answers, for a
 * key or an array index, the state of the child value, so the transformer keeps one
 * state per open container and never re-reads the path list.
 */
import { InvalidFieldPathsError } from '../errors.ts';

export const MAX_PATHS = 128;
export const MAX_SEGMENTS = 64;
export const MAX_HEADER_BYTES = 8 * 1024;
/** Bounds the lazy determinisation so adversarial wildcard mixes cannot grow without end. */
const MAX_STATES = 4096;

const WILDCARD = Symbol('wildcard');
type Segment = string | typeof WILDCARD;

class TrieNode {
  terminal = false;
  readonly children = new Map<string, TrieNode>();
  wildcard: TrieNode | null = null;
}

/**
 * One position in the document relative to the compiled paths.
 * `terminal`: the value here is matched (encrypted or decrypted whole).
 * `dead`: nothing at or below this position can match.
 * `anyToken`: decrypt-without-fields mode; every string value below is a token candidate.
 */
export interface PathState {
  readonly terminal: boolean;
  readonly dead: boolean;
  readonly anyToken: boolean;
  /** The state of the value under object key `key`. */
  next(key: string): PathState;
  /** `next` for a key given as its raw, unescaped UTF-8 bytes `buf[start..end)`. */
  nextBytes(buf: Buffer, start: number, end: number): PathState;
  /** The state of the array element at `index`. */
  index(index: number): PathState;
}

/** A set of trie nodes reachable at one position: the states of compiled paths. */
class TrieState implements PathState {
  readonly terminal: boolean;
  readonly dead: boolean;
  readonly anyToken: boolean;
  private readonly nodes: readonly TrieNode[];
  private readonly owner: FieldMatcher;
  private readonly byKey = new Map<string, PathState>();
  private other: PathState | null = null;
  /** The keys some path names at this position, as UTF-8 bytes (built on first use). */
  private explicit: Array<{ key: string; bytes: Buffer }> | null = null;

  constructor(owner: FieldMatcher, nodes: readonly TrieNode[], anyToken: boolean) {
    this.owner = owner;
    this.nodes = nodes;
    this.anyToken = anyToken;
    this.terminal = nodes.some((n) => n.terminal);
    this.dead = !anyToken && nodes.every((n) => n.children.size === 0 && n.wildcard === null);
  }

  /** The state of the value under object key `key`. */
  next(key: string): PathState {
    if (this.anyToken) return this;
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    for (const node of this.nodes) {
      if (node.children.has(key)) return this.cacheKey(key);
    }
    return this.otherState();
  }

  /**
   * `next` for a key given as its raw, unescaped UTF-8 bytes: compared with the few keys
   * the paths name, so keys nobody asked for are never decoded into strings.
   */
  nextBytes(buf: Buffer, start: number, end: number): PathState {
    if (this.anyToken) return this;
    if (this.explicit === null) {
      const keys = new Set<string>();
      for (const node of this.nodes) for (const key of node.children.keys()) keys.add(key);
      this.explicit = [...keys].map((key) => ({ key, bytes: ownBytes(key) }));
    }
    const length = end - start;
    for (const { key, bytes } of this.explicit) {
      if (bytes.length === length && sameBytes(bytes, buf, start)) return this.next(key);
    }
    return this.otherState();
  }

  /** The state of the array element at `index`: an all-digit segment names an index. */
  index(index: number): PathState {
    if (this.anyToken) return this;
    return this.next(String(index));
  }

  private cacheKey(key: string): PathState {
    const targets: TrieNode[] = [];
    for (const node of this.nodes) {
      const child = node.children.get(key);
      if (child !== undefined) targets.push(child);
      if (node.wildcard !== null) targets.push(node.wildcard);
    }
    const state = this.owner.stateFor(targets);
    this.byKey.set(key, state);
    return state;
  }

  private otherState(): PathState {
    if (this.other === null) {
      const targets: TrieNode[] = [];
      for (const node of this.nodes) if (node.wildcard !== null) targets.push(node.wildcard);
      this.other = this.owner.stateFor(targets);
    }
    return this.other;
  }
}

/** A compiled set of field paths. Build once per distinct header value and reuse. */
export class FieldMatcher {
  readonly root: PathState;
  readonly paths: readonly string[];
  private readonly states = new Map<string, PathState>();
  private readonly nodeIds = new Map<TrieNode, number>();
  private readonly dead: PathState;

  private constructor(paths: readonly string[], trie: TrieNode | null, root?: PathState) {
    this.paths = paths;
    this.dead = new TrieState(this, [], false);
    this.root = root ?? (trie === null ? new TrieState(this, [], true) : this.stateFor([trie]));
  }

  /** Matches every string value that looks like a token (decrypt without x-svc-fields). */
  static anyToken(): FieldMatcher {
    return new FieldMatcher([], null);
  }

  /** Exactly these concrete paths, each a list of literal segments (`*` is a key like any other). */
  static exact(paths: readonly (readonly string[])[]): FieldMatcher {
    return FieldMatcher.compile(paths, paths.map((segments) => segments.map(escapeSegment).join('.')));
  }

  /** A matcher walking states of its own (the relay guard's keys at any depth). */
  static fromRoot(names: readonly string[], root: PathState): FieldMatcher {
    return new FieldMatcher(names, null, root);
  }

  static compile(paths: readonly (readonly Segment[])[], names: readonly string[]): FieldMatcher {
    const root = new TrieNode();
    for (const segments of paths) {
      let node = root;
      for (const segment of segments) {
        if (segment === WILDCARD) {
          node.wildcard ??= new TrieNode();
          node = node.wildcard;
        } else {
          let child = node.children.get(segment);
          if (child === undefined) {
            child = new TrieNode();
            node.children.set(segment, child);
          }
          node = child;
        }
      }
      node.terminal = true;
    }
    return new FieldMatcher(names, root);
  }

  /** @internal Interns the state for a set of trie nodes. */
  stateFor(nodes: readonly TrieNode[]): PathState {
    if (nodes.length === 0) return this.dead;
    const ids = [...new Set(nodes.map((n) => this.idOf(n)))].sort((a, b) => a - b);
    const key = ids.join(',');
    let state = this.states.get(key);
    if (state === undefined) {
      if (this.states.size >= MAX_STATES) throw new InvalidFieldPathsError('the paths are too complex');
      state = new TrieState(this, [...new Set(nodes)], false);
      this.states.set(key, state);
    }
    return state;
  }

  private idOf(node: TrieNode): number {
    let id = this.nodeIds.get(node);
    if (id === undefined) {
      id = this.nodeIds.size;
      this.nodeIds.set(node, id);
    }
    return id;
  }
}

/**
 * Parses an `x-svc-fields` value (or a configuration's `fields` list). Returns null when
 * no path is given, so the caller can fall back to its default.
 */
export function compileFieldPaths(input: string | readonly string[]): FieldMatcher | null {
  const text = typeof input === 'string' ? input : input.join(',');
  if (Buffer.byteLength(text) > MAX_HEADER_BYTES) {
    throw new InvalidFieldPathsError(`it is longer than ${MAX_HEADER_BYTES} bytes`);
  }
  const names: string[] = [];
  const parsed: Segment[][] = [];
  for (const entry of text.split(',')) {
    const path = entry.trim();
    if (path === '') continue;
    if (parsed.length === MAX_PATHS) throw new InvalidFieldPathsError(`it lists more than ${MAX_PATHS} paths`);
    parsed.push(parsePath(path));
    names.push(path);
  }
  if (parsed.length === 0) return null;
  return FieldMatcher.compile(parsed, names);
}

/**
 * One path in either spelling of DESIGN §15's one path language: dotted (`card.number`,
 * `items.*.sku`) or bracketed as form names are (`card[number]`, `items[*][sku]`,
 * `items[0][sku]`), or both (`order.items[0].sku`). A bracket holds one segment, read
 * literally up to its `]` (`a[b.c]` is `a` then `b.c`); `[]` and `[*]` are the wildcard.
 */
function parsePath(path: string): Segment[] {
  const segments: Segment[] = [];
  let current = '';
  let escaped = false;
  let wildcardOnly = false;
  let literal = false;
  /** A `]` just closed a segment: only `[`, `.` or the end may follow. */
  let afterBracket = false;
  const push = (segment: Segment) => {
    segments.push(segment);
    if (segments.length > MAX_SEGMENTS) {
      throw new InvalidFieldPathsError(`the path "${clip(path)}" has more than ${MAX_SEGMENTS} segments`);
    }
  };
  const close = () => {
    if (wildcardOnly && !literal && current === '*') push(WILDCARD);
    else if (current === '') throw new InvalidFieldPathsError(`the path "${clip(path)}" has an empty segment`);
    else push(current);
    current = '';
    wildcardOnly = false;
    literal = false;
  };
  const insideSegment = () => new InvalidFieldPathsError(`the path "${clip(path)}" uses "*" inside a segment; write "\\*" for a literal asterisk`);
  const chars = [...path];
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i]!;
    if (afterBracket) {
      afterBracket = false;
      if (ch === '.') continue;
      if (ch !== '[') {
        throw new InvalidFieldPathsError(`the path "${clip(path)}" has "${ch}" after a "]": a "]" is followed by "[", "." or the end; write "\\]" for a literal bracket`);
      }
      i = readBracket(path, chars, i + 1, push);
      afterBracket = true;
      continue;
    }
    if (escaped) {
      if (wildcardOnly) throw insideSegment();
      if (!ESCAPABLE.has(ch)) {
        throw new InvalidFieldPathsError(`the path "${clip(path)}" has an unknown escape "\\${ch}"`);
      }
      current += ch;
      literal = true;
      escaped = false;
    } else if (ch === '\\') {
      escaped = true;
    } else if (ch === '.') {
      close();
    } else if (ch === '[') {
      // `[` opens a segment after a name or after another bracket, never at the start.
      if (current === '' && !literal) {
        throw new InvalidFieldPathsError(`the path "${clip(path)}" has a "[" that follows no name; write "\\[" for a literal bracket`);
      }
      close();
      i = readBracket(path, chars, i + 1, push);
      afterBracket = true;
    } else if (ch === ']') {
      throw new InvalidFieldPathsError(`the path "${clip(path)}" has a "]" without its "["; write "\\]" for a literal bracket`);
    } else if (ch === '*') {
      // A bare `*` segment is the wildcard; a `*` inside other text would read like a glob
      // we do not support, so it must be written `\*`.
      if (current !== '' || literal) throw insideSegment();
      current = '*';
      wildcardOnly = true;
    } else {
      if (wildcardOnly) throw insideSegment();
      current += ch;
    }
  }
  if (escaped) throw new InvalidFieldPathsError(`the path "${clip(path)}" ends with a lone "\\"`);
  if (!afterBracket) close();
  return segments;
}

/** What `\` may escape. */
const ESCAPABLE = new Set(['.', '*', '\\', '[', ']']);

/**
 * Reads one bracketed segment from `chars[from]` to its `]`, pushes it and returns the
 * index of the `]`. Inside, only `\` is special (`*` alone is the wildcard).
 */
function readBracket(path: string, chars: readonly string[], from: number, push: (segment: Segment) => void): number {
  let text = '';
  let literal = false;
  for (let i = from; i < chars.length; i++) {
    const ch = chars[i]!;
    if (ch === '\\') {
      const next = chars[i + 1];
      if (next === undefined) break;
      if (!ESCAPABLE.has(next)) throw new InvalidFieldPathsError(`the path "${clip(path)}" has an unknown escape "\\${next}"`);
      text += next;
      literal = true;
      i++;
    } else if (ch === ']') {
      if (!literal && (text === '' || text === '*')) push(WILDCARD);
      else if (!literal && text.includes('*')) {
        throw new InvalidFieldPathsError(`the path "${clip(path)}" uses "*" inside a segment; write "\\*" for a literal asterisk`);
      } else push(text);
      return i;
    } else if (ch === '[') {
      throw new InvalidFieldPathsError(`the path "${clip(path)}" has a "[" inside brackets; write "\\[" for a literal bracket`);
    } else {
      text += ch;
    }
  }
  throw new InvalidFieldPathsError(`the path "${clip(path)}" has a "[" without its "]"`);
}

/** The segments of a concrete path written by `escapeSegment` and `.` (`a\\.b.0` → `a.b`, `0`). */
export function splitPath(path: string): string[] {
  const segments: string[] = [];
  let current = '';
  for (let i = 0; i < path.length; i++) {
    const c = path[i]!;
    if (c === '\\' && i + 1 < path.length) current += path[++i];
    else if (c === '.') {
      segments.push(current);
      current = '';
    } else current += c;
  }
  segments.push(current);
  return segments;
}

/** Writes a concrete path the way the DSL reads it, for error keys (`items.0.email`). */
export function escapeSegment(segment: string): string {
  return segment.replace(/[\\.*[\]]/g, (c) => `\\${c}`);
}

function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 64)}…` : s;
}

/**
 * `a` equals `b[start..start + a.length]`. Keys are short: a plain loop beats
 * `Buffer#compare`, whose range arguments cost an allocation per call.
 */
function sameBytes(a: Buffer, b: Buffer, start: number): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[start + i]) return false;
  return true;
}

/**
 * The UTF-8 bytes of `key` in a buffer of their own: `Buffer.from` would slice Node's
 * shared 8 KiB pool, and a matcher kept in the field-path cache would then keep a whole
 * slab alive for a few bytes.
 */
function ownBytes(key: string): Buffer {
  const bytes = Buffer.allocUnsafeSlow(Buffer.byteLength(key, 'utf8'));
  bytes.write(key, 'utf8');
  return bytes;
}
