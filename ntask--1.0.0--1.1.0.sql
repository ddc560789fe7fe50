/* ntask--1.0.0--1.1.0.sql: every schema change of the 1.1 wave (issues 45-51) */
-- Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '1.1.0'" to load this file. \quit

/*
 * THE RULE: every schema change of the 1.1 wave goes into BOTH this file
 * and ntask--1.1.0.sql, the complete install script a fresh CREATE
 * EXTENSION runs.  Regress "upgrade" installs 0.3 and 1.0.0 (test/frozen/),
 * updates each along 0.3 -> 1.0.0 -> 1.1.0 and fails on any difference
 * from a fresh 1.1.0: objects, columns and their order, defaults,
 * constraints, indexes, triggers, comments, privileges, view definitions
 * and every function's body.
 *
 * A C function of an earlier version is never removed from the library:
 * the older scripts of the path create it before this one drops it.
 *
 * One upgrade script for the whole wave: each issue adds its part under its
 * own heading below (keep the headings: parallel work merges cleanly).
 */

-- issue 45: hardening, third review
--
-- 45.1 / 46.3: a parent's failure is walked iteratively (src/deps.c); a
-- child that waits for a parent that is canceled or skipped, which can
-- never succeed, goes to repair_required (reason parent_canceled or
-- parent_skipped): ntask_explain says so
COMMENT ON COLUMN ntask.queue.on_parent_failed IS 'what a task of the queue does when one of its parents ends in repair_required, canceled or skipped: wait (for a parent in repair_required to be replayed and succeed; a canceled or skipped parent, which never can, sends the task to repair_required, reason parent_canceled or parent_skipped) or cancel (reason parent_failed, audited); an enqueue''s on_parent_failed overrides it';
COMMENT ON FUNCTION ntask.task_deps_changed() IS
'ntask: internal: trigger on ntask.task: a parent that succeeded counts down its waiting children and makes the last one ready; one that ended in repair_required, canceled or skipped cancels its children whose policy is cancel, and one canceled or skipped sends the others to repair_required; the walk over the descendants is iterative';

