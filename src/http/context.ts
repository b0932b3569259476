import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EndUser } from '../auth/end-user.ts';
import type { RevealCounts } from '../fields/reveal.ts';
import { requestIdFrom } from '../telemetry/request-id.ts';
import type { Params } from './router.ts';

/**
 * Per-request state. Every field is set in the constructor so all contexts share one
 * shape on the hot path.
 */
export class RequestContext {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly id: string;
  readonly startedAt: number;
  readonly path: string;
  readonly rawQuery: string;
  params: Params;
  /** The route template, or a fixed label when no route matched (bounded cardinality). */
  route: string;
  /** Set when the request body was left unread, so the connection must not be reused. */
  closeConnection: boolean;
  /** Filled by authentication and resolution steps, for logs. */
  apiKeyId: string | null;
  userId: number | null;
  configurationId: string | null;
  /** The destination origin a request was forwarded to. */
  destination: string | null;
  /** Body bytes read, for usage logs. */
  bytesIn: number;
  /** What the api log entry names this request by (relay and egress routes), when set. */
  logPath: string | null;
  /** Fields the request's transform replaced, once it has run: `x-svc-fields-transformed`. */
  fieldsTransformed: number | null;
  /** The relay's end user (`relay.identity`), once resolved; null when anonymous or not asked. */
  endUser: EndUser | null;
  /** A decrypt's values per reveal level, once it has run: `x-svc-reveal` (DESIGN §14). */
  reveal: RevealCounts | null;

  constructor(req: IncomingMessage, res: ServerResponse) {
    this.req = req;
    this.res = res;
    this.id = requestIdFrom(req.headers['x-svc-request-id']);
    this.startedAt = performance.now();
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    this.path = q === -1 ? url : url.slice(0, q);
    this.rawQuery = q === -1 ? '' : url.slice(q + 1);
    this.params = {};
    this.route = 'unmatched';
    this.closeConnection = false;
    this.apiKeyId = null;
    this.userId = null;
    this.configurationId = null;
    this.destination = null;
    this.bytesIn = 0;
    this.logPath = null;
    this.fieldsTransformed = null;
    this.endUser = null;
    this.reveal = null;
  }

  /** A single-valued header; repeated headers are joined by Node or taken first. */
  header(name: string): string | undefined {
    const v = this.req.headers[name];
    return Array.isArray(v) ? v[0] : v;
  }

  /** Whether the request carries header `name` (lower case) more than once. */
  repeated(name: string): boolean {
    const raw = this.req.rawHeaders;
    let seen = 0;
    for (let i = 0; i < raw.length; i += 2) {
      if (raw[i]!.length === name.length && raw[i]!.toLowerCase() === name && ++seen > 1) return true;
    }
    return false;
  }

  /**
   * A header whose value is UTF-8 text (field paths name JSON keys). Node hands header
   * bytes over as latin1, one character per byte, so non-ASCII values are re-decoded.
   */
  utf8Header(name: string): string | undefined {
    const v = this.header(name);
    if (v === undefined || !/[^\x00-\x7f]/.test(v)) return v;
    return Buffer.from(v, 'latin1').toString('utf8');
  }

  query(): URLSearchParams {
    return new URLSearchParams(this.rawQuery);
  }
}
