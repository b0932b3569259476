/**
 * Reveal levels on the decrypt paths (DESIGN §14): each level and what it does to each
 * type, which grant wins, a deny anywhere failing the whole request, `x-svc-reveal` on the
 * decrypt API and /proxy (forwarded answers too), the usage log and `svc_fields_total`;
 * and the decision engine for readers the API does not authenticate (the relay's end
 * users), where a deny becomes a redaction.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { ANONYMOUS, ClassificationAccess, FOR_THE_POD, type RevealPolicy } from '../../src/auth/classification-access.ts';
import { DecryptHandler } from '../../src/dataplane/field-handlers.ts';
import { FORM_FORMAT, JSON_FORMAT } from '../../src/fields/formats.ts';
import { compileFieldPaths, FieldMatcher } from '../../src/fields/paths.ts';
import { UNLIMITED } from '../../src/fields/value.ts';
import { call, startApp, type Running } from '../support/app.ts';
import { startEcho } from '../support/destinations.ts';
import { syncRepositories } from '../../src/store/sqlite/connection.ts';

const key = (name: string) => `svc_${name.padEnd(40, '0')}`;
const K = { ada: key('Ada'), bill: key('Bill'), sue: key('Sue'), dev: key('Dev'), vic: key('Vic'), grace: key('Grace'), out: key('Out') } as const;

const ENC = '/api/v3/encryption/payments/encrypt';
const DEC = '/api/v3/encryption/payments/decrypt';

const SEED = (destinations = '[]') => `
seed:
  users:
    - { name: Ada Admin, email: ada@example.com, roles: [owner] }
    - { name: Bill Ing, email: bill@example.com, roles: [administrator] }
    - { name: Sue Port, email: sue@example.com, roles: [developer] }
    - { name: Dev Eloper, email: dev@example.com, roles: [developer] }
    - { name: Vic Tim, email: vic@example.com, roles: [developer] }
    - { name: Grace Group, email: grace@example.com, roles: [developer] }
    - { name: Out Sider, email: out@example.com, roles: [developer] }
  api_keys:
    - { name: ada, user: ada@example.com, key: ${K.ada} }
    - { name: bill, user: bill@example.com, key: ${K.bill} }
    - { name: sue, user: sue@example.com, key: ${K.sue} }
    - { name: dev, user: dev@example.com, key: ${K.dev} }
    - { name: vic, user: vic@example.com, key: ${K.vic} }
    - { name: grace, user: grace@example.com, key: ${K.grace} }
    - { name: out, user: out@example.com, key: ${K.out} }
  configurations:
    - { name: payments, proxy_slug: payments, destinations: ${destinations} }
    - name: workspace
      type: provider
      provider: google
      groups: [{ id: g-support, name: Support, members: [grace@example.com] }]
  classifications:
    # No members: it admits nobody (DESIGN §13), so its reveal rules decide for everyone.
    - name: Levels
      bg_color: "#000000"
      fg_color: "#ffffff"
      reveal:
        - { to: { users: [bill@example.com] }, level: plain }
        - { to: { users: [sue@example.com] }, level: mask, mask: last4 }
        - { to: { users: [dev@example.com] }, level: token }
        - { to: { users: [vic@example.com] }, level: redact }
    - name: Mixed
      bg_color: "#000000"
      fg_color: "#ffffff"
      users: [ada@example.com]
      reveal:
        - { to: { users: [ada@example.com] }, level: redact }
        - { to: { roles: [developer] }, level: redact }
        - { to: { users: [sue@example.com] }, level: mask, mask: last4 }
        - { to: { groups: [g-support] }, level: plain }
        - { to: { users: [vic@example.com] }, level: deny }
        - { to: { users: [sue@example.com] }, level: mask, mask: { keep_first: 2, char: "*" } }
      default: token
    - name: Shapes
      bg_color: "#000000"
      fg_color: "#ffffff"
      reveal:
        - { to: { users: [sue@example.com] }, level: mask, mask: email }
        - { to: { users: [dev@example.com] }, level: mask, mask: { keep_first: 1, keep_last: 1, char: "#" } }
      default: mask
      default_mask: ssn
`;

async function start(t: TestContext, destinations?: string, extra = ''): Promise<Running> {
  return startApp(t, extra, SEED(destinations));
}

/** A document of every type, its fields encrypted under `classification`. */
const DOC = '{"s":"4111 1111 1111 1111","n":12345678,"b":true,"o":{"x":1},"a":[1,2],"z":null}';
const FIELDS = 's,n,b,o,a,z';

