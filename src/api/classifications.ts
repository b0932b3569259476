/**
 * Classifications (DESIGN §10; spec 2.1, 4.1, 4.3). A classification labels encrypted data
 * and says who may decrypt it: listed users, holders of listed roles, members of listed
 * provider groups (DESIGN §9).
 *
 * Its reveal rules (DESIGN §14, api/reveal-input.ts) say what everyone else sees: `reveal`
 * (replaced whole by a PATCH that sends it), `default` and `default_mask`.
 *
 * The API manages one provider per classification: `provider_container_id` names the
 * provider configuration (its UUID; the spec's "integer" cannot name our configurations)
 * and `gws_groups` the groups of that provider. The list filter `providers` takes those
 * UUIDs too.
 */
import { recordActivity } from './activity.ts';
import type { Caller } from '../auth/caller.ts';
import { authorizeMemberChange } from '../auth/minting.ts';
import type { Services } from '../services.ts';
import { NotFoundError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import {
  CLASSIFICATION_SORTS,
  SORT_DIRECTIONS,
  type Classification,
  type ClassificationMembers,
  type ClassificationPatch,
  type ClassificationProvider,
  type GwsGroup,
} from '../store/classifications.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import { hasUnsafeText, unsafeTextMessage } from '../store/identity-text.ts';
import { grantsText, maskText } from '../store/reveal-rules.ts';
import { envelope, pageRequest } from './pagination.ts';
import { classificationView, MemberViews } from './presenters.ts';
import { revealDefault, revealGrants } from './reveal-input.ts';
import type { Handlers } from './routes.ts';
import { attributeName, EMAIL_PATTERN, queryIntegerList, Validator } from './validation.ts';

const COLOR = /^#[0-9A-Fa-f]{6}$/;
const NAME_MAX = 32;
const DESCRIPTION_MAX = 255;
const EMOJI_MAX = 32;
const SEARCH_MAX = 255;
const GROUP_TEXT_MAX = 255;
/** Bounds the member lists so one request cannot ask for millions of lookups. */
const MEMBERS_MAX = 1000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ID = /^[0-9]{1,15}$/;

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { list, create, show, update, remove } satisfies Handlers;

async function list(ctx: RequestContext, services: Services): Promise<void> {
  const query = ctx.query();
  const v = Validator.forQuery(query);
  const search = v.string('search', { max: SEARCH_MAX }) ?? undefined;
  const sort = v.oneOf('sort', CLASSIFICATION_SORTS) ?? 'name';
  const direction = v.oneOf('direction', SORT_DIRECTIONS) ?? 'asc';
  const userId = v.integer('user', { min: 1 }) ?? undefined;
  const roleIds = queryIntegerList(query, 'roles', v);
  const providerIds = queryUuidList(query, 'providers', v);
  const page = pageRequest(v);
  v.check();

  const { store } = services;
  const result = await store.classifications.page({ search, userId, roleIds, providerIds, sort, direction, limit: page.perPage, offset: page.offset });
  const members = await store.classifications.membersOf(result.items.map((c) => c.id));
  const views = new MemberViews(store);
  const data = result.items.map((c) => classificationView(store, c, members.get(c.id), views));
  sendJson(ctx, 200, envelope(ctx, services.config.server.public_url, page, result.total, data));
}

async function create(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const { store } = services;
  const { name, bgColor, fgColor, ...rest } = validate(new Validator(await readJson(ctx)), store, null);
  // validate() has already answered 422 when any of these is missing on create.
  if (name === undefined || bgColor === undefined || fgColor === undefined) throw new TypeError('name and colours were validated as required');
  const members: ClassificationMembers = { userIds: [...(rest.userIds ?? [])], roleIds: [...(rest.roleIds ?? [])], providers: [...(rest.providers ?? [])] };
  const reveal = rest.reveal ?? [];
  // One that admits nobody and has no reveal rules gives nobody anything; one with members
  // or rules, only what the caller has (DESIGN §13, §14).
  const opens = admitsAnyone(members) || reveal.length > 0 || (rest.revealDefault !== undefined && rest.revealDefault.level !== 'deny');
  const exempt = opens ? authorizeMemberChange(store, caller, { name, members, reveal }) : null;
  const created = await store.classifications.create({ ...rest, name, bgColor, fgColor });
  await recordActivity(ctx, services, caller, 'classification.created', `Created classification ${describe(created)}.${exempt ?? ''}`);
  sendJson(ctx, 201, classificationView(store, created));
}

async function show(ctx: RequestContext, services: Services): Promise<void> {
  sendJson(ctx, 200, classificationView(services.store, await find(ctx, services.store)));
}

async function update(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const { store } = services;
  const current = await find(ctx, store);
  const patch = validate(new Validator(await readJson(ctx)), store, current);
  const members = await store.classifications.members(current.id);
  // Who it admits, and what its reveal rules show, is decided by those it admits now (DESIGN §13, §14).
  const changes = changesMembers(members, patch) || changesReveal(current, patch);
  const exempt = changes ? authorizeMemberChange(store, caller, { name: current.name, members, reveal: current.reveal }) : null;
  const updated = await store.classifications.update(current.id, patch);
  // Deleted by another request between the lookup and the write.
  if (updated === undefined) throw new NotFoundError();
  await recordActivity(ctx, services, caller, 'classification.updated', `Updated classification ${describe(updated)}.${exempt ?? ''}`);
  sendJson(ctx, 200, classificationView(store, updated));
}

async function remove(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const { store } = services;
  const current = await find(ctx, store);
  if (!(await store.classifications.delete(current.id))) throw new NotFoundError();
  await recordActivity(ctx, services, caller, 'classification.deleted', `Deleted classification ${describe(current)}.`);
  sendEmpty(ctx, 204);
}

// ---------------------------------------------------------------------------------------
// Steps

/** The classification named by the `:id` path parameter: digits only, else 404. */
async function find(ctx: RequestContext, store: Store): Promise<Classification> {
  const raw = ctx.params['id'] ?? '';
  const found = ID.test(raw) ? await store.classifications.findById(Number(raw)) : undefined;
  if (found === undefined) throw new NotFoundError();
  return found;
}

function admitsAnyone(members: ClassificationMembers): boolean {
  return members.userIds.length > 0 || members.roleIds.length > 0 || members.providers.some((p) => p.gwsGroups.length > 0);
}

/** Whether `patch` changes the members; clients often send back what GET showed them. */
function changesMembers(current: ClassificationMembers, patch: ClassificationPatch): boolean {
  const sameIds = (a: readonly number[], b: readonly number[]) => {
    const left = new Set(a);
    const right = new Set(b);
    return left.size === right.size && [...left].every((id) => right.has(id));
  };
  if (patch.userIds !== undefined && !sameIds(current.userIds, patch.userIds)) return true;
  if (patch.roleIds !== undefined && !sameIds(current.roleIds, patch.roleIds)) return true;
  if (patch.providers === undefined) return false;
  const key = (providers: readonly ClassificationProvider[]) =>
    JSON.stringify(providers.map((p) => [p.configurationId, p.gwsGroups.map((g) => g.id).sort()]).sort());
  return key(current.providers) !== key(patch.providers);
}

/** Whether `patch` changes the reveal grants or the default; a PATCH that sends back what GET showed changes nothing. */
function changesReveal(current: Classification, patch: ClassificationPatch): boolean {
  if (patch.reveal !== undefined && grantsText(patch.reveal) !== grantsText(current.reveal)) return true;
  const next = patch.revealDefault;
  return next !== undefined && (next.level !== current.revealDefault.level || maskText(next.mask) !== maskText(current.revealDefault.mask));
}

function describe(classification: Classification): string {
  return `"${classification.name}" (id ${classification.id}, slug ${classification.slug})`;
}


/**
 * The body of POST (`current` null: name and colours required) or PATCH (any subset; a
 * field that is sent is checked as on create). Returns the changes; throws the 422.
 */
function validate(v: Validator, store: Store, current: Classification | null): ClassificationPatch {
  const creating = current === null;
  const required = (field: string) => creating || v.has(field);
  const name = v.string('name', { required: required('name'), max: NAME_MAX, text: true }) ?? undefined;
  const bgColor = v.string('bg_color', { required: required('bg_color'), pattern: COLOR }) ?? undefined;
  const fgColor = v.string('fg_color', { required: required('fg_color'), pattern: COLOR }) ?? undefined;
  const description = nullableText(v, 'description', DESCRIPTION_MAX);
  const emoji = nullableText(v, 'emoji', EMOJI_MAX);
  const groups = gwsGroups(v);
  const containerId = providerContainerId(v, store);
  const userIds = v.array('users', v.existingId((id) => stateOf(store).user(id) !== undefined), { max: MEMBERS_MAX });
  const roleIds = v.array('roles', v.existingId((id) => stateOf(store).role(id) !== undefined), { max: MEMBERS_MAX });
  const reveal = revealGrants(v, store);
  const defaultLevel = revealDefault(v);
  v.check();

  const patch: ClassificationPatch = { name, bgColor, fgColor, description, emoji, userIds, roleIds, reveal, revealDefault: defaultLevel };
  if (v.has('provider_container_id') || v.has('gws_groups')) {
    // The container a PATCH without `provider_container_id` keeps is the current one.
    const container = v.has('provider_container_id') ? (containerId ?? null) : (current?.providerContainerId ?? null);
    patch.providerContainerId = container;
    patch.providers = container === null ? [] : [{ configurationId: container, gwsGroups: groups ?? keptGroups(store, current, container) }];
  }
  return patch;
}

/** A PATCH that moves nothing but the container keeps the groups it had there. */
function keptGroups(store: Store, current: Classification | null, container: string): GwsGroup[] {
  if (current === null) return [];
  const members = stateOf(store).members(current.id);
  return members.providers.find((p) => p.configurationId === container)?.gwsGroups ?? [];
}

/** Laravel converts empty strings to null before validating; nullable fields do the same here. */
function nullableText(v: Validator, field: string, max: number): string | null | undefined {
  if (v.input[field] === '') return null;
  return v.string(field, { nullable: true, max, text: true });
}

/** `gws_groups`: an array of `{id, name?, email?}`; null or absent means "not sent". */
function gwsGroups(v: Validator): GwsGroup[] | undefined {
  if (v.input['gws_groups'] === null) return undefined;
  return v.array(
    'gws_groups',
    (value, key) => {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) {
        v.fail(key, `The ${attributeName(key)} field must be an array.`);
        return undefined;
      }
      const item = value as Record<string, unknown>;
      const id = nestedText(v, `${key}.id`, item['id'], true);
      const name = nestedText(v, `${key}.name`, item['name'], false);
      const email = nestedText(v, `${key}.email`, item['email'], false);
      if (typeof email === 'string' && !EMAIL_PATTERN.test(email)) {
        v.fail(`${key}.email`, `The ${attributeName(`${key}.email`)} field must be a valid email address.`);
        return undefined;
      }
      if (typeof id !== 'string' || name === null || email === null) return undefined;
      const ref: GwsGroup = { id };
      if (name !== undefined) ref.name = name;
      if (email !== undefined) ref.email = email;
      return ref;
    },
    { max: MEMBERS_MAX },
  );
}