-- 45.2: the claim's context is bounded (ntask.max_context_bytes per task,
-- ntask.max_claim_context_bytes per claim); a task past the claim's
-- budget carries "deferred": true and its worker reads the rest here
CREATE FUNCTION @extschema@.ntask_context(task_id bigint, token bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ntask_context'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_context(bigint, bigint) IS
'ntask: the whole context of the attempt the token holds, as ntask_claim hands it out without the claim''s budget (for a task whose claim context said deferred: true); NULL when the token no longer holds the task or the task has none';
REVOKE ALL ON FUNCTION @extschema@.ntask_context(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.ntask_context(bigint, bigint) TO ntask_worker;

-- 45.3: an ordered key's head that waits for its parents holds the key:
-- the order index holds waiting tasks too, and the waiting tasks of
-- queues that turned ordered in 1.0.0 join it
UPDATE ntask.task t SET ordered = true
FROM ntask.queue q
WHERE q.queue = t.queue AND q.ordered AND t.state = 'waiting' AND t.ordered IS NOT TRUE;
DROP INDEX ntask.task_ordered_idx;
CREATE INDEX task_ordered_idx ON ntask.task (queue, partition_key, task_id)
	WHERE ordered AND (due_at IS NOT NULL OR state = 'repair_required' OR state = 'awaiting'
					   OR state = 'waiting');

-- 45.6: a depends_on enqueue locks no parent until its commit
-- At the commit of a transaction that enqueued children with depends_on,
-- their parents are locked and read again and the children settled
-- (src/deps.c): the enqueue itself locks no parent, so a producer's open
-- transaction never blocks the parent's holder.
CREATE FUNCTION ntask.task_dep_settle() RETURNS trigger
AS 'MODULE_PATHNAME', 'ntask_task_dep_settle'
LANGUAGE C;
COMMENT ON FUNCTION ntask.task_dep_settle() IS
'ntask: internal: deferred constraint trigger on ntask.task_dep: at the commit of a transaction that enqueued children with depends_on, lock their parents in task_id order, read their states again and make each child ready, keep it waiting, cancel it or send it to repair';
CREATE CONSTRAINT TRIGGER task_dep_settle AFTER INSERT ON ntask.task_dep
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION ntask.task_dep_settle();
REVOKE ALL ON FUNCTION ntask.task_dep_settle() FROM PUBLIC;

-- (ntask_explain, whole, is replaced once below, under issue 46: one
-- copy for the wave, equal to ntask--1.1.0.sql's; 45.1's words are in it)

-- end of issue 45


-- issue 46: the third first hour

-- 46.4: a queue's signal_role alone is the right to signal it; the
-- function's own check refuses everyone else (42501).
-- A GRANT run by an extension script records the function's whole ACL,
-- the users' grants on it included, as the extension's initial
-- privileges (pg_init_privs): pg_dump would then leave a user's grant on
-- ntask_signal out, and 17 and later would refuse to drop its role even
-- after a REVOKE.  So the initial privileges gain only what this GRANT
-- adds, and the roles they no longer name lose their dependency on them
-- (t/048_upgrade_tasks.pl).
DO $$
DECLARE
	f pg_catalog.regprocedure := '@extschema@.ntask_signal(text, text, jsonb)'::pg_catalog.regprocedure;
	before pg_catalog.aclitem[];
	init pg_catalog.aclitem[];
	mine pg_catalog.aclitem[];
BEGIN
	SELECT coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner)) INTO before
	FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f;
	SELECT i.initprivs INTO init FROM pg_catalog.pg_init_privs i
	WHERE i.objoid OPERATOR(pg_catalog.=) f AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
	  AND i.objsubid OPERATOR(pg_catalog.=) 0;
	IF NOT FOUND THEN
		SELECT pg_catalog.acldefault('f', p.proowner) INTO init
		FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f;
	END IF;
	EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f);
	SELECT init OPERATOR(pg_catalog.||) ARRAY(
			SELECT x FROM pg_catalog.unnest(p.proacl) x
			WHERE NOT x OPERATOR(pg_catalog.=) ANY (before) AND NOT x OPERATOR(pg_catalog.=) ANY (init))
	INTO mine FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f;
	UPDATE pg_catalog.pg_init_privs i SET initprivs = mine
	WHERE i.objoid OPERATOR(pg_catalog.=) f AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
	  AND i.objsubid OPERATOR(pg_catalog.=) 0;
	DELETE FROM pg_catalog.pg_shdepend d
	WHERE d.dbid OPERATOR(pg_catalog.=) (SELECT b.oid FROM pg_catalog.pg_database b
										 WHERE b.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
	  AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
	  AND d.objid OPERATOR(pg_catalog.=) f AND d.objsubid OPERATOR(pg_catalog.=) 0
	  AND d.deptype OPERATOR(pg_catalog.=) 'i'
	  AND d.refobjid OPERATOR(pg_catalog.<>) ALL (ARRAY(
			SELECT x.grantee FROM pg_catalog.aclexplode(mine) x
			UNION SELECT x.grantor FROM pg_catalog.aclexplode(mine) x));
END $$;

-- 46.5 (and 46.9 below: a dropped worker_role): ntask_explain of a queue
-- without a target no
-- longer says a background worker sends an unknown attempt again; the
-- next claimer gets prior_outcome 'unknown'
CREATE OR REPLACE FUNCTION @extschema@.ntask_explain(task_id bigint, include_payload boolean DEFAULT false)
RETURNS TABLE (at timestamptz, event text, token bigint, actor text, detail text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	t ntask.task;
	q ntask.queue;
	a ntask.attempt_all;	-- the latest attempt, if any (the open one included)
	n timestamptz := pg_catalog.now();
	is_http boolean;
	b ntask.breaker;		-- the queue's circuit breaker, if it has one
	waiting text;			-- what a due task waits for
	last_err text;
	prior text;
	words text;
	fin_actor text;
	fin_by text;
BEGIN
	IF ntask_explain.task_id IS NULL THEN
		RAISE EXCEPTION 'ntask: task_id must not be NULL' USING ERRCODE = '22004';
	END IF;
	IF ntask_explain.include_payload IS NULL THEN
		RAISE EXCEPTION 'ntask: include_payload must not be NULL' USING ERRCODE = '22004';
	END IF;
	SELECT * INTO t FROM ntask.task x WHERE x.task_id OPERATOR(pg_catalog.=) ntask_explain.task_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: task % does not exist', ntask_explain.task_id USING ERRCODE = 'P0002';
	END IF;
	SELECT * INTO q FROM ntask.queue x WHERE x.queue OPERATOR(pg_catalog.=) t.queue;
	SELECT * INTO a FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id
	ORDER BY x.token DESC LIMIT 1;
	-- (false, not NULL, for a queue without a target: issue 46.5)
	is_http := coalesce(q.target->>'type' OPERATOR(pg_catalog.=) 'http', false);

	-- what a due task waits for: a claim, or on an http queue whose circuit
	-- breaker is not closed, the breaker (src/breaker.c: the worker claims
	-- nothing of the queue while it is open, one probe when half open)
	waiting := format('waiting for %s to claim it',
					  CASE WHEN is_http THEN 'the background worker' ELSE 'a worker' END);
	IF is_http AND q.breaker_failures IS NOT NULL THEN
		SELECT * INTO b FROM ntask.breaker x WHERE x.queue OPERATOR(pg_catalog.=) t.queue;
		IF b.state OPERATOR(pg_catalog.=) 'open' AND b.open_until OPERATOR(pg_catalog.>) n THEN
			waiting := format('held by the circuit breaker of queue %s: open since %s after %s consecutive failures, open until %s (in %s); the background worker claims nothing of the queue until then, then sends one probe',
							  t.queue, ntask.explain_ts(b.opened_at), b.failures,
							  ntask.explain_ts(b.open_until), ntask.explain_age(b.open_until OPERATOR(pg_catalog.-) n));
		ELSIF b.state OPERATOR(pg_catalog.=) 'open' THEN
			waiting := format('held by the circuit breaker of queue %s: open until %s (passed %s ago); the background worker sends one probe of the queue at its next tick and the rest once the probe succeeds',
							  t.queue, ntask.explain_ts(b.open_until), ntask.explain_age(n OPERATOR(pg_catalog.-) b.open_until));
		ELSIF b.state OPERATOR(pg_catalog.=) 'half_open' THEN
			waiting := format('held by the circuit breaker of queue %s: half open since %s; the background worker sends one probe of the queue and holds the rest until it succeeds',
							  t.queue, ntask.explain_ts(b.changed_at));
		END IF;
	END IF;

	-- the last error in words: class, then the HTTP status, curl's error or the stage
	SELECT x.error_class || coalesce(' ' || coalesce('HTTP ' || (x.detail->>'http_status'),
													  x.detail->>'curl_error', x.error_stage), '')
	INTO last_err
	FROM ntask.attempt_all x
	WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.error_class IS NOT NULL
	ORDER BY x.token DESC LIMIT 1;

	-- what the next claim will report as prior_outcome
	-- (the same rule as ntask_claim's)
	IF EXISTS (SELECT 1 FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id) THEN
		prior := 'prior_outcome committed: a receipt exists, the next attempt must not redo the business write';
	ELSIF t.unknown_attempts OPERATOR(pg_catalog.>) 0 THEN
		-- on an http queue, what the worker does (dispatch.c dq_claim_step)
		prior := format('prior_outcome unknown: %s earlier attempt(s) may have had an effect, %s',
						t.unknown_attempts,
						CASE WHEN NOT is_http THEN 'the next claim hands it to a worker with prior_outcome = ''unknown'', which must reconcile first (did the effect happen?); no background worker sends it'
							 WHEN q.target ? 'reconcile_url' THEN
								 format('the background worker first asks the reconcile_url %s and sends again only if it answers 404',
										q.target->>'reconcile_url')
							 ELSE format('the target has no reconcile_url, so the background worker sends it again (%s with the same Idempotency-Key): the provider must deduplicate',
										 coalesce(q.target->>'method', 'POST'))
						END);
	END IF;

	-- who finished it: the worker whose attempt ended then, an audited
	-- action, the guard (skip or cancel at claim), else ntask itself
	-- (budget, deadline, lease expiry)
	IF t.finished_at IS NOT NULL THEN
		SELECT x.worker, 'attempt ' || x.attempt INTO fin_actor, fin_by FROM ntask.attempt_all x
		WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.ended_at OPERATOR(pg_catalog.=) t.finished_at
		  AND x.requested IS NOT NULL AND x.requested OPERATOR(pg_catalog.<>) 'released'
		ORDER BY x.token DESC LIMIT 1;
		IF fin_actor IS NULL THEN
			SELECT x.actor, 'ntask_' || x.action INTO fin_actor, fin_by FROM ntask.audit x
			WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.to_state OPERATOR(pg_catalog.=) t.state
			ORDER BY x.audit_id DESC LIMIT 1;
		END IF;
		IF fin_actor IS NULL AND t.state OPERATOR(pg_catalog.=) ANY ('{skipped,canceled}') THEN
			fin_actor := 'guard';
			fin_by := 'the guard at claim';
		END IF;
		IF fin_actor IS NULL THEN
			fin_actor := 'ntask';
			fin_by := CASE WHEN t.reason OPERATOR(pg_catalog.=) ANY ('{budget_exhausted,deadline_exceeded}')
						   THEN 'the budget check' ELSE 'ntask' END;
		END IF;
	END IF;

	words := CASE t.state
		WHEN 'waiting' THEN
			(SELECT format('waiting for %s of %s parents: %s%s; if one fails: %s',
						   t.parents_left, count(*),
						   string_agg(p.queue || ':' || p.task_key || CASE WHEN p.state OPERATOR(pg_catalog.<>) ALL ('{ready,leased,retry_wait,waiting}') THEN ' (' || p.state || ')' ELSE '' END, ', ' ORDER BY p.task_id)
							   FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded'),
						   CASE WHEN count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded') OPERATOR(pg_catalog.<) t.parents_left
								THEN format(' (%s pruned)', t.parents_left OPERATOR(pg_catalog.-) count(*) FILTER (WHERE p.state OPERATOR(pg_catalog.<>) 'succeeded')) ELSE '' END,
						   CASE coalesce(t.on_parent_failed, q.on_parent_failed)
								WHEN 'cancel' THEN 'cancel'
								ELSE 'wait (a parent in repair_required can be replayed; a canceled or skipped parent sends this task to repair_required)' END)
			 FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id
				  AND p.shard OPERATOR(pg_catalog.=) d.shard
			 WHERE d.task_id OPERATOR(pg_catalog.=) t.task_id AND d.shard OPERATOR(pg_catalog.=) t.shard)
		WHEN 'ready' THEN
			CASE WHEN t.run_at OPERATOR(pg_catalog.>) n THEN
				format('ready, not due until %s (in %s); then attempt %s of %s',
					   ntask.explain_ts(t.run_at), ntask.explain_age(t.run_at OPERATOR(pg_catalog.-) n),
					   t.attempts + 1, t.max_attempts)
			ELSE
				format('ready since %s (%s), %s (attempt %s of %s)',
					   ntask.explain_ts(t.run_at), ntask.explain_age(n OPERATOR(pg_catalog.-) t.run_at),
					   waiting, t.attempts + 1, t.max_attempts)
			END
		WHEN 'retry_wait' THEN
			CASE WHEN t.run_at OPERATOR(pg_catalog.>) n THEN
				format('retry_wait until %s (in %s; attempt %s of %s, last error %s)',
					   ntask.explain_ts(t.run_at), ntask.explain_age(t.run_at OPERATOR(pg_catalog.-) n),
					   t.attempts + 1, t.max_attempts, coalesce(last_err, 'none recorded'))
			ELSE
				format('retry_wait, due since %s (%s), %s (attempt %s of %s, last error %s)',
					   ntask.explain_ts(t.run_at), ntask.explain_age(n OPERATOR(pg_catalog.-) t.run_at),
					   waiting, t.attempts + 1, t.max_attempts, coalesce(last_err, 'none recorded'))
			END
		WHEN 'leased' THEN
			format('leased by %s until %s, %s (attempt %s of %s, token %s, %s)',
				   t.lease_owner, ntask.explain_ts(t.lease_until),
				   CASE
					   WHEN t.lease_until OPERATOR(pg_catalog.<) n THEN
						   format('not heartbeating: expired %s ago, the next claim or housekeeping takes it over',
								  ntask.explain_age(n OPERATOR(pg_catalog.-) t.lease_until))
					   WHEN t.updated_at OPERATOR(pg_catalog.>) a.claimed_at THEN
						   format('heartbeating (last %s ago)', ntask.explain_age(n OPERATOR(pg_catalog.-) t.updated_at))
					   ELSE
						   format('not heartbeating (no heartbeat since the claim %s ago)',
								  ntask.explain_age(n OPERATOR(pg_catalog.-) a.claimed_at))
				   END,
				   t.attempts, t.max_attempts, t.token,
				   CASE WHEN a.invoked_at IS NULL THEN 'not invoked yet'
						ELSE format('invoked %s ago: if it ends without a report its outcome is unknown',
									ntask.explain_age(n OPERATOR(pg_catalog.-) a.invoked_at)) END)
		WHEN 'repair_required' THEN
			format('repair_required: %s, owner %s%s (%s of %s attempts, %s with unknown outcome)%s',
				   t.reason, coalesce(t.repair_owner, 'none assigned'),
				   coalesce(', next: ' || t.repair_next_action, ''),
				   t.attempts, t.max_attempts,
				   (SELECT count(*) FROM ntask.attempt_all x
					WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND NOT x.outcome_known),
				   CASE WHEN t.reason OPERATOR(pg_catalog.=) ANY ('{parent_canceled,parent_skipped}') THEN
						'; a parent can no longer succeed: ntask_replay runs this task without its result, ntask_cancel ends it'
						ELSE '' END)
		WHEN 'succeeded' THEN
			format('succeeded (%s) at %s after %s attempt(s): waiting for nothing',
				   t.outcome, ntask.explain_ts(t.finished_at), t.attempts)
		WHEN 'canceled' THEN
			format('canceled at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
		WHEN 'skipped' THEN
			format('skipped at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
		WHEN 'awaiting' THEN
			format('awaiting signal %s of queue %s since %s (%s), %s (attempt %s of %s ended awaiting, not counted)',
				   t.signal_key, t.queue, ntask.explain_ts(t.updated_at),
				   ntask.explain_age(n OPERATOR(pg_catalog.-) t.updated_at),
				   CASE WHEN t.due_at IS NULL THEN 'no timeout: only ntask_signal or a cancel ends the wait'
						ELSE format('times out at %s (%s %s), then %s',
									ntask.explain_ts(t.due_at),
									CASE WHEN t.due_at OPERATOR(pg_catalog.>) n THEN 'in' ELSE 'passed' END,
									ntask.explain_age(abs(pg_catalog.date_part('epoch', t.due_at OPERATOR(pg_catalog.-) n)) * interval '1 second'),
									CASE t.await_on_timeout WHEN 'repair' THEN 'the next claim moves it to repair_required (await_timeout)'
										 ELSE 'the next claim hands it out with signal.timed_out' END) END,
				   t.attempts, t.max_attempts)
	END;
	-- a worker_role that was dropped holds every unfinished task (issue 46.9)
	IF t.finished_at IS NULL AND q.worker_role IS NOT NULL
	   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
					   WHERE r.oid OPERATOR(pg_catalog.=) q.worker_role::pg_catalog.oid) THEN
		words := words || '; but the queue''s worker_role was dropped (DROP ROLE): no worker but a superuser may claim it or report on it, until an admin names another role (or NULL) with ntask_queue_set_roles';
	END IF;
	-- the holder's latest progress (ntask_heartbeat progress => ...)
	IF t.state OPERATOR(pg_catalog.=) 'leased' AND t.progress IS NOT NULL THEN
		words := words || format('; progress %s, reported %s ago', t.progress::text,
								 ntask.explain_age(n OPERATOR(pg_catalog.-) t.progress_at));
	END IF;
	-- checkpoints done (issue 36.2), whatever the state
	IF t.checkpoints OPERATOR(pg_catalog.>) 0 THEN
		words := words || format('; %s checkpoint(s) done: %s', t.checkpoints,
			(SELECT pg_catalog.string_agg(c.step, ', ' ORDER BY c.written_at, c.step)
			 FROM ntask.checkpoint c WHERE c.task_id OPERATOR(pg_catalog.=) t.task_id));
	END IF;
	IF t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}') THEN
		IF prior IS NOT NULL THEN
			words := words || '; ' || prior;
		END IF;
		IF q.guard IS NOT NULL THEN
			words := words || '; the guard ' || q.guard || ' decides at claim';
		END IF;
		-- a pause (issue 35.1, 35.5): the operator's, a rate limit's of the
		-- queue, or of the task's key (on_rate_limited)
		IF q.paused_at IS NOT NULL THEN
			words := words || format('; held back: the queue is paused by %s since %s: %s',
									 q.paused_by, ntask.explain_ts(q.paused_at), q.pause_reason);
		ELSIF q.paused_until OPERATOR(pg_catalog.>) n THEN
			words := words || format('; held back: the queue is paused until %s (in %s): a provider''s rate limit (HTTP 429 or 503 with Retry-After, on_rate_limited pause_queue)',
									 ntask.explain_ts(q.paused_until), ntask.explain_age(q.paused_until OPERATOR(pg_catalog.-) n));
		ELSIF q.keys_paused_until OPERATOR(pg_catalog.>) n AND t.partition_key IS NOT NULL THEN
			words := words || coalesce((
				SELECT format('; held back: its key %s is paused until %s (in %s): %s',
							  k.partition_key, ntask.explain_ts(k.until),
							  ntask.explain_age(k.until OPERATOR(pg_catalog.-) n), k.reason)
				FROM ntask.key_pause k
				WHERE k.queue OPERATOR(pg_catalog.=) t.queue
				  AND k.partition_key OPERATOR(pg_catalog.=) t.partition_key
				  AND k.until OPERATOR(pg_catalog.>) n), '');
		END IF;
		-- flow control (issue 13): what holds a due task back
		IF t.run_at OPERATOR(pg_catalog.<=) n THEN
			words := words || coalesce((
				SELECT CASE
					WHEN h.task_id IS NOT NULL THEN
						format('; held back: behind task %s (%s, %s), the head of its key in an ordered queue',
							   h.task_id, h.task_key, h.state)
					WHEN q.partition_max_inflight IS NOT NULL
						 AND l.key_n OPERATOR(pg_catalog.>=) q.partition_max_inflight THEN
						format('; held back: its key has %s of %s leases in flight',
							   l.key_n, q.partition_max_inflight)
					WHEN q.max_inflight IS NOT NULL
						 AND l.queue_n OPERATOR(pg_catalog.>=) q.max_inflight THEN
						format('; held back: the queue has %s of %s leases in flight',
							   l.queue_n, q.max_inflight)
					WHEN q.rate_n IS NOT NULL OR q.partition_rate_n IS NOT NULL THEN
						format('; the queue has a rate limit (%s): the next token %s',
							   concat_ws(', ', q.rate_n || ' per ' || q.rate_per,
										 q.partition_rate_n || ' per ' || q.partition_rate_per || ' per key'),
							   CASE WHEN r.next_at IS NULL THEN 'is unknown (no shared memory)'
									WHEN r.next_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() THEN 'is free now'
									ELSE 'comes in ' || ntask.explain_age(r.next_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) END)
					END
				FROM (SELECT count(*) FILTER (WHERE x.partition_key IS NOT DISTINCT FROM t.partition_key) AS key_n,
							 count(*) AS queue_n
					  FROM ntask.task x
					  WHERE x.queue OPERATOR(pg_catalog.=) t.queue AND x.state OPERATOR(pg_catalog.=) 'leased'
						AND x.lease_until OPERATOR(pg_catalog.>) n) l
				LEFT JOIN LATERAL (
					SELECT x.task_id, x.task_key, x.state FROM ntask.task x
					WHERE q.ordered AND x.queue OPERATOR(pg_catalog.=) t.queue
					  AND x.partition_key OPERATOR(pg_catalog.=) t.partition_key AND x.ordered
					  AND (x.due_at IS NOT NULL OR x.state OPERATOR(pg_catalog.=) 'repair_required'
						   OR x.state OPERATOR(pg_catalog.=) 'awaiting' OR x.state OPERATOR(pg_catalog.=) 'waiting')
					  AND NOT (q.ordered_skip_repair AND x.state OPERATOR(pg_catalog.=) 'repair_required')
					  AND x.task_id OPERATOR(pg_catalog.<) t.task_id
					ORDER BY x.task_id LIMIT 1) h ON true
				LEFT JOIN LATERAL (
					SELECT ntask.limit_next(t.queue, t.partition_key,
						coalesce(q.rate_n, 0),
						coalesce((pg_catalog.date_part('epoch', q.rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, 0),
						coalesce(q.partition_rate_n, 0),
						coalesce((pg_catalog.date_part('epoch', q.partition_rate_per) OPERATOR(pg_catalog.*) 1000000)::bigint, 0)) AS next_at
					WHERE q.rate_n IS NOT NULL OR q.partition_rate_n IS NOT NULL) r ON true), '');
		END IF;
		words := words || format('; deadline %s', ntask.explain_ts(t.deadline));
	END IF;

	at := n; event := 'now'; token := t.token; actor := NULL; detail := words;
	RETURN NEXT;

	RETURN QUERY
	SELECT e.at, e.event, e.token, e.actor, e.detail
	FROM (
		-- the enqueue
		SELECT t.created_at AS at, 0 AS ord, 0::bigint AS tok, 'enqueued' AS event,
			   NULL::bigint AS token, t.enqueued_by AS actor,
			   format('queue %s, key %s, payload digest %s (digest v%s), priority %s%s%s%s',
					  t.queue, t.task_key,
					  pg_catalog.encode(t.payload_digest, 'hex'), t.digest_version, t.priority,
					  coalesce(', partition ' || t.partition_key, ''),
					  CASE WHEN is_http THEN ', Idempotency-Key ' || t.task_key ELSE '' END,
					  coalesce(', traceparent ' || t.traceparent, '')) AS detail
		UNION ALL
		-- the payload itself, only when asked
		SELECT t.created_at, 1, 0, 'payload', NULL, NULL, t.payload::text
		WHERE ntask_explain.include_payload
		UNION ALL
		-- every attempt: claimed, invoked, ended
		SELECT x.claimed_at, 2, x.token, 'claimed', x.token, x.worker,
			   format('attempt %s of %s claimed', x.attempt, t.max_attempts)
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		SELECT x.invoked_at, 3, x.token, 'invoked', x.token, x.worker,
			   format('attempt %s invoked: about to call out', x.attempt)
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.invoked_at IS NOT NULL
		UNION ALL
		SELECT t.updated_at, 4, t.token, 'heartbeat', t.token, t.lease_owner,
			   format('last heartbeat: lease until %s', ntask.explain_ts(t.lease_until))
		WHERE t.state OPERATOR(pg_catalog.=) 'leased' AND t.updated_at OPERATOR(pg_catalog.>) a.claimed_at
		UNION ALL
		SELECT t.progress_at, 4, t.token, 'progress', t.token, t.lease_owner,
			   format('progress (%s ago): %s', ntask.explain_age(n OPERATOR(pg_catalog.-) t.progress_at),
					  t.progress::text)
		WHERE t.state OPERATOR(pg_catalog.=) 'leased' AND t.progress IS NOT NULL
		UNION ALL
		SELECT x.ended_at, 6, x.token, 'ended', x.token, x.worker,
			   format('attempt %s ended: %s%s%s, outcome %s%s%s%s%s',
					  x.attempt, x.result,
					  CASE WHEN x.requested IS NOT NULL AND x.requested OPERATOR(pg_catalog.<>) x.result
						   THEN ' (asked for ' || x.requested || ')' ELSE '' END,
					  coalesce(', error ' || x.error_class || coalesce(' at ' || x.error_stage, ''), ''),
					  CASE WHEN x.outcome_known THEN 'known' ELSE 'unknown' END,
					  coalesce(' (' || x.outcome || ')', ''),
					  coalesce(', retry at ' || ntask.explain_ts(x.retry_at), ''),
					  coalesce(', ' || CASE WHEN x.detail ? 'http_status' THEN 'HTTP ' || (x.detail->>'http_status') || ' ' ELSE '' END
							   || x.detail::text, ''),
					  coalesce(', last progress ' || x.progress::text, ''))
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.ended_at IS NOT NULL
		UNION ALL
		-- receipts (the business commit)
		SELECT r.committed_at, 5, r.token, 'receipt', r.token, r.db_user::text,
			   format('receipt committed by token %s, content digest %s (digest v%s)',
					  r.token, pg_catalog.encode(r.payload_digest, 'hex'), r.digest_version)
		FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		-- checkpoints (issue 36.2)
		SELECT c.written_at, 5, c.token, 'checkpoint', c.token, NULL,
			   format('step %s written by token %s, value digest %s (digest v%s)',
					  c.step, c.token, pg_catalog.encode(c.value_digest, 'hex'), c.digest_version)
		FROM ntask.checkpoint c WHERE c.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		-- the signal it awaited, once sent (issue 36.3)
		SELECT s.sent_at, 5, 0, 'signal', NULL, s.sent_by::text,
			   format('signal %s sent, payload digest %s', s.signal_key,
					  pg_catalog.encode(s.payload_digest, 'hex'))
		FROM ntask.signal s
		WHERE t.signal_key IS NOT NULL AND s.queue OPERATOR(pg_catalog.=) t.queue
		  AND s.signal_key OPERATOR(pg_catalog.=) t.signal_key AND s.sent_at IS NOT NULL
		UNION ALL
		-- audited actions: cancel, replay, repair_assign, guard_error
		SELECT u.at, 7, u.audit_id, u.action, NULL, u.actor || CASE WHEN u.db_user::text OPERATOR(pg_catalog.<>) u.actor THEN ' (' || u.db_user || ')' ELSE '' END,
			   format('%s%s: %s', u.action,
					  coalesce(' ' || u.from_state || ' -> ' || u.to_state, ''), u.reason)
		FROM ntask.audit u WHERE u.task_id OPERATOR(pg_catalog.=) t.task_id
		UNION ALL
		-- the end
		SELECT t.finished_at, 8, 0, 'finished', t.token, fin_actor,
			   format('%s by %s%s%s', t.state, fin_by, coalesce(': ' || t.reason, ''), coalesce(' (' || t.outcome || ')', ''))
		WHERE t.finished_at IS NOT NULL
	) e
	ORDER BY e.at, e.ord, e.tok;
END
$$;


-- 46.9: ntask.queue_stats.dropped_roles, the role columns of a queue that
-- name a role dropped since (DROP ROLE leaves the oid; explain says so too):
-- the view is rebuilt once, with issue 51's shape, below.

-- 46.1: a token names one attempt of one task.  Tokens come from one
-- sequence per node (ntask.token_seq, drawn by ntask.token_next in the
-- lease statement) instead of counting per task, so a token on another
-- task's id is never that task's (NT003, decided by the ledger).  The
-- sequence starts above every token 1.0.0 issued, so those stay valid for
-- the attempts they name and every new token is above them.
CREATE SEQUENCE ntask.token_seq AS bigint MAXVALUE 281474976710655;
COMMENT ON SEQUENCE ntask.token_seq IS 'ntask: this node''s tokens: a lease''s token is its timeline''s floor - 1 plus the next value (ntask.token_next)';
SELECT pg_catalog.pg_extension_config_dump('ntask.token_seq', '');
CREATE FUNCTION ntask.token_next(prev bigint, floor bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ntask_token_next'
LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION ntask.token_next(bigint, bigint) IS
'ntask: internal: the lease statement''s new token: floor - 1 plus the next value of this node''s ntask.token_seq, above prev';
REVOKE ALL ON FUNCTION ntask.token_next(bigint, bigint) FROM PUBLIC;
SELECT pg_catalog.setval('ntask.token_seq', x.v)
FROM (SELECT GREATEST(
		(SELECT max(t.token) FROM ntask.task t),
		(SELECT max(a.token) FROM ntask.attempt a),
		(SELECT max(r.token) FROM ntask.receipt r),
		(SELECT max(c.token) FROM ntask.checkpoint c),
		(SELECT max(f.token) FROM ntask.fence f),
		(SELECT max(f.token) FROM ntask.fence_receipt f))
	  OPERATOR(pg_catalog.-) (ntask.token_floor(0::smallint) OPERATOR(pg_catalog.-) 1) AS v) x
WHERE x.v OPERATOR(pg_catalog.>=) 1;
-- a Citus node's sequence steps by 256 from its group (ntask.set_id_range)
CREATE OR REPLACE FUNCTION ntask.set_id_range()
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
	g bigint;
	lo bigint;
	hi bigint;
	seq text;
	last bigint;
BEGIN
	SELECT l.groupid INTO g FROM pg_catalog.pg_dist_local_group l;
	IF g IS NULL OR g < 0 OR g > 255 THEN
		RAISE EXCEPTION 'ntask: this node''s Citus group is %, and task ids have room for groups 0 to 255', g
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	lo := (g << 40) + 1;
	hi := ((g + 1) << 40) - 1;
	SET LOCAL citus.enable_ddl_propagation = off;
	FOREACH seq IN ARRAY ARRAY['ntask.task_task_id_seq', 'ntask.audit_audit_id_seq'] LOOP
		EXECUTE format('SELECT last_value FROM %s', seq) INTO last;
		IF last > hi THEN
			RAISE EXCEPTION 'ntask: % is at %, beyond the range of Citus group % (% to %)', seq, last, g, lo, hi
				USING ERRCODE = 'object_not_in_prerequisite_state';
		END IF;
		EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s %s',
					   seq, lo, hi, lo, CASE WHEN last < lo THEN 'RESTART' ELSE '' END);
	END LOOP;
	-- tokens: every value of this node's sequence is g modulo 256, so no
	-- two nodes draw the same token; restarted above its last value
	SELECT s.last_value INTO last FROM ntask.token_seq s;
	EXECUTE format('ALTER SEQUENCE ntask.token_seq INCREMENT 256 MINVALUE %s START %s RESTART %s',
				   g, g + 256, ((last / 256) + 1) * 256 + g);
	RETURN format('group %s: ids %s to %s, tokens %s modulo 256', g, lo, hi, g);
END $fn$;
DO $$
BEGIN
	-- (nested: the second test names a Citus catalog)
	IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
		IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
				   WHERE p.logicalrelid OPERATOR(pg_catalog.=) 'ntask.task'::pg_catalog.regclass) THEN
			PERFORM ntask.set_id_range();
		END IF;
	END IF;
END $$;

-- end of issue 46


-- issue 48: a leaner task

-- Lever (c), the last attempt on the task row (docs/design.md): the
-- holder's own final answer keeps its attempt on the task row, no
-- ntask.attempt row; attempt_all shows it from there.  Rows of 1.0.0 have
-- attempt_worker NULL: their attempts stay in the ledger.
-- Its invariant (attempt_worker only on a final task) joins the one CHECK
-- task_row_valid, below (issue 48, lever (c), with the upgrade_* helpers).
ALTER TABLE ntask.task ADD COLUMN attempt_worker text,
	ADD COLUMN attempt_detail jsonb;
COMMENT ON COLUMN ntask.task.attempt_worker IS 'set when the holder itself ended the latest attempt succeeded, canceled or skipped: that attempt has no ntask.attempt row, the task row holds it (this is its worker; ntask.attempt_all shows it)';
COMMENT ON COLUMN ntask.task.attempt_detail IS 'the detail of the attempt kept on the row (attempt_worker set), as its ntask.attempt row would hold it';
COMMENT ON TABLE ntask.attempt IS 'ntask: one row per ended attempt, written once when it ends (the running attempt of a leased task, and the last one when its holder ended it succeeded, canceled or skipped, are on the task row; ntask.attempt_all shows all)';
CREATE OR REPLACE VIEW ntask.attempt_all AS
SELECT a.task_id, a.token, a.attempt, a.worker, a.claimed_at, a.invoked_at,
	   a.ended_at, a.result, a.requested, a.error_class, a.error_stage,
	   a.outcome_known, a.outcome, a.retry_at, a.detail, a.shard, a.progress
FROM ntask.attempt a
UNION ALL
SELECT t.task_id, t.token, t.attempts, t.lease_owner,
	   coalesce(t.claimed_at, t.updated_at), t.invoked_at,
	   NULL::timestamptz, NULL::text, NULL::text, NULL::text, NULL::text,
	   NULL::boolean, NULL::text, NULL::timestamptz, NULL::jsonb, t.shard, t.progress
FROM ntask.task t
WHERE t.state = 'leased'
UNION ALL
SELECT t.task_id, t.token, t.attempts, t.attempt_worker, t.claimed_at, t.invoked_at,
	   t.finished_at, t.state, t.state, NULL::text, NULL::text,
	   true, t.outcome, NULL::timestamptz, t.attempt_detail, t.shard, t.progress
FROM ntask.task t
WHERE t.attempt_worker IS NOT NULL;
COMMENT ON VIEW ntask.attempt_all IS 'ntask: every attempt: the ended ones (ntask.attempt), the running one of each leased task (from its task row; ended_at and result NULL) and the one its holder ended succeeded, canceled or skipped when it is kept on the task row (attempt_worker set)';

-- Lever (b), task_due_idx without the leased rows (docs/design.md
-- "Indexes"): a claim writes no entry there; task_lease_idx holds the
-- leased rows in the same order, and the claim merges the two to take an
-- expired lease over at its lease_until.  Rebuilt here as 45.3 rebuilds
-- task_ordered_idx (on a distributed install Citus propagates both to
-- every shard).  Leases running across the upgrade are in the new
-- task_lease_idx and are taken over as before (TAP 048_upgrade_tasks).
DROP INDEX ntask.task_due_idx;
CREATE INDEX task_due_idx ON ntask.task (queue, priority DESC, due_at, task_id)
	WHERE due_at IS NOT NULL AND lease_until IS NULL;
DROP INDEX ntask.task_lease_idx;
CREATE INDEX task_lease_idx ON ntask.task (queue, priority DESC, lease_until, task_id)
	WHERE lease_until IS NOT NULL;
-- The readers of every unfinished task (due_at IS NOT NULL) say so in two
-- parts, one per index, so that they still read only those rows
-- (queue_stats and breaker_stats are rebuilt under issue 51 below).
CREATE OR REPLACE VIEW ntask.partition_stats AS
SELECT t.queue, t.partition_key,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready'
			AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS ready,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready'
			AND t.due_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS scheduled,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'retry_wait') AS retry_wait,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'leased') AS leased,
	   pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'repair_required') AS repair_required,
	   pg_catalog.sum(t.unknown_attempts) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) 'repair_required')::bigint AS unknown_attempts,
	   pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-)
			pg_catalog.min(t.due_at) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) 'leased'
				AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now())) AS oldest_due_age_s
