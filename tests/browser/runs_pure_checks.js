// Evaluated by test_runs_pages.py::test_pure_display_functions in the dashboard's page:
// the pure functions of the runs modules on synthetic input, results returned as JSON.
(async () => {
  const t = await import('/js/attempt-timeline.js');
  const d = await import('/js/durations.js');
  const s = await import('/js/log-search.js');
  const f = await import('/js/run-filters.js');
  const a = await import('/js/run-actions.js');
  const at = (sec) => `2026-01-01T00:00:${String(sec).padStart(2, '0')}Z`;
  const ev = (sequence, type, sec, payload = {}, actor = { type: 'ACTOR_TYPE_RUNTIME', id: 'i' }) =>
    ({ sequence: String(sequence), type, create_time: at(sec), attempt_id: 'A', payload, actor });
  const attempt = { id: 'A', status: 'ATTEMPT_STATUS_LOST', claim_time: at(0), finish_time: at(40) };
  const steps = t.attemptSteps(attempt, [
    ev(9, 'attempt.lost', 30, { reason: 'runtime gone' }, { type: 'ACTOR_TYPE_SYSTEM' }),
    ev(4, 'attempt.start_requested', 2, {}, { type: 'ACTOR_TYPE_SCHEDULER', id: 'd' }),
    ev(6, 'run.cancel_requested', 10, { reason: 'stop' }, { type: 'ACTOR_TYPE_USER', id: 'ann' }),
    ev(7, 'attempt.sync_stale', 20, { reason: 'lease expired' }, { type: 'ACTOR_TYPE_SYSTEM' }),
    ev(5, 'attempt.output_progressed', 5),
    { ...ev(8, 'attempt.running', 15, { seq: 2 }), attempt_id: 'OTHER' },
  ]);
  return {
    keys: steps.map((x) => x.key),
    evidence: steps.map((x) => x.evidence),
    durations: [d.durationText(850), d.durationText(45000), d.durationText(185000), d.durationText(7440000)],
    ago: [d.agoText(2000), d.agoText(12000), d.agoText(180000)],
    found: s.findAll('Step 01 step 011 STEP', 'step'),
    parsed: f.parseFilter('#/queue?state=running&owner=x&q=a%20b&bogus=1'),
    badState: f.parseFilter('#/queue?state=sleeping').state,
    query: f.filterQuery({ q: 'a b', state: 'failed', owner: 'x', from: '', agent: '', task: '', to: '' }),
    matches: [
      f.matches({ id: 'r1', task_id: 'Nightly', owner_id: 'x', display_state: 'DISPLAY_STATE_FAILED', create_time: at(5) }, { state: 'failed', q: 'NIGHT', from: at(5), to: at(6) }),
      f.matches({ id: 'r1', task_id: 'Nightly', owner_id: 'x', display_state: 'DISPLAY_STATE_FAILED', create_time: at(6) }, { to: at(6) }),
    ],
    // the server's list alone decides, in the dashboard's order, whatever the state says
    verbs: [
      { status: 'RUN_STATUS_QUEUED', allowed_commands: ['cancel', 'fail', 'pause'] },
      { status: 'RUN_STATUS_QUEUED', allowed_commands: ['resume'] },
      { status: 'RUN_STATUS_QUEUED', display_state: 'DISPLAY_STATE_UNKNOWN' },
      { status: 'RUN_STATUS_FAILED', allowed_commands: ['retry'] },
    ].map((run) => a.operatorVerbs(run).map((c) => c.verb).join(',')),
  };
})