/** A string inside an array item; returns null when it failed, undefined when absent. */
function nestedText(v: Validator, key: string, value: unknown, required: boolean): string | null | undefined {
  if (value === undefined || value === null || value === '') {
    if (!required) return undefined;
    v.fail(key, `The ${attributeName(key)} field is required.`);
    return null;
  }
  if (typeof value !== 'string') {
    v.fail(key, `The ${attributeName(key)} field must be a string.`);
    return null;
  }
  if ([...value].length > GROUP_TEXT_MAX) {
    v.fail(key, `The ${attributeName(key)} field must not be greater than ${GROUP_TEXT_MAX} characters.`);
    return null;
  }
  if (hasUnsafeText(value)) {
    v.fail(key, unsafeTextMessage(attributeName(key)));
    return null;
  }
  return value;
}

/**
 * `provider_container_id`: the UUID of a provider configuration; Laravel's `required_with`
 * when `gws_groups` holds any group. Null clears it (and the groups).
 */
function providerContainerId(v: Validator, store: Store): string | null | undefined {
  const field = 'provider_container_id';
  const raw = v.input[field];
  const groupsSent = Array.isArray(v.input['gws_groups']) && v.input['gws_groups'].length > 0;
  if (raw === undefined || raw === null || raw === '') {
    if (groupsSent) v.fail(field, 'The provider container id field is required when gws groups is present.');
    return raw === undefined ? undefined : null;
  }
  if (typeof raw !== 'string') {
    v.fail(field, 'The provider container id field must be a string.');
    return undefined;
  }
  const configuration = UUID.test(raw) ? stateOf(store).configuration(raw.toLowerCase()) : undefined;
  if (configuration === undefined || configuration.type !== 'provider') {
    v.fail(field, 'The selected provider container id is invalid.');
    return undefined;
  }
  return configuration.id;
}

/**
 * Provider configuration UUIDs in a query string, as `providers=a,b` or
 * `providers[]=a&providers[]=b`.
 */
function queryUuidList(query: URLSearchParams, name: string, v: Validator): string[] | undefined {
  const raw = [...query.getAll(`${name}[]`), ...query.getAll(name).flatMap((s) => s.split(','))].map((s) => s.trim()).filter((s) => s !== '');
  if (raw.length === 0) return undefined;
  if (!raw.every((item) => UUID.test(item))) {
    v.fail(name, `The ${attributeName(name)} field must be an array of UUIDs.`);
    return undefined;
  }
  return raw.map((item) => item.toLowerCase());
}