FROM ntask.task t
WHERE (t.due_at IS NOT NULL AND t.lease_until IS NULL) OR (t.lease_until IS NOT NULL AND t.due_at IS NOT NULL)
	   OR t.state OPERATOR(pg_catalog.=) 'repair_required'
GROUP BY t.queue, t.partition_key;
-- end of issue 48


-- issue 49: Citus, direct shard execution

-- the guard's event trigger reads ntask.queue only when a function is
-- dropped: a shard move's cleanup on a worker node drops tables
CREATE OR REPLACE FUNCTION ntask.guard_ddl_check() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	q record;
BEGIN
	-- only a command that drops a function reads ntask.queue: on a Citus
	-- worker node a shard move's cleanup drops the moved shard's old
	-- tables, and a read of the reference table there fails that DROP
	-- ("cannot execute a distributed query from a query on a shard")
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_dropped_objects() d
				   WHERE d.object_type OPERATOR(pg_catalog.=) 'function') THEN
		RETURN;
	END IF;
	FOR q IN SELECT qq.queue, qq.guard
			 FROM pg_catalog.pg_event_trigger_dropped_objects() d
			 JOIN ntask.queue qq
			   ON qq.guard OPERATOR(pg_catalog.=)
				  (pg_catalog.quote_ident(d.address_names[1]) OPERATOR(pg_catalog.||) '.'
				   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(d.address_names[2])
				   OPERATOR(pg_catalog.||) '(text,jsonb)')
			 WHERE d.object_type OPERATOR(pg_catalog.=) 'function'
			   AND pg_catalog.cardinality(d.address_args) OPERATOR(pg_catalog.=) 2
			   AND pg_catalog.to_regtype(d.address_args[1]) OPERATOR(pg_catalog.=) 'pg_catalog.text'::pg_catalog.regtype
			   AND pg_catalog.to_regtype(d.address_args[2]) OPERATOR(pg_catalog.=) 'pg_catalog.jsonb'::pg_catalog.regtype
			 ORDER BY qq.queue LOOP
		RAISE EXCEPTION 'ntask: function % is the guard of queue "%"', q.guard, q.queue
			USING ERRCODE = 'dependent_objects_still_exist',
				  HINT = pg_catalog.format('Remove it first: SELECT ntask_queue_clear_guard(%L);', q.queue);
	END LOOP;