async function encrypt(url: string, classification: string, body = DOC, fields = FIELDS): Promise<string> {
  const res = await call(url, ENC, { body, key: K.ada, headers: { 'x-svc-fields': fields, 'x-svc-classification': classification } });
  assert.equal(res.status, 200, res.text);
  return res.text;
}

async function decrypt(url: string, body: string, k: string) {
  return call(url, DEC, { body, key: k });
}

test('every level on every type: plain, mask (strings, numbers and booleans become strings; objects and arrays are redacted), token, redact; null stays null', async (t) => {
  const { url } = await start(t);
  const tokens = await encrypt(url, 'levels');
  const sent = JSON.parse(tokens);
  assert.equal(sent.z, null, 'null is never encrypted');

  const plain = await decrypt(url, tokens, K.bill);
  assert.equal(plain.status, 200);
  assert.equal(plain.text, DOC);
  assert.equal(plain.headers.get('x-svc-reveal'), 'plain=5, mask=0, redact=0, token=0');
  assert.equal(plain.headers.get('x-svc-fields-transformed'), '5');

  const masked = await decrypt(url, tokens, K.sue);
  assert.equal(masked.status, 200);
  assert.equal(masked.text, '{"s":"•••• •••• •••• 1111","n":"••••5678","b":"••••","o":null,"a":null,"z":null}');
  assert.equal(masked.headers.get('x-svc-reveal'), 'plain=0, mask=3, redact=2, token=0');
  assert.equal(masked.headers.get('x-svc-fields-transformed'), '5');

  const token = await decrypt(url, tokens, K.dev);
  assert.equal(token.status, 200);
  assert.equal(token.text, tokens, 'every token left exactly as it was');
  assert.equal(token.headers.get('x-svc-reveal'), 'plain=0, mask=0, redact=0, token=5');
  assert.equal(token.headers.get('x-svc-fields-transformed'), '0');

  const redacted = await decrypt(url, tokens, K.vic);
  assert.equal(redacted.status, 200);
  assert.equal(redacted.text, '{"s":null,"n":null,"b":null,"o":null,"a":null,"z":null}');
  assert.equal(redacted.headers.get('x-svc-reveal'), 'plain=0, mask=0, redact=5, token=0');

  // Named by no grant, default deny: 403, nothing decrypted; the owner is no exception.
  for (const k of [K.out, K.ada, K.grace]) {
    const denied = await decrypt(url, tokens, k);
    assert.equal(denied.status, 403);
    assert.deepEqual(denied.json, { message: 'User does not have the right permissions.' });
    assert.equal(denied.headers.get('x-svc-reveal'), null);
  }
});

test('presets and custom masks on the wire; a mask default applies to readers no grant names', async (t) => {
  const { url } = await start(t);
  const tokens = await encrypt(url, 'shapes', '{"e":"ada.lovelace@example.com","ssn":"123-45-6789","n":1234.5}', 'e,ssn,n');
  // The email preset on what is not an address hides it whole, separators kept.
  assert.equal((await decrypt(url, tokens, K.sue)).text, '{"e":"a•••@example.com","ssn":"•••-••-••••","n":"••••.•"}');
  assert.equal((await decrypt(url, tokens, K.dev)).text, '{"e":"a##.########@#######.##m","ssn":"1##-##-###9","n":"1###.5"}');
  // The default's mask (ssn) for everyone else, the owner included.
  for (const k of [K.out, K.ada]) assert.equal((await decrypt(url, tokens, k)).text, '{"e":"•••.••••••••@••••••e.com","ssn":"•••-••-6789","n":"•234.5"}');
});

