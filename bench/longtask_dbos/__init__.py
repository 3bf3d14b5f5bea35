"""Issue #13: the effect-fixture scenario run against DBOS @DBOS.step, beside truerun."""