END $$;

-- ntask_distribute: checkpoints and signals are hash-distributed by shard,
-- co-located with the tasks (their keys widened by shard like the
-- receipts'); a signal's row is in the shard of its queue and key; and
-- task_dep too, its dependency triggers kept on every shard (a child and
-- its parents share a shard: docs/scaling.md "Dependencies on a
-- distributed install")
COMMENT ON COLUMN ntask.signal.shard IS 'the shard of its queue and key (ntask_shard(queue, signal_key)), which an awaiting task shares (0 on a plain install)';
/*
 * ntask_distribute: turn an installed, empty ntask on a Citus coordinator
 * into the distributed layout (docs/scaling.md "Scaling out with Citus"):
 *
 *	hash by shard, co-located	task, attempt, receipt, checkpoint, signal,
 *								task_dep (keys widened by shard; a signal's
 *								shard is its queue and key's; a dependency
 *								row's its child's and parents')
 *	hash by fence_key			fence, fence_receipt
 *	hash by audit_id			audit
 *	reference tables			queue, breaker, queue_pruned, schedule,
 *								schedule_slot, fence_grant, key_pause
 *	left on the coordinator		saga, saga_step (sagas are not supported on a
 *								distributed install)
 *
 * The triggers that read or write another table from a task row
 * (queue_delete_check, task_count_pruned, saga_step_changed) are dropped:
 * on a distributed table they would run on a worker's shard and query a
 * distributed table from there, which Citus refuses.  The dependency
 * triggers (task_deps_changed, task_dep_settle) stay, created on every
 * shard (citus.enable_unsafe_triggers for this transaction): they work
 * on the shard relations of the shard they fire on (src/deps.c), since
 * a child and its parents share a shard (docs/scaling.md "Dependencies on
 * a distributed install").  The widened keys are
 * set on every node first (run_command_on_workers, idempotent, so a failed
 * call can be repeated), then on the coordinator, where the tables are
 * distributed in this transaction.  ntask_fence becomes a distributed
 * function co-located with ntask.fence by its fence_key: Citus delegates
 * a call to the node that holds the fence's shard.  See docs/scaling.md
 * for what the API does on the layout today.
 */
CREATE OR REPLACE FUNCTION @extschema@.ntask_distribute(shard_count integer DEFAULT NULL)
RETURNS TABLE (relation regclass, layout text, shards integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
	keys constant text := $k$
DO $do$ BEGIN
	IF pg_catalog.pg_get_constraintdef((SELECT oid FROM pg_catalog.pg_constraint
	   WHERE conname = 'task_pkey' AND conrelid = 'ntask.task'::pg_catalog.regclass))
	   = 'PRIMARY KEY (task_id)' THEN
		SET LOCAL citus.enable_ddl_propagation = off;
		ALTER TABLE ntask.task DROP CONSTRAINT task_pkey,
			ADD CONSTRAINT task_pkey PRIMARY KEY (task_id, shard),
			DROP CONSTRAINT task_queue_task_key_key,
			ADD CONSTRAINT task_queue_task_key_key UNIQUE (queue, task_key, shard);
		ALTER TABLE ntask.attempt DROP CONSTRAINT attempt_pkey,
			ADD CONSTRAINT attempt_pkey PRIMARY KEY (task_id, token, shard);
		ALTER TABLE ntask.receipt DROP CONSTRAINT receipt_pkey,
			ADD CONSTRAINT receipt_pkey PRIMARY KEY (task_id, token, shard);
		ALTER TABLE ntask.checkpoint DROP CONSTRAINT checkpoint_pkey,
			ADD CONSTRAINT checkpoint_pkey PRIMARY KEY (task_id, step, shard);
		ALTER TABLE ntask.signal DROP CONSTRAINT signal_pkey,
			ADD CONSTRAINT signal_pkey PRIMARY KEY (queue, signal_key, shard);
		ALTER TABLE ntask.task_dep DROP CONSTRAINT task_dep_pkey,
			ADD CONSTRAINT task_dep_pkey PRIMARY KEY (task_id, parent_id, shard);
		DROP TRIGGER IF EXISTS queue_delete_check ON ntask.queue;
		DROP TRIGGER IF EXISTS task_count_pruned ON ntask.task;
		DROP TRIGGER IF EXISTS saga_step_changed ON ntask.task;
	END IF;
END $do$
$k$;
	r record;
	n bigint;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_extension e WHERE e.extname = 'citus') THEN
		RAISE EXCEPTION 'ntask: ntask_distribute needs Citus, and the citus extension is not installed in this database'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'Put citus first in shared_preload_libraries (citus,ntask), CREATE EXTENSION citus, add the worker nodes, then run this on the coordinator.';
	END IF;
	IF NOT (SELECT pg_catalog.citus_is_coordinator()) THEN
		RAISE EXCEPTION 'ntask: ntask_distribute runs on the Citus coordinator only'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Connect to the coordinator (citus_set_coordinator_host names it).';
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition p
			   WHERE p.logicalrelid = 'ntask.task'::regclass) THEN
		RAISE EXCEPTION 'ntask: ntask is already distributed in this database'
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF shard_count IS NOT NULL AND shard_count NOT BETWEEN 1 AND 32767 THEN
		RAISE EXCEPTION 'ntask: shard_count must be between 1 and 32767, not %', shard_count
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- Rows of these tables cannot be moved: their task ids do not carry a
	-- shard (every row would land on the shard of 0).  Queue policy can.
	FOR r IN SELECT x.rel FROM (VALUES ('ntask.task'::regclass), ('ntask.attempt'),
				('ntask.receipt'), ('ntask.checkpoint'), ('ntask.signal'), ('ntask.task_dep'), ('ntask.saga'),
				('ntask.schedule_slot')) x(rel)
	LOOP
		EXECUTE format('SELECT count(*) FROM (SELECT FROM %s LIMIT 1) x', r.rel) INTO n;
		IF n > 0 THEN
			RAISE EXCEPTION 'ntask: ntask_distribute needs an empty ntask, and % holds rows', r.rel
				USING ERRCODE = 'object_not_in_prerequisite_state',
					  DETAIL = 'Task ids of a plain install carry no shard, so existing tasks cannot be placed.',
					  HINT = 'Distribute right after CREATE EXTENSION ntask, before the first enqueue (queue policies may exist).';
		END IF;
	END LOOP;

	-- every worker's copy of the schema gets the same keys (its tables are
	-- the extension's own, created there by CREATE EXTENSION)
	FOR r IN SELECT * FROM pg_catalog.run_command_on_workers(keys) LOOP
		IF NOT r.success THEN
			RAISE EXCEPTION 'ntask: could not change the keys on worker %:%: %', r.nodename, r.nodeport, r.result
				USING ERRCODE = 'connection_failure';
		END IF;
	END LOOP;
	EXECUTE keys;

	PERFORM pg_catalog.create_reference_table(x.rel)
	FROM (VALUES ('ntask.queue'::regclass), ('ntask.breaker'), ('ntask.queue_pruned'),
				 ('ntask.schedule'), ('ntask.schedule_slot'), ('ntask.fence_grant'),
				 ('ntask.shard_map'), ('ntask.key_pause')) x(rel);
	-- the dependency triggers go onto every shard of task and task_dep
	PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
	PERFORM pg_catalog.create_distributed_table('ntask.task', 'shard', shard_count => shard_count);
	PERFORM pg_catalog.create_distributed_table('ntask.attempt', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.receipt', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.checkpoint', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.signal', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.create_distributed_table('ntask.task_dep', 'shard', colocate_with => 'ntask.task');
	PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'off', true);
	PERFORM pg_catalog.create_distributed_table('ntask.fence', 'fence_key', shard_count => shard_count);
	PERFORM pg_catalog.create_distributed_table('ntask.fence_receipt', 'fence_key', colocate_with => 'ntask.fence');
	PERFORM pg_catalog.create_distributed_table('ntask.audit', 'audit_id', shard_count => shard_count);
	-- one shard value per shard of ntask.task, the smallest hashing into it
	INSERT INTO ntask.shard_map (shard)
	SELECT pg_catalog.min(v)::smallint
	FROM pg_catalog.generate_series(0, 32767) v
	GROUP BY pg_catalog.get_shard_id_for_distribution_column('ntask.task', v::smallint);
	IF (SELECT pg_catalog.count(*) FROM ntask.shard_map) <>
	   (SELECT pg_catalog.count(*) FROM pg_catalog.pg_dist_shard s
		WHERE s.logicalrelid = 'ntask.task'::regclass) THEN
		RAISE EXCEPTION 'ntask: could not find a shard value for every shard of ntask.task'
			USING ERRCODE = 'internal_error';
	END IF;
	-- ids drawn on any node: each node's sequences get its group's range
	PERFORM ntask.set_id_range();
	FOR r IN SELECT * FROM pg_catalog.run_command_on_workers('SELECT ntask.set_id_range()') LOOP
		IF NOT r.success THEN
			RAISE EXCEPTION 'ntask: could not set the id range on worker %:%: %', r.nodename, r.nodeport, r.result
				USING ERRCODE = 'connection_failure';
		END IF;
	END LOOP;
	-- one hop: each shard-addressed call runs on the node of its shard
	PERFORM pg_catalog.create_distributed_function(x.fn, 'shard', colocate_with => 'ntask.task')
	FROM (VALUES
		('@extschema@.ntask_enqueue_on(smallint, text, text, jsonb, timestamptz, text, integer, text, text[], text)'::regprocedure),
		('@extschema@.ntask_enqueue_many_on(smallint, text, text[], jsonb[], timestamptz, text[], integer, text, text[], text)'),
		('@extschema@.ntask_claim_on(smallint, text, text, integer, interval, interval, boolean)'),
		('@extschema@.ntask_transition_on(smallint, bigint, bigint, text, text, jsonb, timestamptz, text, text, jsonb)'),
		('@extschema@.ntask_transition_many_on(smallint, bigint[], bigint[], text, text, jsonb, timestamptz, text, text, jsonb[])'),
		('@extschema@.ntask_transition_and_claim_on(smallint, bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb)'),
		('@extschema@.ntask_heartbeat_on(smallint, bigint, bigint, interval, jsonb)'),
		('@extschema@.ntask_invoked_on(smallint, bigint, bigint)'),
		('@extschema@.ntask_receipt_on(smallint, bigint, bigint, jsonb)'),
		('@extschema@.ntask_release_on(smallint, bigint, bigint, interval)')) x(fn);
	-- the rows copied into shards (queue policy, its audit) stay behind in
	-- the coordinator's own tables unless removed
	PERFORM pg_catalog.truncate_local_data_after_distributing_table(x.rel)
	FROM (VALUES ('ntask.queue'::regclass), ('ntask.breaker'), ('ntask.queue_pruned'),
				 ('ntask.schedule'), ('ntask.fence_grant'), ('ntask.fence'),
				 ('ntask.fence_receipt'), ('ntask.audit'), ('ntask.key_pause')) x(rel);

	-- fences: a call runs on the node of its fence (delegated)
	PERFORM pg_catalog.create_distributed_function(
		'@extschema@.ntask_fence(text,bigint,jsonb)'::regprocedure,
		distribution_arg_name => 'fence_key', colocate_with => 'ntask.fence');

	RETURN QUERY
	SELECT p.logicalrelid::regclass,
		   CASE p.partmethod WHEN 'n' THEN 'reference'
				ELSE 'hash by ' || pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END,
		   (SELECT count(*)::integer FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid)
	FROM pg_catalog.pg_dist_partition p
	WHERE p.logicalrelid::regclass::text LIKE 'ntask.%'
	ORDER BY 2, 1;
END $fn$;
COMMENT ON FUNCTION @extschema@.ntask_distribute(integer) IS
'ntask: on a Citus coordinator, distribute an empty ntask (task, attempt, receipt, checkpoint, signal, task_dep by shard, co-located; policy tables as reference tables); returns the layout';

-- end of issue 49


-- issue 51: the operator console

-- The summary views in a shape a Citus coordinator runs (no subquery
-- correlated to the reference table ntask.queue; a task's attempts joined
-- on the distribution column too), reading the unfinished tasks through
-- their partial indexes; the waiting tasks get one of their own.  Same
-- columns and answers on a plain install.
CREATE INDEX task_waiting_idx ON ntask.task (queue, created_at)
	WHERE state = 'waiting';

CREATE OR REPLACE VIEW ntask.queue_stats AS
SELECT q.queue COLLATE "default" AS queue,
	   coalesce(u.ready, 0) AS ready,
	   coalesce(u.leased, 0) AS leased,
	   coalesce(u.retry_wait, 0) AS retry_wait,
	   coalesce(f.succeeded, 0) AS succeeded,
	   coalesce(u.repair_required, 0) AS repair_required,
	   coalesce(f.canceled, 0) AS canceled,
	   coalesce(f.skipped, 0) AS skipped,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_ready AS oldest_ready_age,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_unfinished AS oldest_unfinished_age,
	   coalesce(u.unknown_attempts, 0) AS unknown_attempts,
	   coalesce(u.repair_required, 0) AS repair_count,
	   q.paused_at IS NOT NULL
		 OR coalesce(q.paused_until OPERATOR(pg_catalog.>) pg_catalog.now(), false) AS paused,
	   q.paused_at, q.paused_by, q.pause_reason,
	   CASE WHEN q.paused_until OPERATOR(pg_catalog.>) pg_catalog.now() THEN q.paused_until END AS paused_until,
	   coalesce(kp.keys_paused, 0) AS keys_paused,
	   coalesce(u.awaiting, 0) AS awaiting,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_awaiting AS oldest_awaiting_age,
	   coalesce(u.waiting, 0) AS waiting,
	   pg_catalog.now() OPERATOR(pg_catalog.-) u.oldest_waiting AS oldest_waiting_age,
	   NULLIF(pg_catalog.array_remove(ARRAY[
			CASE WHEN q.producer_role IS NOT NULL AND rp.oid IS NULL THEN 'producer_role' END,
			CASE WHEN q.worker_role IS NOT NULL AND rw.oid IS NULL THEN 'worker_role' END,
			CASE WHEN q.signal_role IS NOT NULL AND rs.oid IS NULL THEN 'signal_role' END], NULL), '{}') AS dropped_roles
FROM ntask.queue q
LEFT JOIN pg_catalog.pg_roles rp ON rp.oid OPERATOR(pg_catalog.=) q.producer_role::pg_catalog.oid
LEFT JOIN pg_catalog.pg_roles rw ON rw.oid OPERATOR(pg_catalog.=) q.worker_role::pg_catalog.oid
LEFT JOIN pg_catalog.pg_roles rs ON rs.oid OPERATOR(pg_catalog.=) q.signal_role::pg_catalog.oid
LEFT JOIN (
	SELECT k.queue, pg_catalog.count(*) AS keys_paused FROM ntask.key_pause k
	WHERE k.until OPERATOR(pg_catalog.>) pg_catalog.now()
	GROUP BY k.queue
) kp ON kp.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT t.queue,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready') AS ready,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'leased') AS leased,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'retry_wait') AS retry_wait,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'repair_required') AS repair_required,
		   min(t.run_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}')
								 AND t.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_ready,
		   min(t.created_at) FILTER (WHERE t.due_at IS NOT NULL) AS oldest_unfinished,
		   sum(t.unknown_attempts) AS unknown_attempts,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'awaiting') AS awaiting,
		   min(t.updated_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'awaiting') AS oldest_awaiting,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'waiting') AS waiting,
		   min(t.created_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'waiting') AS oldest_waiting
	FROM ntask.task t
	WHERE (t.due_at IS NOT NULL AND t.lease_until IS NULL) OR (t.lease_until IS NOT NULL AND t.due_at IS NOT NULL)
	   OR t.state OPERATOR(pg_catalog.=) 'repair_required'
	   OR t.state OPERATOR(pg_catalog.=) 'awaiting' OR t.state OPERATOR(pg_catalog.=) 'waiting'
	GROUP BY t.queue
) u ON u.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT t.queue,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'succeeded') AS succeeded,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'canceled') AS canceled,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'skipped') AS skipped
	FROM ntask.task t
	WHERE t.state OPERATOR(pg_catalog.=) ANY ('{succeeded,canceled,skipped}')
	GROUP BY t.queue
) f ON f.queue OPERATOR(pg_catalog.=) q.queue;