test('precedence: members see plain; of the grants that name a reader the most revealing wins, whether by user, role or group; of one level the first listed', async (t) => {
  const { url } = await start(t);
  const body = '{"card":"4111 1111 1111 1234"}';
  const tokens = await encrypt(url, 'mixed', body, 'card');
  const card = async (k: string) => {
    const res = await decrypt(url, tokens, k);
    return res.status === 200 ? JSON.parse(res.text).card : res.status;
  };
  // Ada is a member: plain, though a redact grant names her too.
  assert.equal(await card(K.ada), '4111 1111 1111 1234');
  // Grace: her role's redact, her group's plain → plain.
  assert.equal(await card(K.grace), '4111 1111 1111 1234');
  // Sue: her role's redact, two masks for her user → the first mask listed (last4).
  assert.equal(await card(K.sue), '•••• •••• •••• 1234');
  // Vic: her user's deny, her role's redact → redact.
  assert.equal(await card(K.vic), null);
  // Dev: only the role's redact.
  assert.equal(await card(K.dev), null);
  // Bill (administrator): named by nothing → the default, token.
  assert.equal(await card(K.bill), JSON.parse(tokens).card);
});

test('one denied token fails the whole request (403) and nothing is decrypted, masked or redacted', async (t) => {
  const { url } = await start(t);
  const shown = await encrypt(url, 'levels', '{"a":"4111 1111 1111 1234"}', 'a');
  const open = await call(url, ENC, { body: '{"c":"unclassified secret"}', key: K.ada, headers: { 'x-svc-fields': 'c' } });
  // Out is named by no grant of Levels: default deny.
  const mixed = JSON.stringify({ a: JSON.parse(shown).a, c: JSON.parse(open.text).c });
  const asSue = await decrypt(url, mixed, K.sue);
  assert.equal(asSue.status, 200, 'Sue may read both');
  assert.deepEqual(JSON.parse(asSue.text), { a: '•••• •••• •••• 1234', c: 'unclassified secret' });
  const asOut = await decrypt(url, mixed, K.out);
  assert.equal(asOut.status, 403);
  assert.ok(!asOut.text.includes('secret') && !asOut.text.includes('1234') && !asOut.text.includes('•'));
  // One body, three classifications, one reader: each token shows what its own rules say.
  const mixedToken = JSON.parse(await encrypt(url, 'mixed', '{"m":"x"}', 'm')).m;
  const all = JSON.stringify({ a: JSON.parse(shown).a, c: JSON.parse(open.text).c, m: mixedToken });
  const asBill = await decrypt(url, all, K.bill);
  assert.equal(asBill.status, 200);
  assert.deepEqual(JSON.parse(asBill.text), { a: '4111 1111 1111 1234', c: 'unclassified secret', m: mixedToken });
  assert.equal(asBill.headers.get('x-svc-reveal'), 'plain=2, mask=0, redact=0, token=1');
  // Grace may read Mixed (her group) but is denied Levels: nothing at all.
  const asGrace = await decrypt(url, all, K.grace);
  assert.equal(asGrace.status, 403);
  assert.ok(!asGrace.text.includes('secret') && !asGrace.text.includes('"x"'));
});

