/**
 * Newline-delimited JSON (`application/x-ndjson`): each line is its own document, run
 * through its own JsonTransformer, so a stream of records is transformed line by line in
 * constant memory. Blank lines pass through; `\r\n` line ends are kept as they are.
 */
import type { FieldMatcher } from './paths.ts';
import { JsonTransformer } from './transformer.ts';
import { UNLIMITED, type CaptureLimits, type ChunkTransformer, type ValueHandler } from './value.ts';

export type { ChunkTransformer } from './value.ts';

export class NdjsonTransformer implements ChunkTransformer {
  private readonly matcher: FieldMatcher;
  private readonly handler: ValueHandler;
  private readonly limits: CaptureLimits;
  private line: JsonTransformer | null = null;

  constructor(matcher: FieldMatcher, handler: ValueHandler, limits: CaptureLimits = UNLIMITED) {
    this.matcher = matcher;
    this.handler = handler;
    this.limits = limits;
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
      // Its whitespace goes out at once: held, a line of spaces could grow without bound.
      if (isBlank(part)) {
        out.push(part);
        return;
      }
      this.line = new JsonTransformer(this.matcher, this.handler, this.limits);
    }
    this.line.push(part, out);
  }

  private finishLine(out: Buffer[]): void {
    if (this.line !== null) {
      this.line.end(out);
      this.line = null;
    }
  }
}

const NEWLINE = Buffer.from('\n');

function isBlank(part: Buffer): boolean {
  for (const c of part) if (c !== 0x20 && c !== 0x09 && c !== 0x0d) return false;
  return true;
}