COMMENT ON VIEW ntask.queue_stats IS 'ntask: per queue, tasks per state, oldest due-and-ready age, oldest unfinished age, attempts whose outcome is unknown of unfinished tasks (incl. repair_required), repair count, whether it is paused (by whom, since when, why, until when) and how many of its partition keys a rate limit holds back, tasks awaiting a signal and the age of the oldest await, tasks waiting for parents and the age of the oldest, and which of its roles (producer_role, worker_role, signal_role) name a role that was dropped';

CREATE OR REPLACE VIEW ntask.repair_queue AS
SELECT t.task_id, t.queue COLLATE "default" AS queue, t.task_key COLLATE "default" AS task_key,
	   t.reason, t.attempts,
	   a.first_attempt_at, a.last_attempt_at,
	   t.last_error_class, t.last_error_stage,
	   coalesce(a.known_outcomes, 0) AS known_outcomes,
	   coalesce(a.unknown_outcomes, 0) AS unknown_outcomes,
	   t.repair_owner AS owner, t.repair_next_action AS next_action,
	   t.updated_at AS since
FROM ntask.task t
-- a task's attempts by its key and shard (co-located on a Citus install)
LEFT JOIN LATERAL (
	SELECT min(at.claimed_at) AS first_attempt_at,
		   max(at.claimed_at) AS last_attempt_at,
		   count(*) FILTER (WHERE at.outcome_known) AS known_outcomes,
		   count(*) FILTER (WHERE NOT at.outcome_known) AS unknown_outcomes
	FROM ntask.attempt at
	WHERE at.task_id OPERATOR(pg_catalog.=) t.task_id
	  AND at.shard OPERATOR(pg_catalog.=) t.shard
) a ON true
WHERE t.state OPERATOR(pg_catalog.=) 'repair_required';