test('/proxy decrypt carries x-svc-reveal, and so does an answer forwarded to a destination, which gets the masked body', async (t) => {
  const echo = await startEcho(t);
  const { url } = await start(t, `["${echo.url}/"]`);
  const tokens = await encrypt(url, 'levels');
  const direct = await call(url, '/proxy/payments', { body: tokens, key: K.sue, headers: { 'x-svc-mode': 'decrypt' } });
  assert.equal(direct.status, 200);
  assert.equal(direct.headers.get('x-svc-reveal'), 'plain=0, mask=3, redact=2, token=0');
  const forwarded = await call(url, '/proxy/payments', { body: tokens, key: K.sue, headers: { 'x-svc-mode': 'decrypt', 'x-svc-destination': `${echo.url}/in` } });
  assert.equal(forwarded.status, 201);
  assert.equal(forwarded.headers.get('x-svc-reveal'), 'plain=0, mask=3, redact=2, token=0');
  assert.equal(forwarded.headers.get('x-svc-fields-transformed'), '5');
  assert.equal(echo.received.at(-1)!.body.toString(), '{"s":"•••• •••• •••• 1111","n":"••••5678","b":"••••","o":null,"a":null,"z":null}');
  // The decrypt API forwards the same way.
  const api = await call(url, DEC, { body: tokens, key: K.vic, headers: { 'x-svc-destination': `${echo.url}/in` } });
  assert.equal(api.headers.get('x-svc-reveal'), 'plain=0, mask=0, redact=5, token=0');
  // Encrypt answers carry none.
  const enc = await call(url, ENC, { body: DOC, key: K.ada, headers: { 'x-svc-fields': 's' } });
  assert.equal(enc.headers.get('x-svc-reveal'), null);
});

test('usage logs record the counts per level, and svc_fields_total counts decrypted values by level (encrypt: level empty)', async (t) => {
  const running = await startApp(t, 'logs: { flush_interval: 1h, batch_size: 100000 }', SEED(), { admin: true });
  const { url } = running;
  const tokens = await encrypt(url, 'levels');
  await call(url, DEC, { body: tokens, key: K.sue, headers: { 'x-svc-request-id': 'reveal-1' } });
  await call(url, DEC, { body: tokens, key: K.dev, headers: { 'x-svc-request-id': 'reveal-2' } });
  running.app.services.logs.flush();
  const usage = await call(url, '/api/v3/logs/usage?per_page=100', { method: 'GET', key: K.ada });
  assert.equal(usage.status, 200);
  const byRequest = (id: string) => (usage.json.data as Array<{ request_id: string; mode: string; field_count: number; reveal: unknown }>).find((e) => e.request_id === id)!;
  assert.deepEqual(byRequest('reveal-1').reveal, { plain: 0, mask: 3, redact: 2, token: 0 });
  assert.equal(byRequest('reveal-1').field_count, 5);
  assert.deepEqual(byRequest('reveal-2').reveal, { plain: 0, mask: 0, redact: 0, token: 5 });
  assert.equal(byRequest('reveal-2').field_count, 0);
  const encrypted = (usage.json.data as Array<{ mode: string; reveal: unknown }>).find((e) => e.mode === 'encrypt')!;
  assert.equal(encrypted.reveal, null);

  const metrics = await (await fetch(`${running.adminUrl}/metrics`)).text();
  const line = (labels: string) => metrics.split('\n').find((l) => l.startsWith(`svc_fields_total{${labels}}`));
  assert.equal(line('configuration="payments",mode="encrypt",level=""'), 'svc_fields_total{configuration="payments",mode="encrypt",level=""} 5');
  assert.equal(line('configuration="payments",mode="decrypt",level="mask"'), 'svc_fields_total{configuration="payments",mode="decrypt",level="mask"} 3');
  assert.equal(line('configuration="payments",mode="decrypt",level="redact"'), 'svc_fields_total{configuration="payments",mode="decrypt",level="redact"} 2');
  assert.equal(line('configuration="payments",mode="decrypt",level="token"'), 'svc_fields_total{configuration="payments",mode="decrypt",level="token"} 5');
  assert.equal(line('configuration="payments",mode="decrypt",level="plain"'), undefined, 'no value was shown plain');
});

// ---------------------------------------------------------------------------------------
// The engine for readers the API does not authenticate (the relay's end users)

