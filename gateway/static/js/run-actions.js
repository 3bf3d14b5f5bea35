// The operator commands on the run page (resolve, pause, resume, requeue, fail): audited
// escape hatches, so each asks for a reason in a dialog (required; Cancel / Confirm) and the
// server's refusal (a non-operator token, a run that moved on) is shown in that dialog, in
// place. Which commands are offered is the server's word: the run's allowed_commands, which
// the coordinator computes from the same checks the commands make
// (coordinator/domain/decide/preconditions.py). Nothing here reads the run's state.

import { api, ApiError, paths } from './api.js';
import { h, shortId } from './dom.js';

const COMMANDS = [
  { verb: 'resolve', label: 'Resolve…', help: 'Settle an attempt truerun cannot know about: say how it ended.' },
  { verb: 'pause', label: 'Pause…', help: 'Take the run out of the queue; it is never claimed while paused.' },
  { verb: 'resume', label: 'Resume…', help: 'Put the paused run back in the queue, in its old place.' },
  { verb: 'requeue', label: 'Requeue…', help: 'Put the dead-lettered run back in the queue.' },
  { verb: 'fail', label: 'Fail…', help: 'Fail the run that never started.' },
];

// Pure: whether the server says `run` accepts `verb` now (cancel, retry, approve and the
// operator verbs alike); a run read from an older server without the list offers nothing.
export function allows(run, verb) {
  return (run.allowed_commands || []).includes(verb);
}

// Pure: the operator commands the server allows for `run`, in the dashboard's order.
export function operatorVerbs(run) {
  return COMMANDS.filter((c) => allows(run, c.verb));
}

function dialogFor(ctx, command, getRun, done) {
  const run = getRun();
  const reason = h('textarea', { id: 'op-reason', name: 'reason', 'aria-required': 'true', rows: '3', 'aria-describedby': 'op-help' });
  const resolution = h(
    'select',
    { id: 'op-resolution', name: 'resolution' },
    h('option', { value: 'failed' }, 'failed'),
    h('option', { value: 'succeeded' }, 'succeeded'),
    h('option', { value: 'not_started' }, 'not started (queue it again)'),
  );
  const error = h('p', { class: 'error op-error', id: 'op-error', role: 'alert', hidden: true });
  const confirm = h('button', { type: 'submit', id: 'op-confirm' }, 'Confirm');
  const dialog = h(
    'dialog',
    { class: 'op-dialog', id: 'op-dialog', 'aria-labelledby': 'op-title' },
    h(
      'form',
      { method: 'dialog' },
      h('h2', { id: 'op-title' }, `${command.verb[0].toUpperCase()}${command.verb.slice(1)} run ${shortId(run.id)}`),
      h('p', { id: 'op-help', class: 'muted' }, command.help, ' The reason and your token\'s identity are recorded in the run\'s events.'),
      command.verb === 'resolve' ? [h('label', { for: 'op-resolution' }, 'It ended as'), resolution] : null,
      h('label', { for: 'op-reason' }, 'Reason (required)'),
      reason,
      error,
      h('div', { class: 'op-buttons' }, h('button', { type: 'button', id: 'op-cancel', onclick: () => dialog.close() }, 'Cancel'), confirm),
    ),
  );
  dialog.addEventListener('close', () => dialog.remove());
  dialog.querySelector('form').addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!reason.value.trim()) {
      error.textContent = 'A reason is required.';
      error.hidden = false;
      reason.focus();
      return;
    }
    confirm.disabled = true;
    const body = { reason: reason.value.trim() };
    if (command.verb === 'resolve') body.resolution = resolution.value;
    const current = getRun();
    try {
      await api(`${paths.run(ctx.project, current.id)}:${command.verb}`, {
        method: 'POST',
        body,
        headers: current.etag ? { 'If-Match': current.etag } : {},
      });
      ctx.announce(`${command.verb} done for run ${shortId(current.id)}`);
      dialog.close();
      done();
    } catch (failure) {
      const code = failure instanceof ApiError && failure.reason ? ` (${failure.reason})` : '';
      error.textContent = `Refused: ${failure.message || failure}${code}`;
      error.hidden = false;
      confirm.disabled = false;
      done();
    }
  });
  return dialog;
}

// The buttons for `run` (replaced on each render); getRun() is the latest run read.
export function operatorButtons(ctx, run, getRun, done) {
  return operatorVerbs(run).map((command) =>
    h(
      'button',
      {
        type: 'button',
        class: 'op-button',
        id: `op-${command.verb}`,
        onclick: () => {
          const dialog = dialogFor(ctx, command, getRun, done);
          document.body.append(dialog);
          dialog.showModal();
          dialog.querySelector('#op-reason').focus();
        },
      },
      command.label,
    ),
  );
}
