/**
 * Test support: writes a JSON value with varied spelling (whitespace, escapes, number
 * forms) so byte-preservation properties see more than JSON.stringify's canonical output.
 */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 0x100000000;
  };
}

const WS = [' ', '\n', '\t', '\r', '  ', '\n  '];

function ws(r: () => number): string {
  return r() < 0.3 ? WS[Math.floor(r() * WS.length)]! : '';
}

function str(s: string, r: () => number, canonical: boolean): string {
  if (canonical) return JSON.stringify(s);
  let out = '"';
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\' || code < 0x20) {
      out += r() < 0.5 ? JSON.stringify(ch).slice(1, -1) : `\\u${code.toString(16).padStart(4, '0')}`;
    } else if (r() < 0.05 && code < 0x10000) {
      out += `\\u${code.toString(16).padStart(4, r() < 0.5 ? '0' : '0').toUpperCase()}`;
    } else if (ch === '/' && r() < 0.5) {
      out += '\\/';
    } else {
      out += ch;
    }
  }
  return `${out}"`;
}

function num(n: number, r: () => number): string {
  const base = Object.is(n, -0) ? '-0' : JSON.stringify(n);
  if (!/^-?\d+$/.test(base) || r() < 0.7) return base;
  const pick = Math.floor(r() * 4);
  if (pick === 0) return `${base}.0`;
  if (pick === 1) return `${base}e0`;
  if (pick === 2) return `${base}E+00`;
  return `${base}.000`;
}

/** Serialises `v`; when `canonicalStrings` is set, strings use JSON.stringify's spelling. */
export function spell(v: Json, r: () => number, canonicalStrings = false): string {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'number') return num(v, r);
  if (typeof v === 'string') return str(v, r, canonicalStrings);
  if (Array.isArray(v)) {
    if (v.length === 0) return `[${ws(r)}]`;
    return `[${v.map((x) => `${ws(r)}${spell(x, r, canonicalStrings)}${ws(r)}`).join(',')}]`;
  }
  const keys = Object.keys(v);
  if (keys.length === 0) return `{${ws(r)}}`;
  return `{${keys.map((k) => `${ws(r)}${str(k, r, false)}${ws(r)}:${ws(r)}${spell(v[k]!, r, canonicalStrings)}${ws(r)}`).join(',')}}`;
}

/** Splits `buf` at random points into chunks (at least one). */
export function split(buf: Buffer, r: () => number): Buffer[] {
  const parts: Buffer[] = [];
  let i = 0;
  while (i < buf.length) {
    const size = 1 + Math.floor(r() * (r() < 0.5 ? 4 : 64));
    parts.push(buf.subarray(i, i + size));
    i += size;
  }
  return parts.length ? parts : [buf];
}