/** Decrypts `body` (JSON or a form) with a handler deciding by `policy`. */
function decryptWith(running: Running, body: string, policy: RevealPolicy, form = false): { out: string; handler: DecryptHandler } {
  const services = running.app.services;
  const codec = services.codecs.get(syncRepositories(services.store).configurations.findBySlug('payments')!);
  const handler = new DecryptHandler(codec, policy, null);
  const format = form ? FORM_FORMAT : JSON_FORMAT;
  const matcher = form ? compileFieldPaths('card')! : FieldMatcher.anyToken();
  const transformer = format.create(matcher, handler, UNLIMITED);
  const out: Buffer[] = [];
  transformer.push(Buffer.from(body), out);
  transformer.end(out);
  const failure = handler.failure();
  if (failure !== null) throw failure;
  return { out: Buffer.concat(out).toString(), handler };
}

test('a reader is an input: an end user by id, roles, email or group claim, or anonymous; the relay turns deny into redact; the pod sees plain', async (t) => {
  const running = await start(t);
  const { url } = running;
  const store = running.app.services.store;
  const tokens = await encrypt(url, 'mixed', '{"card":"4111 1111 1111 1234"}', 'card');
  const sue = (await store.users.findByEmail('sue@example.com'))!;
  const developer = (await store.roles.findByName('developer'))!;
  const as = (who: ConstructorParameters<typeof ClassificationAccess>[1], relay = false) =>
    JSON.parse(decryptWith(running, tokens, new ClassificationAccess(store, who, { denyAsRedact: relay })).out).card;

  assert.equal(as({ userId: sue.id, roleIds: [], email: null }), '•••• •••• •••• 1234', 'by user id');
  assert.equal(as({ userId: null, roleIds: [developer.id], email: null }), null, 'by role: redact');
  assert.equal(as({ userId: null, roleIds: [], email: null, groups: ['g-support'] }), '4111 1111 1111 1234', 'by a group claim');
  assert.equal(as({ userId: null, roleIds: [], email: 'GRACE@example.com' }), '4111 1111 1111 1234', 'by group membership, email compared normalised');
  assert.equal(as(null), JSON.parse(tokens).card, 'anonymous: the default, token');
  assert.equal(as(ANONYMOUS), JSON.parse(tokens).card);
  assert.equal(JSON.parse(decryptWith(running, tokens, FOR_THE_POD).out).card, '4111 1111 1111 1234', 'the pod sees plain');

  // Levels has a deny default: 403 for the API's readers, null on the relay.
  const levels = await encrypt(url, 'levels', '{"card":"4111 1111 1111 1234"}', 'card');
  assert.throws(() => decryptWith(running, levels, new ClassificationAccess(store, null)), { status: 403 });
  const relayed = decryptWith(running, levels, new ClassificationAccess(store, null, { denyAsRedact: true }));
  assert.equal(relayed.out, '{"card":null}');
  assert.deepEqual(relayed.handler.reveal, { plain: 0, mask: 0, redact: 1, token: 0 });
  // A classification that no longer exists: denied, and on the relay redacted.
  await store.classifications.delete((await store.classifications.findBySlug('levels'))!.id);
  const bill = (await store.users.findByEmail('bill@example.com'))!;
  assert.throws(() => decryptWith(running, levels, new ClassificationAccess(store, { userId: bill.id, roleIds: [], email: null })), { status: 403 });
  assert.equal(decryptWith(running, levels, new ClassificationAccess(store, null, { denyAsRedact: true })).out, '{"card":null}');
});

test('in a form, a redacted value keeps its name and loses its value; a masked one is form-encoded', async (t) => {
  const running = await start(t);
  const store = running.app.services.store;
  const tokens = JSON.parse(await encrypt(running.url, 'levels', '{"card":"4111 1111 1111 1234"}', 'card')).card as string;
  const vic = { userId: (await store.users.findByEmail('vic@example.com'))!.id, roleIds: [], email: null };
  const sue = { userId: (await store.users.findByEmail('sue@example.com'))!.id, roleIds: [], email: null };
  assert.equal(decryptWith(running, `card=${tokens}&other=1`, new ClassificationAccess(store, vic), true).out, 'card=&other=1');
  assert.equal(decryptWith(running, `card=${tokens}`, new ClassificationAccess(store, sue), true).out, `card=${encodeURIComponent('•••• •••• •••• 1234').replaceAll('%20', '+')}`);
});
