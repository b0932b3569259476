/**
 * The request bodies of the HTTP benchmarks: one realistic ~1 KB customer record with the
 * five fields `/proxy` encrypts, and records for the streamed 1 GB array.
 */

/** The fields `/proxy` encrypts in the benchmark (x-svc-fields). */
export const FIELDS = ['name', 'email', 'phone', 'card.number', 'ssn'] as const;

/** A customer record as a payments API would post it: about 1 KB compact JSON. */
export function customerRecord(): Buffer {
  const record = {
    id: 'cus_48213907715532',
    object: 'customer',
    name: 'Zoë Okafor-Johansson',
    email: 'zoe.okafor-johansson@example.com',
    phone: '+44 20 7946 0958',
    ssn: '078-05-1120',
    card: { brand: 'visa', number: '4111111111111111', exp_month: 9, exp_year: 2029, cvc_check: 'pass', funding: 'credit', country: 'GB' },
    address: { line1: '221B Baker Street', line2: null, city: 'London', postal_code: 'NW1 6XE', country: 'GB', geo: { lat: 51.523767, lng: -0.158555 } },
    balance: 1284.5,
    currency: 'gbp',
    credit_limit: 5000,
    risk_score: 0.0731,
    orders: 42,
    active: true,
    tags: ['vip', 'paperless', 'eu'],
    preferences: { language: 'en-GB', marketing_email: false, marketing_sms: false, statements: 'paperless' },
    created_at: '2021-03-14T09:26:53Z',
    updated_at: '2025-11-02T17:45:10Z',
    notes: 'Prefers "paperless" billing; escalated twice in Q3, see ticket #4412. Address verified by phone.',
    metadata: { source: 'web-checkout', campaign: 'spring-2025', account_manager: 'Mateo Rossi', region: 'emea', segment: 'retail', external_ref: 'crm-0093-2281-77' },
  };
  return Buffer.from(JSON.stringify(record));
}

/**
 * Records for the streamed array, varied enough that the transformer sees realistic
 * keys and values; `n` gives each one a distinct id.
 */
export function streamRecord(n: number): string {
  const i = n % 997;
  return (
    `{"id":${n},"name":"Customer ${i} O'Brien-García","email":"customer${n}@example.com","phone":"+1-555-${String(100 + (i % 900)).padStart(3, '0')}-${String(n % 10000).padStart(4, '0')}",` +
    `"ssn":"${String(100 + (i % 800))}-${String(10 + (n % 89))}-${String(n % 10000).padStart(4, '0')}",` +
    `"card":{"brand":"visa","number":"4111 1111 1111 ${String(n % 10000).padStart(4, '0')}","exp":"12/28"},` +
    `"address":{"line1":"${1 + i} Maple Avenue","city":"Springfield","postal_code":"${String(10000 + i)}","country":"US"},` +
    `"balance":${(n % 100000) / 100},"active":${n % 7 !== 0},"tags":["retail","paperless"],"notes":"Call before 5pm — verified \\"ok\\""}`
  );
}
