// Who the dashboard's token is (GET /v1/me): the actor id its actions are recorded as, so
// a surface can say "by you" where a record names that actor. Asked once per page load;
// unknown (null) when the call fails, and then records keep the actor's id.

import { api } from './api.js';

let asked = null;

export function whoAmI() {
  if (asked === null) asked = api('/v1/me').catch(() => null);
  return asked;
}

// "you" when `actor` is the caller's own actor id, else the id as recorded.
export function byWhom(actor, me) {
  if (!actor) return '—';
  return me && actor === me.actor ? 'you' : actor;
}
