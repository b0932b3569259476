import { ApiKeysRepository, type ApiKey } from './api-keys.ts';
import { ClassificationsRepository, type Classification, type ClassificationMembers } from './classifications.ts';
import { ConfigurationsRepository, type Configuration } from './configurations.ts';
import { snapshot, type Step } from './query.ts';
import { RolesRepository, type Role } from './roles.ts';
import { UsersRepository, type User } from './users.ts';

/** Every row a state view may be asked for (state-view.ts, on a store whose reads are awaited). */
export interface ViewRows {
  readonly roles: Role[];
  readonly configurations: Configuration[];
  readonly classifications: Classification[];
  readonly members: Map<number, ClassificationMembers>;
  readonly users: User[];
  readonly roleIds: Map<number, number[]>;
  readonly apiKeys: ApiKey[];
}

// The repositories hold no state: their steps are composed here.
const roles = new RolesRepository();
const configurations = new ConfigurationsRepository();
const classifications = new ClassificationsRepository();
const users = new UsersRepository();
const apiKeys = new ApiKeysRepository();

/** Reads of the state as a whole, for the state view. */
export class StateRowsRepository {
  /**
   * Every row of the view in one consistent read: no API key without its user, no member
   * without its classification, whatever commits meanwhile.
   */
  *view(): Step<ViewRows> {
    return yield* snapshot(function* (): Step<ViewRows> {
      return {
        roles: yield* roles.list(),
        configurations: yield* configurations.list(),
        classifications: yield* classifications.list(),
        members: yield* classifications.allMembers(),
        users: yield* users.list(),
        roleIds: yield* users.roleIdsByUser(),
        apiKeys: yield* apiKeys.list(),
      };
    });
  }
}
