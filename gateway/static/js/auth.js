// The bearer token: taken once from the address fragment (#token=...), kept in
// sessionStorage, and removed from the address bar so it is not bookmarked or shared.

const KEY = 'truerun.token';

export function adoptFragment() {
  const raw = window.location.hash.replace(/^#/, '');
  if (!raw.includes('=') || raw.startsWith('/')) return {};
  const params = new URLSearchParams(raw);
  const found = {};
  if (params.has('token')) {
    sessionStorage.setItem(KEY, params.get('token'));
    found.token = true;
  }
  if (params.has('project')) found.project = params.get('project');
  const route = params.get('route') || '/queue';
  history.replaceState(null, '', `${window.location.pathname}${window.location.search}#${route}`);
  return found;
}

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}
