"""Long tasks (seed C's Durable Execution): a user goal above runs, spanning many attempts and
days, with a versioned linear plan, steps with side-effect classes, intent and receipt,
safe recovery and evidence-backed completion (docs/long-tasks.md).

Only the pure domain is here yet (``longtasks/domain``). The store, the service (the one
write door with version CAS and lease checks), the LongTaskService API, the runtime side
and the verifier come with issue #13.
"""
