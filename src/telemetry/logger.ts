/**
 * The process logger. Secrets never reach it by construction (handlers log ids, never
 * headers or bodies); the redact list is a second line of defence for anything that
 * logs a request-shaped object by mistake.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

const REDACT = [
  'req.headers["x-svc-authorization"]',
  'req.headers.authorization',
  'req.headers.cookie',
  '*.password',
  '*.key',
  '*.api_key',
  '*.access_token',
  '*.master_key',
];

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  const options = {
    level,
    base: { service: 'svc-sidecar' },
    redact: { paths: REDACT, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}
