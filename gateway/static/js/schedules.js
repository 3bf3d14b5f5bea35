// What the Automations page and a schedule's own page share: a schedule's timing in words,
// its next fire (local time and how far off), its paused badge, and its commands (Pause with
// a note, Resume, Fire now). The words about what a schedule did (last_outcome, pause_note,
// event messages) are the server's; nothing here makes them up.

import { api, paths } from './api.js';
import { enumName, formatTime, h, replaceChildren, shortId } from './dom.js';

// "900s" -> "15m", "5400s" -> "1h 30m", "0.500s" -> "0.5s".
export function durationWords(text) {
  let seconds = Number.parseFloat(String(text || '').replace(/s$/, ''));
  if (!Number.isFinite(seconds) || seconds <= 0) return '';
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60]]) {
    if (seconds >= size) {
      parts.push(`${Math.floor(seconds / size)}${unit}`);
      seconds %= size;
    }
  }
  if (seconds > 0) parts.push(`${Number(seconds.toFixed(3))}s`);
  return parts.join(' ');
}

// "every 15m", "cron 0 9 * * 1-5 (Europe/Berlin)", "once at 2026-12-01 09:00:00", or how
// a schedule without timing fires.
export function timingWords(schedule) {
  const spec = schedule.spec || {};
  const zone = spec.time_zone || 'UTC';
  let words;
  if (spec.cron) words = `cron ${spec.cron} (${zone})`;
  else if (spec.interval) {
    const offset = durationWords(spec.interval_offset);
    words = `every ${durationWords(spec.interval)}${offset ? ` (+${offset})` : ''}`;
  } else if (spec.at) words = `once at ${formatTime(spec.at)}`;
  else words = schedule.webhook_enabled ? 'on webhook deliveries only' : 'only when fired by hand';
  if (words && schedule.webhook_enabled && (spec.cron || spec.interval || spec.at)) {
    words += ' · and on webhook deliveries';
  }
  return words;
}

// "in 3 min", "12 s ago", "now".
export function relativeWords(rfc3339, now = Date.now()) {
  const at = new Date(rfc3339).getTime();
  if (Number.isNaN(at)) return '';
  const seconds = Math.round((at - now) / 1000);
  const abs = Math.abs(seconds);
  if (abs < 1) return 'now';
  let text;
  if (abs < 60) text = `${abs} s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)} min`;
  else if (abs < 2 * 86400) text = `${Math.round(abs / 3600)} h`;
  else text = `${Math.round(abs / 86400)} d`;
  return seconds > 0 ? `in ${text}` : `${text} ago`;
}

// The next fire as local time and how far off; a paused schedule fires nothing.
export function nextFire(schedule) {
  if (schedule.paused) return h('span', { class: 'muted next-fire' }, 'none while paused');
  if (!schedule.next_fire_time) return h('span', { class: 'muted next-fire' }, '—');
  return h(
    'span',
    { class: 'next-fire' },
    h('time', { datetime: schedule.next_fire_time }, formatTime(schedule.next_fire_time)),
    h('span', { class: 'muted relative' }, ` (${relativeWords(schedule.next_fire_time)})`),
  );
}

export function overlapWords(schedule) {
  return (enumName(schedule.overlap_policy, 'OVERLAP_POLICY') || 'skip').replaceAll('_', ' ');
}

// Paused (with the server's note: "paused by ana: vendor outage") or active.
export function statusBadge(schedule) {
  return schedule.paused
    ? h('span', { class: 'sched-badge', dataset: { paused: 'true' } }, schedule.pause_note || 'paused')
    : h('span', { class: 'sched-badge', dataset: { paused: 'false' } }, 'active');
}

export function scheduleLink(schedule) {
  const href = `#/automations/${encodeURIComponent(schedule.project_id)}/${encodeURIComponent(schedule.schedule_id)}`;
  return h('a', { href, class: 'schedule-link' }, schedule.display_name || schedule.schedule_id);
}

// Pause (asks for a note in place), Resume, Fire now. `done()` re-reads what the page shows;
// `busy(true)` while a note is being written, so a refresh does not wipe the field.
export function scheduleActions(ctx, schedule, { done, busy = () => {} }) {
  const box = h('div', { class: 'actions sched-actions', role: 'group', 'aria-label': `Commands for ${schedule.schedule_id}` });
  const base = paths.schedule(schedule.project_id, schedule.schedule_id);
  const run = async (verb, body, said) => {
    try {
      const answer = await api(`${base}:${verb}`, { method: 'POST', body });
      const fired = verb === 'fire' && answer.runs && answer.runs[0];
      const notes = (answer.notes || []).join('; ');
      ctx.announce(fired ? `${said}: run ${shortId(fired.run_id)}` : notes || said);
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
    busy(false);
    done();
  };
  const buttons = () => {
    replaceChildren(
      box,
      schedule.paused
        ? h('button', { type: 'button', class: 'resume', onclick: () => run('resume', {}, `Resumed ${schedule.schedule_id}`) }, 'Resume')
        : h('button', { type: 'button', class: 'pause', onclick: askNote }, 'Pause…'),
      h('button', { type: 'button', class: 'fire', onclick: () => run('fire', {}, `Fired ${schedule.schedule_id}`) }, 'Fire now'),
    );
  };
  const askNote = () => {
    busy(true);
    const id = `pause-note-${schedule.project_id}-${schedule.schedule_id}`.replace(/[^A-Za-z0-9_-]/g, '_');
    const input = h('input', { id, class: 'pause-note', type: 'text', maxlength: '400', placeholder: 'why, for people to read', autocomplete: 'off' });
    const form = h(
      'form',
      {
        class: 'inline-form pause-form',
        onsubmit: (event) => {
          event.preventDefault();
          run('pause', { note: input.value.trim() }, `Paused ${schedule.schedule_id}`);
        },
      },
      h('label', { for: id }, 'Pause note'),
      input,
      h('button', { type: 'submit', class: 'pause-confirm' }, 'Pause'),
      h('button', { type: 'button', class: 'pause-cancel', onclick: () => { busy(false); buttons(); } }, 'Cancel'),
    );
    replaceChildren(box, form);
    input.focus();
  };
  buttons();
  return box;
}
