// The task inspector, #/tasks/ID: the recovery prompt first when a person must judge an
// interruption, the open questions and approvals, goal and constraints, the acceptance
// criteria (editable: editCriterion makes a new plan version), the steps timeline, the
// decisions answered, budgets and usage, the plan history. Every text is the server's; the
// page follows the same live map as the "In progress" group and patches itself in place.

import { h, formatTime, formatDuration, enumName, timeEl } from '../dom.js';
import { command, follow, newer, read } from './live.js';
import { DIRECT, fill, openDecisions, row } from './rows.js';
import { byWhom, whoAmI } from '../me.js';

const CHOICES = {
  effect: [
    ['done', 'Done, skip'],
    ['retry', 'Not done, retry'],
  ],
  approval: [
    ['grant', 'Approve'],
    ['deny', 'Deny'],
  ],
  verification: [
    ['confirm', 'Confirm'],
    ['reject', 'Reject'],
  ],
};

// ClearRecovery's resolutions, in a person's words (seed C: 已发送, 跳过 / 未发送, 重试).
const RESOLUTION_WORDS = { skip: 'Done, skip', retry: 'Not done, retry' };

function section(id, title) {
  return h('section', { class: `lt-section lt-${id}`, 'aria-labelledby': `lt-${id}-h` },
    h('h2', { id: `lt-${id}-h` }, title), h('div', { class: 'lt-body' }));
}

function author(who) {
  return who === 'user' ? 'you' : who || 'model';
}

function evidenceLinks(list) {
  if (!list || !list.length) return h('span', { class: 'muted' }, 'no evidence');
  return h('ul', { class: 'lt-evidence' }, list.map((e) => h('li', {},
    h('span', { class: 'lt-kind' }, e.kind), ' ',
    /^https?:\/\//.test(e.reference) ? h('a', { href: e.reference, rel: 'noreferrer' }, e.reference)
      : h('code', {}, e.reference),
    e.summary ? ` — ${e.summary}` : '',
    e.unavailable ? h('span', { class: 'lt-warn' }, ` (unavailable: ${e.unavailable_reason})`) : '')));
}

function stepDuration(step) {
  const effects = step.effects || [];
  const first = effects[0];
  const last = effects[effects.length - 1];
  if (!first || !last || !last.receipt || !last.receipt.time) return '';
  const ms = new Date(last.receipt.time) - new Date(first.record_time);
  return Number.isFinite(ms) && ms >= 0 ? formatDuration(`${ms / 1000}s`) : '';
}