CREATE OR REPLACE VIEW ntask.queue_metrics AS
SELECT q.queue,
	   coalesce(l.leases_expired, 0) AS leases_expired,
	   coalesce(s.tasks, 0) OPERATOR(pg_catalog.+) coalesce(p.tasks, 0) AS enqueued_total,
	   coalesce(s.attempts, 0) OPERATOR(pg_catalog.+) coalesce(p.attempts, 0) AS claims_total,
	   coalesce(s.unknown_attempts, 0) OPERATOR(pg_catalog.+) coalesce(p.unknown_attempts, 0) AS unknown_outcomes_total,
	   coalesce(s.succeeded, 0) OPERATOR(pg_catalog.+) coalesce(p.succeeded, 0) AS succeeded_total,
	   coalesce(s.canceled, 0) OPERATOR(pg_catalog.+) coalesce(p.canceled, 0) AS canceled_total,
	   coalesce(s.skipped, 0) OPERATOR(pg_catalog.+) coalesce(p.skipped, 0) AS skipped_total,
	   CASE WHEN q.paused_at IS NOT NULL
				 OR q.paused_until OPERATOR(pg_catalog.>) pg_catalog.now() THEN 1 ELSE 0 END AS paused,
	   coalesce(kp.keys_paused, 0) AS keys_paused
