/**
 * Test support: log rows as the log writer records them (NewActivityLog, NewApiLog,
 * NewUsageLog) and as a replica ships them (ShippedApiLog, ShippedUsageLog), numbered by
 * `i` (or `id`) and stamped `createdAt`; the store contract asserts the other values.
 */
import type { NewActivityLog, NewApiLog, NewUsageLog } from '../../src/store/logs.ts';
import type { ShippedApiLog, ShippedUsageLog } from '../../src/store/shipped-logs.ts';

export const activityRow = (i: number, createdAt: string, extra: Partial<NewActivityLog> = {}): NewActivityLog => ({
  action: 'login',
  description: `event ${i}`,
  ip: '10.0.0.1',
  createdAt,
  ...extra,
});

/** Without `userId`, the row names no user. */
export const apiRow = (i: number, createdAt: string, userId?: number | null): NewApiLog => ({
  requestId: `req-${i}`,
  method: 'POST',
  path: '/proxy/payments',
  statusCode: 200,
  durationMs: 1.25,
  ip: '10.0.0.2',
  createdAt,
  ...(userId === undefined ? {} : { userId }),
});

export const usageRow = (i: number, createdAt: string, userId?: number | null): NewUsageLog => ({
  requestId: `req-${i}`,
  configurationId: 'cfg',
  mode: 'encrypt',
  fieldCount: 3,
  bytes: 120,
  createdAt,
  ...(userId === undefined ? {} : { userId }),
});

export const shippedApiRow = (id: number, createdAt: string): ShippedApiLog => ({
  id,
  request_id: `shipped-${id}`,
  method: 'GET',
  path: '/x',
  status_code: 200,
  api_key_id: null,
  user_id: null,
  configuration_id: null,
  destination: null,
  duration_ms: 2.5,
  ip: '10.0.0.3',
  created_at: createdAt,
});

export const shippedUsageRow = (id: number, createdAt: string): ShippedUsageLog => ({
  id,
  request_id: `shipped-${id}`,
  configuration_id: 'cfg',
  api_key_id: null,
  user_id: null,
  mode: 'decrypt',
  field_count: 1,
  bytes: 10,
  reveal: { plain: 1, mask: 0, redact: 0, token: 0 },
  created_at: createdAt,
});
