import type { Logger } from 'pino';
import type { Authenticator } from './auth/caller.ts';
import type { Config } from './config/load.ts';
import type { MasterKey } from './crypto/master-key.ts';
import type { Store } from './store/db.ts';
import type { LogWriter } from './telemetry/log-writer.ts';
import type { Metrics } from './telemetry/metrics.ts';
import type { CodecCache } from './dataplane/codecs.ts';
import type { EgressRoutes } from './dataplane/egress.ts';
import type { FieldPathCache } from './dataplane/field-path-cache.ts';
import type { Forwarder } from './dataplane/forwarder.ts';
import type { DataLimits } from './dataplane/limits.ts';

/** What request handlers need, built once at start. */
export interface Services {
  readonly config: Config;
  readonly logger: Logger;
  readonly store: Store;
  readonly auth: Authenticator;
  readonly codecs: CodecCache;
  readonly fieldPaths: FieldPathCache;
  readonly logs: LogWriter;
  readonly forwarder: Forwarder;
  /** What one field value may hold (`limits.max_value`), per kind of value. */
  readonly limits: DataLimits;
  /** `egress` routes by name, compiled at start. */
  readonly egress: EgressRoutes;
  readonly metrics: Metrics;
  /** Ready to take traffic: set once listening, cleared when shutting down. */
  readonly health: { ready: boolean };
  /** Wraps new data keys (configuration create and rotate); never exposed in responses. */
  readonly master: MasterKey;
}
