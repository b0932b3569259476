/**
 * Deterministic, realistic JSON request bodies: a top-level `customer` plus a `records`
 * array of customers. Same seed, same bytes, on every machine, so results compare across
 * runs. Values mix ASCII and non-ASCII text, escaped quotes, nested objects, arrays,
 * integers, decimals, booleans and nulls, the way API payloads do.
 */

/** mulberry32: tiny, fast and good enough for test data. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIRST = ['Ana', 'José', 'Mei', 'Oluwaseun', 'Zoë', 'Liam', 'Fatima', 'Søren', 'Priya', 'Mateo', 'Hannah', 'Kenji', 'Chloé', 'Tomasz', 'Amara', 'Noah'];
const LAST = ['García', 'Nguyen', 'Okafor', 'Müller', 'Smith', 'Kowalski', 'Haddad', 'Johansson', 'Patel', 'Rossi', "O'Brien", 'Tanaka', 'Dubois', 'Silva'];
const STREETS = ['Maple Avenue', 'High Street', 'Rue de Rivoli', 'Calle Mayor', 'Hauptstraße', 'Elm Street', 'Station Road', 'Baker Street'];
const CITIES: readonly (readonly [string, string])[] = [
  ['Springfield', 'US'],
  ['London', 'GB'],
  ['Paris', 'FR'],
  ['Madrid', 'ES'],
  ['Berlin', 'DE'],
  ['Kraków', 'PL'],
  ['Lagos', 'NG'],
  ['Osaka', 'JP'],
];
const TAGS = ['vip', 'newsletter', 'churn-risk', 'b2b', 'beta', 'wholesale', 'late-payer', 'eu', 'paperless', 'referral'];
const NOTES = [
  'Prefers "paperless" billing',
  'Call before 5pm',
  'Escalated twice in Q3; see ticket #4412',
  'Address verified',
  'Requested card replacement — shipped',
];

export type Customer = Record<string, unknown>;

function pick<T>(rng: () => number, list: readonly T[]): T {
  return list[Math.floor(rng() * list.length)]!;
}

function digits(rng: () => number, n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += String(Math.floor(rng() * 10));
  return s;
}

function asciiLower(s: string): string {
  return s
    .normalize('NFD')
    .replace(/[^A-Za-z]/g, '')
    .toLowerCase();
}

function customer(rng: () => number, index: number): Customer {
  const first = pick(rng, FIRST);
  const last = pick(rng, LAST);
  const [city, country] = pick(rng, CITIES);
  const tags: string[] = [];
  const tagCount = 1 + Math.floor(rng() * 4);
  for (let i = 0; i < tagCount; i++) tags.push(pick(rng, TAGS));
  const month = 1 + Math.floor(rng() * 12);
  return {
    id: `cus_${digits(rng, 14)}`,
    name: `${first} ${last}`,
    email: `${asciiLower(first)}.${asciiLower(last)}${index}@example.com`,
    phone: `+1-555-${digits(rng, 3)}-${digits(rng, 4)}`,
    address: {
      line1: `${1 + Math.floor(rng() * 9999)} ${pick(rng, STREETS)}`,
      line2: rng() < 0.3 ? `Apt ${1 + Math.floor(rng() * 200)}` : null,
      city,
      postal_code: digits(rng, 5),
      country,
      geo: { lat: Math.round((rng() * 180 - 90) * 1e6) / 1e6, lng: Math.round((rng() * 360 - 180) * 1e6) / 1e6 },
    },
    card: {
      number: `4${digits(rng, 15)}`,
      exp: `${String(month).padStart(2, '0')}/${27 + Math.floor(rng() * 6)}`,
      cvc: digits(rng, 3),
    },
    ssn: `${digits(rng, 3)}-${digits(rng, 2)}-${digits(rng, 4)}`,
    tags,
    balance: Math.round(rng() * 1_000_000) / 100,
    credit_limit: 1000 * (1 + Math.floor(rng() * 20)),
    risk_score: Math.round(rng() * 10_000) / 10_000,
    orders: Math.floor(rng() * 500),
    active: rng() < 0.85,
    created_at: `20${10 + Math.floor(rng() * 15)}-${String(month).padStart(2, '0')}-${String(1 + Math.floor(rng() * 28)).padStart(2, '0')}T12:00:00Z`,
    notes: rng() < 0.4 ? pick(rng, NOTES) : null,
  };
}

export interface GeneratedDocument {
  readonly bytes: Buffer;
  readonly records: number;
}

/**
 * A compact JSON document of at least `targetBytes` bytes (it stops at the first record
 * that reaches the size), as `JSON.stringify` would send it.
 */
export function generateDocument(targetBytes: number, seed = 0x5eed): GeneratedDocument {
  const rng = prng(seed);
  const head = { request_id: `req_${digits(rng, 20)}`, customer: customer(rng, 0) };
  const records: Customer[] = [];
  // Size of `{...head,"records":[...]}` tracked incrementally: stringifying 10 MB per record would be quadratic.
  let size = Buffer.byteLength(JSON.stringify({ ...head, records: [] }));
  while (size < targetBytes) {
    const record = customer(rng, records.length + 1);
    size += Buffer.byteLength(JSON.stringify(record)) + (records.length > 0 ? 1 : 0);
    records.push(record);
  }
  const bytes = Buffer.from(JSON.stringify({ ...head, records }));
  return { bytes, records: records.length };
}

/** Splits a document the way a socket delivers it: fixed-size slices, the last one short. */
export function chunk(bytes: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, Math.min(i + size, bytes.length)));
  return out;
}