FROM ntask.queue q
LEFT JOIN (
	SELECT t.queue,
		   count(*) AS tasks,
		   sum(t.attempts) AS attempts,
		   sum(t.unknown_attempts) AS unknown_attempts,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'succeeded') AS succeeded,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'canceled') AS canceled,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'skipped') AS skipped
	FROM ntask.task t
	GROUP BY t.queue
) s ON s.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT t.queue, count(*) AS leases_expired
	FROM ntask.task t
	WHERE t.lease_until IS NOT NULL AND t.lease_until OPERATOR(pg_catalog.<) pg_catalog.now()
	GROUP BY t.queue
) l ON l.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN (
	SELECT k.queue, pg_catalog.count(*) AS keys_paused FROM ntask.key_pause k
	WHERE k.until OPERATOR(pg_catalog.>) pg_catalog.now()
	GROUP BY k.queue
) kp ON kp.queue OPERATOR(pg_catalog.=) q.queue
LEFT JOIN ntask.queue_pruned p ON p.queue OPERATOR(pg_catalog.=) q.queue;

CREATE OR REPLACE VIEW ntask.breaker_stats AS
SELECT q.queue,
	   coalesce(b.state, 'closed') AS state,
	   coalesce(b.failures, 0) AS failures,
	   q.breaker_failures AS failure_threshold,
	   q.breaker_cooldown AS cooldown,
	   b.opened_at,
	   b.open_until,
	   b.changed_at,
	   CASE WHEN coalesce(b.state, 'closed') OPERATOR(pg_catalog.=) 'closed' THEN 0::pg_catalog.int8
			ELSE coalesce(h.held, 0)
	   END AS held
