/**
 * Authenticates a request: the API key always, and the user of a bearer access token
 * when one is sent (it becomes the acting user).
 */
import type { RequestContext } from '../http/context.ts';
import type { Authenticator, Caller } from './caller.ts';

export async function authenticateRequest(ctx: RequestContext, auth: Authenticator): Promise<Caller> {
  const caller = auth.authenticate(ctx.header('x-svc-authorization'));
  const bearer = ctx.header('authorization');
  const acting = bearer === undefined ? caller : await auth.actAs(caller, bearer);
  ctx.apiKeyId = acting.apiKeyId;
  ctx.userId = acting.user.id;
  return acting;
}
