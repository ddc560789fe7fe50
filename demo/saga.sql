-- demo part 4 (scripts/demo.sh): an order saga.  reserve stock -> charge
-- card -> ship; the charge fails permanently, the stock is released, the
-- saga ends compensated, and the ledger says why.
\set QUIET 1
\pset footer off
\echo
\echo '=== 13. An order saga: reserve stock, charge card, ship'
SELECT queue FROM ntask_queue_set('stock', max_attempts => 3);
SELECT queue FROM ntask_queue_set('payment', max_attempts => 3);
SELECT queue FROM ntask_queue_set('shipping', max_attempts => 3);
SELECT saga_id AS order_saga, created, state FROM ntask_saga_start('order-o7', '[
	{"name": "reserve", "queue": "stock", "payload": {"sku": "A1", "n": 2},
	 "compensate": {"queue": "stock", "payload": {"release": "A1", "n": 2}}},
	{"name": "charge", "queue": "payment", "payload": {"card": "c-9", "eur": 30},
	 "compensate": {"queue": "payment", "payload": {"refund": 30}}},
	{"name": "ship", "queue": "shipping", "payload": {"to": "u-a"}}]') \gset
\echo '--- the stock worker reserves: its success enqueues the charge in the same transaction'
SELECT t.task_key, r.result, r.state
FROM ntask_claim('stock', 'W-stock') t, ntask_transition(t.task_id, t.token, 'succeeded', outcome => 'reserved') r;
\echo '--- the card is declined: a permanent error; the saga compensates the reservation'
SELECT t.task_key, r.result, r.state
FROM ntask_claim('payment', 'W-pay') t,
	 ntask_transition(t.task_id, t.token, 'repair_required', 'permanent', '{"reason": "card_declined"}') r;
SELECT state, current_step, failed_step, reason FROM ntask.saga WHERE saga_id = :order_saga;
\echo '--- the stock worker releases the reservation (the compensation is an ordinary task)'
SELECT t.task_key, r.result, r.state
FROM ntask_claim('stock', 'W-stock') t, ntask_transition(t.task_id, t.token, 'succeeded', outcome => 'released') r;
\echo '--- the saga, step by step (ship never started: nothing to undo)'
SELECT step_no, name, kind, task_state, attempts, unknown_attempts, saga_state
FROM ntask.saga_status WHERE saga_id = :order_saga ORDER BY step_no, kind DESC;
\echo '--- the ledger says why'
SELECT t.task_key, a.token, a.result, a.error_class, a.outcome, a.detail->>'reason' AS why
FROM ntask.attempt_all a JOIN ntask.task t USING (task_id)
WHERE t.saga_id = :order_saga ORDER BY a.ended_at;
