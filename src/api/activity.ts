import type { Caller } from '../auth/caller.ts';
import type { User } from '../store/users.ts';
import type { Services } from '../services.ts';
import type { RequestContext } from '../http/context.ts';

/** Records a management action by the acting user in the activity log (DESIGN §10). */
export async function recordActivity(ctx: RequestContext, services: Services, caller: Caller, action: string, description: string): Promise<void> {
  await recordUserActivity(ctx, services, caller.user, action, description);
}

/**
 * The same, for an action whose user is not the caller's (a login names the user who
 * logged in). Written before the answer, on the request's own connection, not queued: an
 * acknowledged change is never missing from the audit trail, even after a kill -9. These
 * are rare next to data-plane entries, which are batched on the log thread.
 */
export async function recordUserActivity(ctx: RequestContext, services: Services, user: Pick<User, 'id' | 'email'>, action: string, description: string): Promise<void> {
  await services.store.logs.insertActivity([{
    action,
    description,
    ip: ctx.req.socket.remoteAddress ?? '',
    userId: user.id,
    causerEmail: user.email,
    requestId: ctx.id,
    createdAt: new Date().toISOString(),
  }]);
}
