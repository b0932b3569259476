/**
 * One body's transform, whatever the endpoint: a format's transformer driven chunk by
 * chunk, the handlers' failures checked after every chunk so a bad value stops the stream
 * at once, and the two ways of feeding it from a request — whole (decrypt: nothing leaves
 * before every token is checked) or streamed (encrypt and forward).
 */
import type { SvcError, ValidationError } from '../errors.ts';
import type { RevealCounts } from '../fields/reveal.ts';
import type { ChunkTransformer, ValueHandler } from '../fields/value.ts';
import { joinPieces } from '../fields/transformer.ts';
import { bodyChunks, consumeBody } from '../http/body.ts';
import type { RequestContext } from '../http/context.ts';

export type Mode = 'encrypt' | 'decrypt';

/** A value handler that counts its replacements and collects per-field failures. */
export interface CollectingHandler extends ValueHandler {
  readonly count: number;
  /** A decrypt's values per reveal level (DESIGN §14). */
  readonly reveal?: RevealCounts;
  /**
   * The error to answer with when any value failed, else null. `leaving` is false when
   * nothing transformed so far can leave before the next check (a body held whole): a
   * handler may then skip what only matters for output on its way out (KeyInUse).
   */
  failure(leaving?: boolean): ValidationError | SvcError | null;
}

export class BodyTransform {
  readonly mode: Mode;
  /** The handler whose count is the number of fields transformed. */
  readonly handler: CollectingHandler;
  private readonly transformer: ChunkTransformer;
  /** Every handler whose failures stop the body (the guard's, after a route's). */
  private readonly checked: readonly CollectingHandler[];
  /** Body bytes pushed so far. */
  bytes = 0;
  /** Told the count when the body is done, for `x-svc-fields-transformed`. */
  private reportTo: RequestContext | null = null;

  constructor(mode: Mode, transformer: ChunkTransformer, handler: CollectingHandler, others: readonly CollectingHandler[] = []) {
    this.mode = mode;
    this.transformer = transformer;
    this.handler = handler;
    this.checked = others.length === 0 ? [handler] : [handler, ...others];
  }

  /** `leaving`: whether `out` may leave before `end()` (false when the body is held whole). */
  push(chunk: Buffer, out: Buffer[], leaving = true): void {
    this.bytes += chunk.length;
    this.transformer.push(chunk, out);
    this.check(leaving);
  }

  end(out: Buffer[]): void {
    this.transformer.end(out);
    this.check(true);
    if (this.reportTo !== null) {
      // Added to what the request's query string had transformed, if anything.
      this.reportTo.fieldsTransformed = (this.reportTo.fieldsTransformed ?? 0) + this.handler.count;
      this.reportTo.reveal = this.handler.reveal ?? null;
    }
  }

  /** Sets `ctx.fieldsTransformed` (and a decrypt's `ctx.reveal`) when the body has been transformed whole (DESIGN §13, §14). */
  reportCountTo(ctx: RequestContext): this {
    this.reportTo = ctx;
    return this;
  }

  private check(leaving: boolean): void {
    for (const handler of this.checked) {
      const failure = handler.failure(leaving);
      if (failure !== null) throw failure;
    }
  }
}

/**
 * Feeds the output of one transformer into another: a route's transform, then the relay
 * guard over what it wrote.
 */
export class ChainedTransformer implements ChunkTransformer {
  private readonly first: ChunkTransformer;
  private readonly second: ChunkTransformer;
  private readonly between: Buffer[] = [];
  /** Runs once the second has read all that the first wrote (so state kept for it can go). */
  private readonly drained: () => void;

  constructor(first: ChunkTransformer, second: ChunkTransformer, drained: () => void = () => {}) {
    this.first = first;
    this.second = second;
    this.drained = drained;
  }

  push(chunk: Buffer, out: Buffer[]): void {
    this.first.push(chunk, this.between);
    this.drain(out);
  }

  end(out: Buffer[]): void {
    this.first.end(this.between);
    this.drain(out);
    this.second.end(out);
  }

  private drain(out: Buffer[]): void {
    for (const piece of this.between) this.second.push(piece, out);
    this.between.length = 0;
    this.drained();
  }
}

/** Transforms the request body as it arrives, into memory; throws the first failure. */
export async function transformWhole(ctx: RequestContext, limit: number, transform: BodyTransform): Promise<Buffer> {
  const out: Buffer[] = [];
  // Nothing leaves before end(), which checks everything again: the chunks' checks only stop a bad body early.
  ctx.bytesIn = await consumeBody(ctx, limit, (chunk) => transform.push(chunk, out, false));
  transform.end(out);
  return out.length === 0 ? EMPTY : joinPieces(out);
}

/** Transforms the request body as it streams on, one output buffer per input chunk. */
export async function* transformStream(ctx: RequestContext, limit: number, transform: BodyTransform): AsyncGenerator<Buffer> {
  const out: Buffer[] = [];
  for await (const chunk of bodyChunks(ctx, limit)) {
    ctx.bytesIn += chunk.length;
    transform.push(chunk, out);
    if (out.length > 0) yield joinPieces(out);
  }
  transform.end(out);
  if (out.length > 0) yield joinPieces(out);
}

const EMPTY = Buffer.alloc(0);