export function mount(ctx, id) {
  const { project, main, showError, clearError } = ctx;
  const head = h('ul', { class: 'lt-list lt-inspector-state' });
  const recovery = h('section', { class: 'lt-recovery', role: 'region', 'aria-label': 'Recovery' });
  const parts = {
    ask: section('ask', 'Waiting for you'),
    goal: section('goal', 'Goal and constraints'),
    criteria: section('criteria', 'Acceptance criteria'),
    steps: section('steps', 'Steps'),
    decisions: section('decisions', 'Decisions and approvals'),
    budget: section('budget', 'Budget and usage'),
    plans: section('plans', 'Plan history'),
  };
  const title = h('h1', { tabindex: '-1' }, `Task ${id}`);
  main.append(title, head, recovery, ...Object.values(parts));
  let task = null;
  let me = null; // GET /v1/me: "answered by you"
  let checking = false; // "I'll check": the person will look first; nothing is sent

  const act = async (verb, body = {}) => {
    clearError();
    try {
      await command(project, task, verb, body);
    } catch (error) {
      showError(error);
    }
  };
  const body = (name) => parts[name].querySelector('.lt-body');
  // The head row's main action: Start, Pause, Resume act at once; the others point at the
  // part of this page that answers them.
  const onAction = (shown) => {
    if (DIRECT.has(shown.display_action)) act(shown.display_action);
    else {
      const target = !recovery.hidden ? recovery : !parts.ask.hidden ? parts.ask : parts.criteria;
      target.scrollIntoView({ block: 'start' });
    }
  };

  function renderRecovery() {
    recovery.hidden = !task.recovery_prompt;
    if (recovery.hidden) return;
    const effect = openDecisions(task).find((d) => d.kind === 'effect');
    const buttons = effect
      ? CHOICES.effect.map(([answer, words]) => h('button', { type: 'button', dataset: { answer },
        onclick: () => act('answer', { decision_id: effect.decision_id, answer }) }, words))
      // recovery_required: the resolutions the server offers now (skip and retry with a
      // stopped step; retry alone, "check again", after an interrupted verification)
      : [...(task.recovery_resolutions || []).map((resolution) => h('button', {
        type: 'button', dataset: { answer: resolution },
        onclick: () => act('clearRecovery', { resolution, note: 'resolved from the dashboard' }),
      }, RESOLUTION_WORDS[resolution] || resolution)),
      h('button', { type: 'button', dataset: { answer: 'cancel' },
        onclick: () => act('cancel', { note: 'given up after a check' }) }, 'Cancel it')];
    buttons.push(h('button', { type: 'button', dataset: { answer: 'check' }, onclick: () => {
      checking = true;
      renderRecovery();
    } }, "I'll check"));
    recovery.replaceChildren(
      h('h2', {}, 'truerun needs you to check'),
      h('p', { class: 'lt-prompt' }, task.recovery_prompt),
      h('div', { class: 'lt-actions' }, buttons),
      checking ? h('p', { class: 'lt-checking', role: 'status' },
        `You will check first: nothing was sent; it stays ${task.display_label}.`) : '',
    );
  }

  function renderAsk() {
    const open = openDecisions(task).filter((d) => d.kind !== 'effect');
    parts.ask.hidden = !open.length;
    body('ask').replaceChildren(...open.map((d) => {
      const choices = CHOICES[d.kind] || (d.options || []).map((o) => [o, o]);
      const field = h('input', { type: 'text', 'aria-label': 'Your answer' });
      const scope = d.kind === 'approval'
        ? h('p', { class: 'lt-scope muted' }, 'Scope: for this attempt only.') : '';
      return h('div', { class: 'lt-decision', dataset: { decisionId: d.decision_id } },
        h('p', {}, d.question), d.subject ? h('p', {}, h('code', {}, d.subject)) : '', scope,
        h('div', { class: 'lt-actions' }, choices.length
          ? choices.map(([answer, words]) => h('button', { type: 'button', dataset: { answer },
            onclick: () => act('answer', { decision_id: d.decision_id, answer }) }, words))
          : [field, h('button', { type: 'button', onclick: () =>
            act('answer', { decision_id: d.decision_id, answer: field.value }) }, 'Answer')]));
    }));
  }

  // Goal and constraints, editable: saving is revisePlan (a new plan version). Not
  // re-rendered while the person edits it.
  function renderGoal() {
    const form = parts.goal.querySelector('form');
    if (form && form.contains(document.activeElement)) return;
    const goal = h('textarea', { id: 'lt-goal-input', rows: 2 }, task.goal);
    const constraints = h('textarea', { id: 'lt-constraints-input', rows: 3 },
      (task.constraints || []).join('\n'));
    const reason = h('input', { id: 'lt-reason-input', type: 'text', required: true });
    body('goal').replaceChildren(h('form', { class: 'lt-goal-form', onsubmit: (event) => {
      event.preventDefault();
      act('revisePlan', {
        reason: reason.value,
        goal: goal.value,
        constraints: constraints.value.split('\n').map((c) => c.trim()).filter(Boolean),
        revise_constraints: true,
      });
    } },
    h('label', { for: 'lt-goal-input' }, 'Goal'), goal,
    h('label', { for: 'lt-constraints-input' }, 'Constraints (one a line)'), constraints,
    h('label', { for: 'lt-reason-input' }, 'Why it changes'), reason,
    h('button', { type: 'submit' }, 'Save as a new plan version')),
    h('p', { class: 'muted' }, `${task.handle} · owner ${task.owner_id} · plan version ${task.plan_version}`));
  }

  function renderCriteria() {
    if (parts.criteria.contains(document.activeElement) && document.activeElement.tagName === 'INPUT') return;
    body('criteria').replaceChildren(h('ul', {}, (task.criteria || []).map((c) => {
      const field = h('input', { type: 'text', value: c.text, 'aria-label': `Reword ${c.criterion_id}` });
      return h('li', { class: 'lt-criterion', dataset: { criterionId: c.criterion_id,
        result: enumName(c.result, 'CRITERION_RESULT') || 'unproven' } },
        h('span', { class: 'lt-result' }, enumName(c.result, 'CRITERION_RESULT') || 'unproven'), ' ',
        h('span', { class: 'lt-text' }, c.text), ' ',
        h('span', { class: 'lt-author' }, author(c.author)), ' ',
        h('span', { class: 'lt-required' }, c.required ? 'required' : 'optional'), ' ',
        evidenceLinks(c.evidence),
        h('form', { class: 'lt-edit', onsubmit: (event) => {
          event.preventDefault();
          act('editCriterion', { criterion_id: c.criterion_id, text: field.value, reason: 'reworded on the dashboard' });
        } }, field, h('button', { type: 'submit' }, 'Save wording')));
    })));
  }

  function render() {
    const rows = head.querySelector('.lt-row');
    if (rows) fill(rows, task);
    else head.append(row(task, onAction));
    title.textContent = task.goal;
    document.title = `${task.goal} — truerun`;
    renderRecovery();
    renderAsk();
    renderGoal();
    renderCriteria();
    body('steps').replaceChildren(h('ol', { class: 'lt-steps' }, (task.steps || []).map((s) =>
      h('li', { class: 'lt-step', dataset: { stepId: s.step_id, state: enumName(s.state, 'STEP_STATE') } },
        h('span', { class: 'lt-step-state' }, enumName(s.state, 'STEP_STATE')), ' ',
        h('span', {}, s.title), ' ',
        h('span', { class: 'lt-class' }, enumName(s.side_effect, 'SIDE_EFFECT_CLASS').replace('_', '-')),
        s.attempt_count ? ` · tries ${s.attempt_count}` : '',
        stepDuration(s) ? ` · ${stepDuration(s)}` : '', ' · updated ', timeEl(s.update_time), ' ',
        evidenceLinks(s.evidence)))));
    body('decisions').replaceChildren(h('ul', {}, (task.decisions || []).map((d) =>
      h('li', { class: 'lt-past' }, `${d.kind}: ${d.question} — `,
        d.state === 'open' ? 'open' : `${d.state}${d.answer ? ` “${d.answer}”` : ''} by ${byWhom(d.answered_by, me)} at ${formatTime(d.answer_time)}`,
        d.repeat_count > 1 ? ` · request ${d.repeat_count} for the same permission` : '',
        d.note ? ` · note: ${d.note}` : ''))));
    const b = task.budget || {};
    body('budget').replaceChildren(h('dl', { class: 'lt-budget' },
      h('dt', {}, 'Attempts'), h('dd', {}, `${b.attempts_used || 0} of ${b.max_attempts || '—'}`),
      h('dt', {}, 'Tokens'), h('dd', {}, `${b.tokens_used || 0} of ${Number(b.max_tokens) ? b.max_tokens : 'no cap'}`),
      h('dt', {}, 'Lifetime'), h('dd', {}, `since ${formatTime(task.create_time)}, ${
        b.deadline ? `until ${formatTime(b.deadline)}` : 'no limit'}`)));
    body('plans').replaceChildren(h('ol', { class: 'lt-plans' }, (task.plan_versions || []).map((p) =>
      h('li', { dataset: { version: p.version } }, `v${p.version} · ${author(p.author)} (${p.created_by}) · `,
        timeEl(p.create_time), ` · ${p.reason || 'first plan'}`))));
  }

  const stop = follow(project, (tasks, changed) => {
    const live = tasks.get(id);
    if (!live || (changed && changed.long_task_id !== id)) return;
    // Nothing new (the map took nothing newer): keep the page as it is, so a button is
    // never replaced under the pointer.
    if (task && !newer(live, task)) return;
    task = live;
    render();
  });
  whoAmI().then((got) => {
    me = got;
    if (task && me) render();
  });
  if (!task) {
    read(project, id).then((got) => {
      if (!task) {
        task = got;
        render();
      }
    }, showError);
  }
  return { title: `Task ${id}`, dispose: stop };
}