FROM ntask.queue q
LEFT JOIN ntask.breaker b ON b.queue OPERATOR(pg_catalog.=) q.queue
-- the tasks held back, counted only in the queues whose breaker is not
-- closed (through task_due_idx)
LEFT JOIN (
	SELECT t.queue, pg_catalog.count(*) AS held
	FROM ntask.task t
	WHERE t.queue OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT o.queue FROM ntask.breaker o
										  WHERE o.state OPERATOR(pg_catalog.<>) 'closed'))
	  AND t.due_at IS NOT NULL AND t.lease_until IS NULL
	  AND t.state OPERATOR(pg_catalog.<>) 'leased'
	  AND t.due_at OPERATOR(pg_catalog.<=) pg_catalog.now()
	GROUP BY t.queue
) h ON h.queue OPERATOR(pg_catalog.=) q.queue
WHERE q.breaker_failures IS NOT NULL
  AND (q.target OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'http';

-- ntask_repair_assign takes the operator's name as actor, like
-- ntask_replay (NULL: the current database user, as before).  Its
-- arguments change, so it is dropped and created again by the rule of
-- issue 29.10 (ntask--0.3--1.0.0.sql): a user view or BEGIN ATOMIC
-- function bound to it refuses the update, naming it; the users' grants
-- and revokes are carried over (and stay out of pg_init_privs).  The
-- upgrade_* helpers are those of ntask--0.3--1.0.0.sql, dropped below.
CREATE TABLE ntask.upgrade_acl (proname name PRIMARY KEY, acl aclitem[], initprivs aclitem[]);

-- the objects outside the extension that depend on an object (a view for
-- its rewrite rule), described; NULL when none
CREATE FUNCTION ntask.upgrade_user_dependents(cls oid, obj oid, sub integer DEFAULT 0)
RETURNS text LANGUAGE sql STABLE AS $$
	SELECT pg_catalog.string_agg(DISTINCT pg_catalog.pg_describe_object(x.classid, x.objid, 0), ', ')
	FROM (SELECT CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
					  THEN 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid ELSE d.classid END AS classid,
				 CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
					  THEN (SELECT r.ev_class FROM pg_catalog.pg_rewrite r WHERE r.oid OPERATOR(pg_catalog.=) d.objid)
					  ELSE d.objid END AS objid
		  FROM pg_catalog.pg_depend d
		  WHERE d.refclassid OPERATOR(pg_catalog.=) cls AND d.refobjid OPERATOR(pg_catalog.=) obj
			AND (sub OPERATOR(pg_catalog.=) 0 OR d.refobjsubid OPERATOR(pg_catalog.=) sub)
			AND d.deptype OPERATOR(pg_catalog.=) 'n'
			-- views (their rules) and functions (BEGIN ATOMIC): a table's own
			-- constraints, indexes and triggers go with the table
			AND d.classid OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.pg_rewrite'::pg_catalog.regclass,
														   'pg_catalog.pg_proc'::pg_catalog.regclass]::pg_catalog.oid[])) x
	WHERE x.objid IS DISTINCT FROM obj
	  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend e
					  WHERE e.classid OPERATOR(pg_catalog.=) x.classid
						AND e.objid OPERATOR(pg_catalog.=) x.objid
						AND e.deptype OPERATOR(pg_catalog.=) 'e')
$$;

-- refuse, naming them, when user objects depend on what must be dropped
CREATE FUNCTION ntask.upgrade_refuse(what text, deps text, why text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	IF deps IS NOT NULL THEN
		RAISE EXCEPTION 'ntask: cannot update: % depend(s) on %, which this update must %', deps, what, why
			USING ERRCODE = 'dependent_objects_still_exist',
				  HINT = 'Save and drop the objects named, run ALTER EXTENSION ntask UPDATE again, then create them again (README "Upgrading").';
	END IF;
END $$;

CREATE FUNCTION ntask.upgrade_drop_function(fn text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	f regprocedure := fn::regprocedure;
BEGIN
	PERFORM ntask.upgrade_refuse('function ' || f::text,
		ntask.upgrade_user_dependents('pg_catalog.pg_proc'::regclass, f),
		'drop and create again (its arguments or result columns change)');
	INSERT INTO ntask.upgrade_acl AS u
	SELECT p.proname, coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner)), i.initprivs
	FROM pg_catalog.pg_proc p
	LEFT JOIN pg_catalog.pg_init_privs i ON i.objoid OPERATOR(pg_catalog.=) p.oid
		AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass AND i.objsubid OPERATOR(pg_catalog.=) 0
	WHERE p.oid OPERATOR(pg_catalog.=) f
	ON CONFLICT (proname) DO UPDATE SET acl = EXCLUDED.acl, initprivs = EXCLUDED.initprivs;
	EXECUTE pg_catalog.format('DROP FUNCTION %s', f);
END $$;

CREATE FUNCTION ntask.upgrade_restore_acl(fn text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	f regprocedure := fn::regprocedure;
	u record;
	g record;
	mine aclitem[];
BEGIN
	SELECT a.* INTO u FROM ntask.upgrade_acl a JOIN pg_catalog.pg_proc p
		ON p.proname OPERATOR(pg_catalog.=) a.proname WHERE p.oid OPERATOR(pg_catalog.=) f;
	IF NOT FOUND OR u.initprivs IS NULL THEN
		RETURN;
	END IF;
	SELECT p.proacl INTO mine FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f;
	FOR g IN
		SELECT x.grantee, x.is_grantable, true AS grant FROM pg_catalog.aclexplode(u.acl) x
		EXCEPT SELECT y.grantee, y.is_grantable, true FROM pg_catalog.aclexplode(u.initprivs) y
		UNION ALL
		(SELECT y.grantee, y.is_grantable, false FROM pg_catalog.aclexplode(u.initprivs) y
		 EXCEPT SELECT x.grantee, x.is_grantable, false FROM pg_catalog.aclexplode(u.acl) x)
	LOOP
		EXECUTE pg_catalog.format(CASE WHEN g.grant THEN 'GRANT EXECUTE ON FUNCTION %s TO %s%s'
									   ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM %s' END,
			f, CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
			CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;
	-- the users' grants are not the extension's: pg_dump dumps them
	UPDATE pg_catalog.pg_init_privs i SET initprivs = mine
	WHERE i.objoid OPERATOR(pg_catalog.=) f AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
	  AND i.objsubid OPERATOR(pg_catalog.=) 0;
	-- nor do their roles depend on the extension's initial privileges
	-- (17 and later record one such dependency per role, deptype 'i', when
	-- the GRANT above runs in this script): once a user revokes the grant,
	-- DROP ROLE must go through, as before the update
	-- (this database's rows only: another database may hold an object
	-- with the same OID)
	DELETE FROM pg_catalog.pg_shdepend d
	WHERE d.dbid OPERATOR(pg_catalog.=) (SELECT b.oid FROM pg_catalog.pg_database b
										 WHERE b.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
	  AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
	  AND d.objid OPERATOR(pg_catalog.=) f AND d.objsubid OPERATOR(pg_catalog.=) 0
	  AND d.deptype OPERATOR(pg_catalog.=) 'i'
	  AND d.refobjid OPERATOR(pg_catalog.<>) ALL (ARRAY(
			SELECT x.grantee FROM pg_catalog.aclexplode(mine) x
			UNION SELECT x.grantor FROM pg_catalog.aclexplode(mine) x));
END $$;

SELECT ntask.upgrade_drop_function('@extschema@.ntask_repair_assign(bigint, text, text)');
CREATE FUNCTION @extschema@.ntask_repair_assign(task_id bigint, owner text, next_action text,
	actor text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'ntask_repair_assign'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_repair_assign(bigint, text, text, text) IS
'ntask: audited assignment of an owner and a next action to a repair_required task; the audit row names actor (NULL: the current database user)';
REVOKE ALL ON FUNCTION @extschema@.ntask_repair_assign(bigint, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.ntask_repair_assign(bigint, text, text, text) TO ntask_admin;
SELECT ntask.upgrade_restore_acl('@extschema@.ntask_repair_assign(bigint, text, text, text)');

-- issue 48, lever (c): one CHECK on ntask.task.  Every statement that
-- writes the table reads each CHECK back from its node tree and plans it
-- (docs/performance.md, "One CHECK constraint"): on_parent_failed's CHECK
-- and the attempt kept on the row (attempt_worker set only on a
-- succeeded, canceled or skipped task) fold into task_row_valid, a C call
-- now of five columns, the last two defaulting to NULL (so a call of
-- three still checks what 1.0's did).  Its arguments change: dropped and
-- created again by the rule above, the users' grants carried over.
ALTER TABLE ntask.task DROP CONSTRAINT task_on_parent_failed_check,
	DROP CONSTRAINT task_row_valid;
SELECT ntask.upgrade_drop_function('ntask.task_row_valid(text, timestamptz, text)');
CREATE FUNCTION ntask.task_row_valid(state text, due_at timestamptz, lease_owner text,
	on_parent_failed text DEFAULT NULL, attempt_worker text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_task_row_valid'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION ntask.task_row_valid(text, timestamptz, text, text, text) IS
'ntask: the task row invariants (CHECK task_row_valid): a known state, due_at NULL exactly when finished or waiting for parents, lease_owner set exactly while leased, on_parent_failed NULL, wait or cancel, attempt_worker set only when succeeded, canceled or skipped';
REVOKE ALL ON FUNCTION ntask.task_row_valid(text, timestamptz, text, text, text) FROM PUBLIC;
SELECT ntask.upgrade_restore_acl('ntask.task_row_valid(text, timestamptz, text, text, text)');
ALTER TABLE ntask.task ADD CONSTRAINT task_row_valid CHECK (ntask.task_row_valid(state, due_at, lease_owner,
	on_parent_failed, attempt_worker));

DROP FUNCTION ntask.upgrade_restore_acl(text);
DROP FUNCTION ntask.upgrade_drop_function(text);
DROP FUNCTION ntask.upgrade_refuse(text, text, text);
DROP FUNCTION ntask.upgrade_user_dependents(oid, oid, integer);
DROP TABLE ntask.upgrade_acl;

-- end of issue 51
