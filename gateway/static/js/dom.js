// Small DOM helpers: build elements without innerHTML (no markup injection from run data).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replaceChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

const pad = (n) => String(n).padStart(2, '0');

// One fixed, absolute format: a relative "5 s ago" would differ between two pages looking at
// the same run a moment apart, and every surface must show the same text.
export function formatTime(rfc3339) {
  if (!rfc3339) return '';
  const d = new Date(rfc3339);
  if (Number.isNaN(d.getTime())) return String(rfc3339);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

export function timeEl(rfc3339) {
  if (!rfc3339) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: rfc3339 }, formatTime(rfc3339));
}

export function shortId(id) {
  return id ? String(id).slice(-8) : '';
}

// A proto3 JSON google.protobuf.Duration ("1.500s") as "1.5 s".
export function formatDuration(text) {
  if (!text) return '—';
  const seconds = Number.parseFloat(String(text).replace(/s$/, ''));
  if (Number.isNaN(seconds)) return String(text);
  return seconds < 60 ? `${seconds.toFixed(1)} s` : `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

export function enumName(value, prefix) {
  if (!value) return '';
  return String(value).replace(new RegExp(`^${prefix}_`), '').toLowerCase();
}
