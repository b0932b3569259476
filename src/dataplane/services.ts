import type { Logger } from 'pino';
import type { Authenticator } from '../auth/caller.ts';
import type { Config } from '../config/load.ts';
import type { Store } from '../store/db.ts';
import type { LogWriter } from '../telemetry/log-writer.ts';
import type { CodecCache } from './codecs.ts';
import type { FieldPathCache } from './field-path-cache.ts';

/** What request handlers need, built once at start. */
export interface Services {
  readonly config: Config;
  readonly logger: Logger;
  readonly store: Store;
  readonly auth: Authenticator;
  readonly codecs: CodecCache;
  readonly fieldPaths: FieldPathCache;
  readonly logs: LogWriter;
}
