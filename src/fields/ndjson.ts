/**
 * Newline-delimited JSON (`application/x-ndjson`): each line is its own document, run
 * through its own JsonTransformer, so a stream of records is transformed line by line in
 * constant memory. Blank lines pass through; `\r\n` line ends are kept as they are.
 */
import type { FieldMatcher } from './paths.ts';
import { JsonTransformer, type ValueHandler } from './transformer.ts';

export interface ChunkTransformer {
  push(chunk: Buffer, out: Buffer[]): void;
  end(out: Buffer[]): void;
}

export class NdjsonTransformer implements ChunkTransformer {
  private readonly matcher: FieldMatcher;
  private readonly handler: ValueHandler;
  private line: JsonTransformer | null = null;
  /** Whitespace seen at the start of a line before its first value byte. */
  private pendingBlank: Buffer[] = [];

  constructor(matcher: FieldMatcher, handler: ValueHandler) {
    this.matcher = matcher;
    this.handler = handler;
  }

  push(chunk: Buffer, out: Buffer[]): void {
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(0x0a, start);
      const end = nl === -1 ? chunk.length : nl;
      this.feed(chunk.subarray(start, end), out);
      if (nl === -1) break;
      this.finishLine(out);
      out.push(NEWLINE);
      start = nl + 1;
    }
  }

  end(out: Buffer[]): void {
    this.finishLine(out);
  }

  private feed(part: Buffer, out: Buffer[]): void {
    if (part.length === 0) return;
    if (this.line === null) {
      // Until the line shows a non-blank byte it may be a blank line, which is no document.
      if (isBlank(part)) {
        this.pendingBlank.push(part);
        return;
      }
      this.line = new JsonTransformer(this.matcher, this.handler);
      for (const blank of this.pendingBlank) this.line.push(blank, out);
      this.pendingBlank = [];
    }
    this.line.push(part, out);
  }

  private finishLine(out: Buffer[]): void {
    if (this.line !== null) {
      this.line.end(out);
      this.line = null;
    } else {
      for (const blank of this.pendingBlank) out.push(blank);
    }
    this.pendingBlank = [];
  }
}

const NEWLINE = Buffer.from('\n');

function isBlank(part: Buffer): boolean {
  for (const c of part) if (c !== 0x20 && c !== 0x09 && c !== 0x0d) return false;
  return true;
}
