/* ntask--0.3--1.0.0.sql: every schema change of the 1.0 wave (issues 29-36) */
-- Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '1.0.0'" to load this file. \quit

/*
 * THE RULE: every later schema change goes into BOTH this file and
 * ntask--1.0.0.sql, the complete install script a fresh CREATE EXTENSION
 * runs.  Regress "upgrade" installs 0.3 (test/frozen/ntask--0.3.sql),
 * updates it with this file and fails on any difference from a fresh
 * 1.0.0: objects, columns and their order, defaults, constraints, indexes,
 * triggers, comments, privileges, view definitions and every function's
 * body.
 *
 * One upgrade script for the whole 1.0 wave: each issue adds its part under
 * its own heading below (keep the headings: parallel work merges cleanly).
 */

-- issue 29.1: waiting claims on limited queues

-- end of issue 29.1


-- issue 29.2: cap and turn locks
--
-- A queue's cap lock (max_inflight) and a partition key's turn lock (fair
-- and ordered picks, per-key caps) were advisory locks, which any role that
-- can connect could take and hold (pg_advisory_lock, the keys computed with
-- hashtextextended or read from pg_locks), stalling a capped queue or a
-- key.  They are now locks of a locktag class of ntask's own (src/
-- claim_lock.c), which no SQL advisory function can take; these two
-- functions are the only way to them, and nobody is granted them: the
-- claim's statements run as the extension's owner.  docs/design.md "Who
-- may block a claim".
CREATE FUNCTION ntask.claim_cap_lock(queue text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_claim_cap_lock'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION ntask.claim_cap_lock(text) IS 'ntask: try the cap lock of a queue with max_inflight, held to the end of the transaction (claims only; not granted to any role)';
REVOKE ALL ON FUNCTION ntask.claim_cap_lock(text) FROM PUBLIC;

CREATE FUNCTION ntask.claim_turn_lock(queue text, partition_key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'ntask_claim_turn_lock'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION ntask.claim_turn_lock(text, text) IS 'ntask: try the turn lock of a partition key of a queue, held to the end of the transaction (claims only; not granted to any role)';
REVOKE ALL ON FUNCTION ntask.claim_turn_lock(text, text) FROM PUBLIC;

-- end of issue 29.2


-- issue 29.3 and 29.6: guards

-- The role that owned the guard function when ntask_queue_set stored it:
-- at every use the function the stored name resolves to must still have
-- that owner (and be neither in a temporary schema nor part of an
-- extension), else the task goes to repair_required (guard_error).  A role
-- name, not an OID: it survives dump and restore (pg_restore --no-owner
-- too, where the guard then fails closed until set again).  Backfilled from
-- the function each stored guard resolves to now; a guard that does not
-- resolve, or lives in a temporary schema, gets none and fails closed.
ALTER TABLE ntask.queue ADD COLUMN guard_owner name;
UPDATE ntask.queue q SET guard_owner = pg_catalog.pg_get_userbyid(p.proowner)
FROM pg_catalog.pg_proc p
WHERE q.guard IS NOT NULL
  AND p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(q.guard)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n
				  WHERE n.oid OPERATOR(pg_catalog.=) p.pronamespace
					AND (n.nspname OPERATOR(pg_catalog.~) '^pg_temp_'
						 OR n.nspname OPERATOR(pg_catalog.~) '^pg_toast_temp_'));
COMMENT ON COLUMN ntask.queue.guard_owner IS 'the role that owned the guard function when it was set; a function of the guard''s name with another owner is refused at use (guard_error)';

/*
 * The guard's pin, from the objects a command drops
 * (pg_event_trigger_dropped_objects, on sql_drop of every command: DROP
 * FUNCTION, SCHEMA ... CASCADE, OWNED, EXTENSION, a CASCADE through
 * anything a guard's body depends on): a command that would drop a
 * function some queue uses as its guard fails with 2BP01.  Nothing else is
 * looked at, so a guard that no longer resolves (renamed, moved, dropped
 * with event triggers off) blocks no other DDL; its tasks go to
 * repair_required (guard_error) until the guard is set again or cleared.
 */
CREATE OR REPLACE FUNCTION ntask.guard_ddl_check() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	q record;
BEGIN
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
COMMENT ON FUNCTION ntask.guard_ddl_check() IS 'ntask: event trigger: refuses a command that drops a function some queue uses as its guard';
DROP EVENT TRIGGER ntask_guard_ddl;
CREATE EVENT TRIGGER ntask_guard_ddl ON sql_drop
	EXECUTE FUNCTION ntask.guard_ddl_check();

-- end of issue 29.3 and 29.6


-- issue 29.4 and 29.5: rate-limit buckets, retry shares, fair cursors

-- end of issue 29.4 and 29.5


-- issue 29.7 and 29.9: http retry-after, connected addresses

-- 29.7 and 29.9 are C only (src/dispatch.c, src/http_parse.c).  The http
-- parts of issue 30 are here too (30.5, 30.7, 30.8): ntask_queue_set
-- removes a target given JSON null or {} and refuses a host that
-- ntask.http_allowed_hosts does not name (C, src/queue.c); ntask_explain
-- (issue 30.5) says what the worker will really do on an http queue: send
-- again when the target has no reconcile_url, ask the reconcile_url first
-- when it has one, and name the queue's circuit breaker, its state and
-- until when, when the breaker holds a due task.
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
	is_http := q.target->>'type' OPERATOR(pg_catalog.=) 'http';

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
						CASE WHEN NOT is_http THEN 'the next attempt reconciles first'
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
			format('repair_required: %s, owner %s%s (%s of %s attempts, %s with unknown outcome)',
				   t.reason, coalesce(t.repair_owner, 'none assigned'),
				   coalesce(', next: ' || t.repair_next_action, ''),
				   t.attempts, t.max_attempts,
				   (SELECT count(*) FROM ntask.attempt_all x
					WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND NOT x.outcome_known))
		WHEN 'succeeded' THEN
			format('succeeded (%s) at %s after %s attempt(s): waiting for nothing',
				   t.outcome, ntask.explain_ts(t.finished_at), t.attempts)
		WHEN 'canceled' THEN
			format('canceled at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
		WHEN 'skipped' THEN
			format('skipped at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
	END;
	IF t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}') THEN
		IF prior IS NOT NULL THEN
			words := words || '; ' || prior;
		END IF;
		IF q.guard IS NOT NULL THEN
			words := words || '; the guard ' || q.guard || ' decides at claim';
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
					  AND (x.due_at IS NOT NULL OR x.state OPERATOR(pg_catalog.=) 'repair_required')
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
			   format('queue %s, key %s, payload digest %s (digest v%s), priority %s%s%s',
					  t.queue, t.task_key,
					  pg_catalog.encode(t.payload_digest, 'hex'), t.digest_version, t.priority,
					  coalesce(', partition ' || t.partition_key, ''),
					  CASE WHEN is_http THEN ', Idempotency-Key ' || t.task_key ELSE '' END) AS detail
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
		SELECT x.ended_at, 6, x.token, 'ended', x.token, x.worker,
			   format('attempt %s ended: %s%s%s, outcome %s%s%s%s',
					  x.attempt, x.result,
					  CASE WHEN x.requested IS NOT NULL AND x.requested OPERATOR(pg_catalog.<>) x.result
						   THEN ' (asked for ' || x.requested || ')' ELSE '' END,
					  coalesce(', error ' || x.error_class || coalesce(' at ' || x.error_stage, ''), ''),
					  CASE WHEN x.outcome_known THEN 'known' ELSE 'unknown' END,
					  coalesce(' (' || x.outcome || ')', ''),
					  coalesce(', retry at ' || ntask.explain_ts(x.retry_at), ''),
					  coalesce(', ' || CASE WHEN x.detail ? 'http_status' THEN 'HTTP ' || (x.detail->>'http_status') || ' ' ELSE '' END
							   || x.detail::text, ''))
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.ended_at IS NOT NULL
		UNION ALL
		-- receipts (the business commit)
		SELECT r.committed_at, 5, r.token, 'receipt', r.token, r.db_user::text,
			   format('receipt committed by token %s, content digest %s (digest v%s)',
					  r.token, pg_catalog.encode(r.payload_digest, 'hex'), r.digest_version)
		FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id
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


-- issue 30.7: a target can be removed
COMMENT ON FUNCTION @extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval) IS
'ntask: create or update a queue''s policy; NULL arguments keep the current value (or the default for a new queue); 0 (caps, breaker_failures) or ''none'' (rate limits) turns an option off, target => ''null'' (or ''{}'') removes the target; an http target''s hosts must be in ntask.http_allowed_hosts; returns the resulting row';

-- end of issue 29.7 and 29.9


-- issue 29.8: saga keys
-- A saga key is scoped by the queues its definition names (forward and
-- compensation): unique on (saga_key, scope).  ntask_saga_start answers
-- created = false or NT001 only from a saga whose scope the caller has the
-- producer right on every queue of; a saga it cannot see is as if the key
-- were free (docs/design.md "Sagas"), so a producer of one queue neither
-- learns nor squats the keys of another's.
CREATE FUNCTION ntask.saga_scope(steps jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$
	SELECT pg_catalog.array_agg(x.q ORDER BY x.q)
	FROM (SELECT DISTINCT (v.q COLLATE "C") AS q
		  FROM pg_catalog.jsonb_array_elements(steps) e(step),
			   LATERAL (VALUES (e.step OPERATOR(pg_catalog.->>) 'queue'),
							   ((e.step OPERATOR(pg_catalog.->) 'compensate')
									OPERATOR(pg_catalog.->>) 'queue')) v(q)
		  WHERE v.q IS NOT NULL) x
$$;
COMMENT ON FUNCTION ntask.saga_scope(jsonb) IS 'ntask: the queues a saga definition names (forward and compensation), distinct, in byte order: the scope of its saga_key';
REVOKE ALL ON FUNCTION ntask.saga_scope(jsonb) FROM PUBLIC;
ALTER TABLE ntask.saga ADD COLUMN scope text[] COLLATE "C";
UPDATE ntask.saga SET scope = ntask.saga_scope(steps);
ALTER TABLE ntask.saga ALTER COLUMN scope SET NOT NULL,
	DROP CONSTRAINT saga_saga_key_key,
	ADD CONSTRAINT saga_key_scope_key UNIQUE (saga_key, scope);
COMMENT ON COLUMN ntask.saga.scope IS 'the queues the definition names (ntask.saga_scope): the saga_key is unique within it, and only a producer with the right on all of them sees the saga from ntask_saga_start';

-- end of issue 29.8


-- issue 29.10 and the suspicions: upgrade grants, schedules, results
-- RULE for every section of this file (29.10): users build on ntask, and an
-- update must keep it.  Never DROP a public view: CREATE OR REPLACE VIEW with
-- the same columns (names, types, collations), new ones only at the end.
-- Never DROP a public function whose signature can stay: CREATE OR REPLACE.
-- Where the arguments or result columns truly change, an overload must not
-- make old calls ambiguous; otherwise drop it the way 0.2--0.3 did (refuse,
-- naming them, when user objects depend on it; carry the users' GRANTs and
-- REVOKEs over and keep them out of pg_init_privs): copy its upgrade_*
-- helpers (in test/frozen/ntask--0.3.sql) here, dropping them at the end.
-- regress "upgrade" keeps a user view, a user function and a grant.

-- Suspicion (issue 29): ntask_fire and ntask.fire_slot are SECURITY
-- DEFINER, so a schedule's tasks are enqueued past the queue's
-- producer_role.  The right is checked where a person acts: when
-- ntask_schedule sets (or moves) a schedule, the role setting it needs the
-- queue's producer right (42501), and ntask.schedule.set_by records it.
-- ntask_schedule is replaced with its 0.3 body plus that check (not a
-- trigger: Citus refuses to distribute a table with triggers); ntask_fire
-- and fire_slot are left as they are.
-- The fired tasks' enqueued_by is still the extension's owner (README
-- "Schedules"); ntask.schedule.set_by says on whose behalf.
CREATE FUNCTION ntask.outer_role() RETURNS oid
AS 'MODULE_PATHNAME', 'ntask_outer_role'
LANGUAGE C STABLE;
COMMENT ON FUNCTION ntask.outer_role() IS 'ntask: the role the session acts as (SET ROLE, else the session user), under any SECURITY DEFINER function: who called the API';
REVOKE ALL ON FUNCTION ntask.outer_role() FROM PUBLIC;
ALTER TABLE ntask.schedule ADD COLUMN set_by name;
COMMENT ON COLUMN ntask.schedule.set_by IS 'the role that last set the schedule (ntask_schedule; its producer right on the queue was checked then); NULL for schedules set before 1.0.0';
-- ntask_schedule itself is replaced once, in the issue 30 section below
-- (with 30.2's slot logic and 30.6's payload check), carrying this check.

-- end of issue 29.10


-- issue 30

-- 30.2: a schedule's first firing is its next slot, catchup bounds the
-- latest slot too, and a local time a DST gap skipped is recorded as
-- missed.  ntask_fire keeps its signature; its slot logic (firing "now")
-- moves to ntask.fire_due(name, at), which tests call with a given time.
CREATE FUNCTION ntask.cron_gaps(expr text, after timestamptz, upto timestamptz, timezone text,
								OUT slot timestamptz, OUT local_time timestamp)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ntask_cron_gaps'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION ntask.cron_gaps(text, timestamptz, timestamptz, text) IS
'ntask: internal: local times a cron expression matches that a DST gap skipped, with the instant of the gap, for gaps in (after, upto]';
REVOKE ALL ON FUNCTION ntask.cron_gaps(text, timestamptz, timestamptz, text) FROM PUBLIC;

CREATE FUNCTION ntask.fire_due(name text, at timestamptz)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	base timestamptz;
	handled timestamptz;
	cur timestamptz;
	lo timestamptz;
	missed timestamptz;
	n integer := 0;
	r record;
	g record;
BEGIN
	-- the schedule row lock serializes concurrent firings of one schedule
	SELECT * INTO s FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) fire_due.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;

	-- the latest slot handled; a schedule that never fired counts from its
	-- creation, so its first firing is its next slot, not a past one
	base := COALESCE(s.last_slot, @extschema@.ntask_cron_prev(s.cron, s.created_at, s.timezone));
	handled := base;
	cur := @extschema@.ntask_cron_prev(s.cron, at, s.timezone);
	-- the catch-up window, measured from now; pg_cron fires once a minute,
	-- so a slot is on time for at least a minute
	lo := at OPERATOR(pg_catalog.-) GREATEST(s.catchup, interval '1 minute');

	-- local times a DST gap skipped since then (at most 8 days back: the
	-- catch-up window is at most 7): recorded as missed, once
	FOR g IN SELECT cg.slot, cg.local_time
			 FROM ntask.cron_gaps(s.cron, GREATEST(base, at OPERATOR(pg_catalog.-) interval '8 days'),
								  at, s.timezone) cg
			 ORDER BY cg.local_time LOOP
		fired_slot := g.slot; task_id := NULL; outcome := 'missed';
		reason := format('local time %s does not exist in time zone %s (daylight saving time gap)',
						 to_char(g.local_time, 'YYYY-MM-DD HH24:MI'), s.timezone);
		INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
		VALUES (s.name, g.slot, 'missed', reason);
		RETURN NEXT;
		handled := GREATEST(handled, g.slot);
	END LOOP;

	IF cur OPERATOR(pg_catalog.<=) base THEN
		IF handled OPERATOR(pg_catalog.>) base THEN
			UPDATE ntask.schedule sc SET last_slot = handled, updated_at = now()
			WHERE sc.name OPERATOR(pg_catalog.=) s.name;
			RETURN;
		END IF;
		-- no new slot since the last firing: say so (nothing is recorded)
		fired_slot := cur;
		SELECT ss.task_id INTO task_id FROM ntask.schedule_slot ss
		WHERE ss.schedule OPERATOR(pg_catalog.=) s.name AND ss.slot OPERATOR(pg_catalog.=) cur
		ORDER BY ss.id DESC LIMIT 1;
		outcome := 'duplicate';
		reason := 'no new slot since the last firing';
		RETURN NEXT;
		RETURN;
	END IF;

	-- slots missed since the last one handled: within the window enqueued
	-- (caught_up), older ones recorded as missed
	missed := @extschema@.ntask_cron_next(s.cron, base, s.timezone);
	WHILE missed OPERATOR(pg_catalog.<) cur LOOP
		n := n + 1;
		IF missed OPERATOR(pg_catalog.>=) lo THEN
			SELECT * INTO r FROM ntask.fire_slot(s, missed, 'caught_up');
			fired_slot := missed; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
		ELSIF n > 1000 THEN
			-- do not write one row per minute for a week of downtime
			INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
			VALUES (s.name, missed, 'missed',
					'beyond the catch-up window; later missed slots up to '
					|| ntask.slot_key(s.name, cur) || ' not listed');
			fired_slot := missed; task_id := NULL; outcome := 'missed'; reason := 'beyond the catch-up window';
			RETURN NEXT;
			missed := GREATEST(lo, missed);
			missed := @extschema@.ntask_cron_prev(s.cron, missed, s.timezone);
			missed := @extschema@.ntask_cron_next(s.cron, missed, s.timezone);
			n := -1000000;
			CONTINUE;
		ELSE
			INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
			VALUES (s.name, missed, 'missed', 'beyond the catch-up window of ' || s.catchup);
			fired_slot := missed; task_id := NULL; outcome := 'missed'; reason := 'beyond the catch-up window of ' || s.catchup;
		END IF;
		RETURN NEXT;
		missed := @extschema@.ntask_cron_next(s.cron, missed, s.timezone);
	END LOOP;

	-- the latest slot, unless it is beyond the window too (an outage longer
	-- than catchup enqueues nothing late)
	IF cur OPERATOR(pg_catalog.>=) lo THEN
		SELECT * INTO r FROM ntask.fire_slot(s, cur, 'enqueued');
		fired_slot := cur; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
	ELSE
		reason := 'beyond the catch-up window of ' || s.catchup;
		INSERT INTO ntask.schedule_slot (schedule, slot, outcome, reason)
		VALUES (s.name, cur, 'missed', reason);
		fired_slot := cur; task_id := NULL; outcome := 'missed';
	END IF;
	RETURN NEXT;
	UPDATE ntask.schedule sc SET last_slot = GREATEST(cur, handled), updated_at = now()
	WHERE sc.name OPERATOR(pg_catalog.=) s.name;
END $$;
COMMENT ON FUNCTION ntask.fire_due(text, timestamptz) IS
'ntask: internal: ntask_fire(name) as of a given time: DST-gap slots and slots beyond the catch-up window recorded as missed, the rest enqueued';
REVOKE ALL ON FUNCTION ntask.fire_due(text, timestamptz) FROM PUBLIC;

CREATE OR REPLACE FUNCTION @extschema@.ntask_fire(name text, slot timestamptz DEFAULT NULL, rerun text DEFAULT NULL)
RETURNS TABLE (fired_slot timestamptz, task_id bigint, outcome text, reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	r record;
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION 'ntask: name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	-- the schedule row lock serializes concurrent firings of one schedule
	SELECT * INTO s FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) ntask_fire.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;

	IF ntask_fire.slot IS NOT NULL THEN
		-- a manual (re-)run of a given slot
		IF @extschema@.ntask_cron_prev(s.cron, ntask_fire.slot, s.timezone) OPERATOR(pg_catalog.<>) ntask_fire.slot THEN
			RAISE EXCEPTION 'ntask: % is not a slot of schedule "%"', ntask_fire.slot, s.name
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = format('Its cron expression is "%s" in time zone %s.', s.cron, s.timezone);
		END IF;
		IF rerun IS NOT NULL AND (rerun = '' OR length(rerun) > 63) THEN
			RAISE EXCEPTION 'ntask: rerun must be 1 to 63 characters' USING ERRCODE = 'invalid_parameter_value';
		END IF;
		SELECT * INTO r FROM ntask.fire_slot(s, ntask_fire.slot,
			CASE WHEN rerun IS NULL THEN 'enqueued' ELSE 'rerun' END, rerun);
		fired_slot := ntask_fire.slot; task_id := r.task_id; outcome := r.outcome; reason := r.reason;
		RETURN NEXT;
		UPDATE ntask.schedule sc SET last_slot = GREATEST(sc.last_slot, ntask_fire.slot), updated_at = now()
		WHERE sc.name OPERATOR(pg_catalog.=) s.name;
		RETURN;
	END IF;
	IF rerun IS NOT NULL THEN
		RAISE EXCEPTION 'ntask: rerun needs an explicit slot' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	RETURN QUERY SELECT f.fired_slot, f.task_id, f.outcome, f.reason
				 FROM ntask.fire_due(s.name, pg_catalog.now()) f;
END $$;
COMMENT ON FUNCTION @extschema@.ntask_fire(text, timestamptz, text) IS
'ntask: fire a schedule: enqueue its latest slot (key <name>:<slot UTC>) if within the catch-up window (a new schedule starts with its next slot), catch up missed slots within the window, record older ones and DST-gap ones as missed; with slot, (re-)run that slot (a repeat is a duplicate); with rerun, a deliberate second run under a new key';

-- 30.6: payloads are at most ntask.max_payload_bytes (SQLSTATE 54000);
-- the C functions check it themselves, SQL ones call this
CREATE FUNCTION ntask.check_payload(payload jsonb, what text) RETURNS void
AS 'MODULE_PATHNAME', 'ntask_check_payload'
LANGUAGE C STRICT;
COMMENT ON FUNCTION ntask.check_payload(jsonb, text) IS
'ntask: internal: raise 54000 when a payload is over ntask.max_payload_bytes';
REVOKE ALL ON FUNCTION ntask.check_payload(jsonb, text) FROM PUBLIC;

-- ntask_schedule: a replaced schedule whose cron expression or time zone
-- changes starts with the next slot of the new one (no catch-up of the
-- new expression's past slots), and its payload is checked against
-- ntask.max_payload_bytes (30.6) when it is stored, not first at a firing
CREATE OR REPLACE FUNCTION @extschema@.ntask_schedule(name text, cron text, queue text, payload jsonb DEFAULT '{}',
										   overlap text DEFAULT 'skip', catchup interval DEFAULT '1 hour',
										   timezone text DEFAULT 'UTC', bound_to_next_slot boolean DEFAULT true)
RETURNS ntask.schedule
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
	job text := 'ntask:' || name;
	cmd text := format('SELECT * FROM %I.ntask_fire(%L)', '@extschema@', name);
	cron_expr text;
	prev_slot timestamptz;
	who oid := ntask.outer_role();
	who_name name;
BEGIN
	IF name IS NULL OR cron IS NULL OR queue IS NULL OR payload IS NULL
	   OR overlap IS NULL OR catchup IS NULL OR timezone IS NULL OR bound_to_next_slot IS NULL THEN
		RAISE EXCEPTION 'ntask: ntask_schedule arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF name !~ '^[A-Za-z0-9_.:-]{1,63}$' THEN
		RAISE EXCEPTION 'ntask: invalid schedule name "%"', name
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use 1 to 63 letters, digits, ''_'', ''.'', '':'' or ''-''.';
	END IF;
	IF overlap NOT IN ('skip', 'allow', 'buffer_one') THEN
		RAISE EXCEPTION 'ntask: unknown overlap policy "%"', overlap
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use skip, allow or buffer_one.';
	END IF;
	IF catchup < '0'::interval THEN
		RAISE EXCEPTION 'ntask: catchup must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) ntask_schedule.queue) THEN
		RAISE EXCEPTION 'ntask: queue "%" does not exist', queue USING ERRCODE = 'undefined_object';
	END IF;
	PERFORM ntask.check_payload(payload, 'payload');
	-- validates both; the slot before now is where a new expression starts
	prev_slot := @extschema@.ntask_cron_prev(cron, now(), timezone);
	-- the schedule enqueues on behalf of the role setting it (ntask_fire
	-- runs as the owner): that role needs the queue's producer right now
	-- (issue 29, ntask.schedule.set_by)
	IF EXISTS (SELECT 1 FROM ntask.queue q WHERE q.queue OPERATOR(pg_catalog.=) ntask_schedule.queue
			   AND q.producer_role IS NOT NULL AND NOT pg_has_role(who, q.producer_role, 'USAGE')) THEN
		RAISE EXCEPTION 'ntask: permission denied to enqueue into queue "%"', queue
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'A schedule enqueues on behalf of the role that sets it: that role needs the queue''s producer_role (ntask_queue_set_roles).';
	END IF;
	who_name := (SELECT r.rolname FROM pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) who);

	INSERT INTO ntask.schedule AS sc (name, cron, queue, payload, overlap, catchup, timezone,
									  bound_to_next_slot, set_by)
	VALUES (name, cron, queue, payload, overlap, catchup, timezone, bound_to_next_slot, who_name)
	ON CONFLICT ON CONSTRAINT schedule_pkey DO UPDATE SET cron = EXCLUDED.cron, queue = EXCLUDED.queue,
		payload = EXCLUDED.payload, overlap = EXCLUDED.overlap, catchup = EXCLUDED.catchup,
		timezone = EXCLUDED.timezone, bound_to_next_slot = EXCLUDED.bound_to_next_slot,
		set_by = EXCLUDED.set_by,
		last_slot = CASE WHEN sc.cron IS DISTINCT FROM EXCLUDED.cron
							  OR sc.timezone IS DISTINCT FROM EXCLUDED.timezone
						 THEN GREATEST(sc.last_slot, prev_slot) ELSE sc.last_slot END,
		updated_at = EXCLUDED.updated_at	-- its default, now(): Citus refuses a function in DO UPDATE SET
	RETURNING * INTO s;

	-- pg_cron evaluates its expressions in GMT: a UTC schedule is handed
	-- over as is, any other is fired every minute (a firing with no new
	-- slot does nothing)
	cron_expr := CASE WHEN timezone IN ('UTC', 'GMT', 'Etc/UTC') THEN cron ELSE '* * * * *' END;
	IF to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)') IS NOT NULL THEN
		EXECUTE 'SELECT cron.schedule_in_database($1, $2, $3, current_database())'
			USING job, cron_expr, cmd;
		UPDATE ntask.schedule sc SET cron_job = job WHERE sc.name OPERATOR(pg_catalog.=) ntask_schedule.name
		RETURNING * INTO s;
	ELSE
		RAISE NOTICE 'ntask: pg_cron is not installed in this database; schedule "%" is stored but nothing fires it', name
			USING HINT = format('In pg_cron''s database run: SELECT cron.schedule_in_database(%L, %L, %L, %L);',
								job, cron_expr, cmd, current_database());
	END IF;
	RETURN s;
END $$;

-- 30.4: DROP EXTENSION ntask unschedules ntask's pg_cron jobs (else they
-- fail every minute) and warns about the unfinished tasks it drops.  A
-- trigger of its own (ntask_guard_ddl is the guards'); see src/drop.c for
-- why it reads the statement on ddl_command_start.
CREATE FUNCTION ntask.drop_cleanup() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	t record;
	jobs integer := 0;
BEGIN
	-- the jobs ntask_schedule registered in this database (by id: the
	-- dropping role need not be the one that owns them)
	IF to_regprocedure('cron.unschedule(bigint)') IS NOT NULL
	   AND to_regclass('cron.job') IS NOT NULL THEN
		EXECUTE 'SELECT count(cron.unschedule(j.jobid))::integer FROM cron.job j
				 WHERE j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
				   AND j.jobname OPERATOR(pg_catalog.=) ANY (
					   SELECT s.cron_job FROM ntask.schedule s WHERE s.cron_job IS NOT NULL)'
		INTO jobs;
	END IF;
	IF jobs > 0 THEN
		RAISE NOTICE 'ntask: unscheduled % pg_cron job(s) of ntask schedules', jobs;
	END IF;
	IF EXISTS (SELECT 1 FROM ntask.schedule s WHERE s.cron_job IS NULL) THEN
		RAISE NOTICE 'ntask: schedules registered by hand in pg_cron''s database (jobs named ntask:<name>) must be unscheduled there';
	END IF;

	SELECT count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) ANY ('{ready,leased,retry_wait}')) AS unfinished,
		   count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) 'repair_required') AS repair,
		   max(tt.task_id) AS max_id
	INTO t FROM ntask.task tt;
	IF t.unfinished > 0 OR t.repair > 0 THEN
		RAISE WARNING 'ntask: DROP EXTENSION ntask drops % unfinished task(s) and % awaiting repair', t.unfinished, t.repair
			USING DETAIL = format('The highest task id was %s; a new CREATE EXTENSION ntask numbers tasks from 1 again.', t.max_id),
				  HINT = format('To keep task ids unique after re-creating it: SELECT setval(''ntask.task_task_id_seq'', %s);', t.max_id);
	END IF;
END $$;
COMMENT ON FUNCTION ntask.drop_cleanup() IS
'ntask: internal: before DROP EXTENSION ntask: unschedule its pg_cron jobs, warn about unfinished tasks and the task id sequence';
REVOKE ALL ON FUNCTION ntask.drop_cleanup() FROM PUBLIC;

CREATE FUNCTION ntask.drop_extension_check() RETURNS event_trigger
AS 'MODULE_PATHNAME', 'ntask_drop_extension_check'
LANGUAGE C;
COMMENT ON FUNCTION ntask.drop_extension_check() IS
'ntask: event trigger: before DROP EXTENSION ntask, run ntask.drop_cleanup()';
REVOKE ALL ON FUNCTION ntask.drop_extension_check() FROM PUBLIC;
CREATE EVENT TRIGGER ntask_drop_extension ON ddl_command_start
	WHEN TAG IN ('DROP EXTENSION')
	EXECUTE FUNCTION ntask.drop_extension_check();

-- end of issue 30


-- issue 32: PostgreSQL 15 and 18

-- ntask_unschedule removed the pg_cron job through cron.unschedule(name),
-- which pg_cron 1.5 replaced by cron.unschedule(text): with pg_cron 1.5+
-- (1.6.7 on 18) the job stayed and fired ntask_fire for a schedule that no
-- longer exists, every slot (t/002_schedule_pg_cron.pl).  By job id, as
-- ntask.drop_cleanup() does: cron.unschedule(bigint) is in every pg_cron.
CREATE OR REPLACE FUNCTION @extschema@.ntask_unschedule(name text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s ntask.schedule;
BEGIN
	DELETE FROM ntask.schedule sc WHERE sc.name OPERATOR(pg_catalog.=) ntask_unschedule.name RETURNING * INTO s;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'ntask: schedule "%" does not exist', name USING ERRCODE = 'undefined_object';
	END IF;
	IF s.cron_job IS NOT NULL AND to_regprocedure('cron.unschedule(bigint)') IS NOT NULL
	   AND to_regclass('cron.job') IS NOT NULL THEN
		EXECUTE 'SELECT count(cron.unschedule(j.jobid)) FROM cron.job j
				 WHERE j.jobname OPERATOR(pg_catalog.=) $1
				   AND j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()'
			USING s.cron_job;
	END IF;
	RETURN true;
END $$;

-- end of issue 32


-- issue 36.1: dependencies (fan-out, fan-in)

ALTER TABLE ntask.queue ADD COLUMN on_parent_failed text NOT NULL DEFAULT 'wait'
	CHECK (on_parent_failed IN ('wait', 'cancel'));
COMMENT ON COLUMN ntask.queue.on_parent_failed IS 'what a task of the queue does when one of its parents ends in repair_required, canceled or skipped: wait (until the parent is replayed and succeeds) or cancel (reason parent_failed, audited); an enqueue''s on_parent_failed overrides it';
ALTER TABLE ntask.task ADD COLUMN parents_left integer,
	ADD COLUMN has_parents boolean NOT NULL DEFAULT false,
	ADD COLUMN has_children boolean NOT NULL DEFAULT false,
	ADD COLUMN on_parent_failed text CHECK (on_parent_failed IN ('wait', 'cancel'));
COMMENT ON COLUMN ntask.task.parents_left IS 'parents (ntask_enqueue depends_on) not yet succeeded; NULL: the task has none';
COMMENT ON COLUMN ntask.task.has_parents IS 'the task was enqueued with depends_on: its claim reads its parents'' results (context.parents)';
COMMENT ON COLUMN ntask.task.has_children IS 'some task depends on this one: its end releases or decides them (trigger task_deps_changed)';
COMMENT ON COLUMN ntask.task.on_parent_failed IS 'the enqueue''s policy for a failed parent (wait or cancel); NULL: the queue''s';
COMMENT ON FUNCTION ntask.task_row_valid(text, timestamptz, text) IS
'ntask: the task row invariants (CHECK task_row_valid): a known state, due_at NULL exactly when finished or waiting for parents, lease_owner set exactly while leased';

-- issue 36.1: dependencies (fan-out, fan-in); docs/design.md "Operator
-- controls and workflows".  One row per (child, parent): written by the
-- enqueue that names the parents (depends_on), read when a parent ends
-- (task_deps_changed) and when the child is claimed (context.parents).
CREATE TABLE ntask.task_dep (
	task_id			bigint NOT NULL,
	parent_id		bigint NOT NULL,
	shard			smallint NOT NULL DEFAULT 0,
	PRIMARY KEY (task_id, parent_id)
);
CREATE INDEX task_dep_parent_idx ON ntask.task_dep (parent_id);
COMMENT ON TABLE ntask.task_dep IS 'ntask: the parents of each task enqueued with depends_on (task_id waits for parent_id to succeed); pruned with the child';
SELECT pg_catalog.pg_extension_config_dump('ntask.task_dep', '');

-- A parent that ends releases or decides its children.  The WHEN clause
-- keeps every task without children (has_children false) from running it.
CREATE FUNCTION ntask.task_deps_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'ntask_task_deps_changed'
LANGUAGE C;
COMMENT ON FUNCTION ntask.task_deps_changed() IS
'ntask: internal: trigger on ntask.task: a parent that succeeded counts down its waiting children and makes the last one ready; one that ended in repair_required, canceled or skipped cancels its children whose policy is cancel';
CREATE TRIGGER task_deps_changed AFTER UPDATE OF state ON ntask.task
	FOR EACH ROW WHEN (NEW.has_children)
	EXECUTE FUNCTION ntask.task_deps_changed();
REVOKE ALL ON FUNCTION ntask.task_deps_changed() FROM PUBLIC;
GRANT SELECT ON ntask.task_dep TO ntask_admin;


CREATE OR REPLACE VIEW ntask.queue_stats AS
SELECT q.queue COLLATE "default" AS queue,
	   coalesce(s.ready, 0) AS ready,
	   coalesce(s.leased, 0) AS leased,
	   coalesce(s.retry_wait, 0) AS retry_wait,
	   coalesce(s.succeeded, 0) AS succeeded,
	   coalesce(s.repair_required, 0) AS repair_required,
	   coalesce(s.canceled, 0) AS canceled,
	   coalesce(s.skipped, 0) AS skipped,
	   pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_ready AS oldest_ready_age,
	   pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_unfinished AS oldest_unfinished_age,
	   coalesce(s.unknown_attempts, 0) AS unknown_attempts,
	   coalesce(s.repair_required, 0) AS repair_count,
	   coalesce(s.waiting, 0) AS waiting,
	   pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_waiting AS oldest_waiting_age
FROM ntask.queue q
LEFT JOIN (
	SELECT t.queue,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'ready') AS ready,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'leased') AS leased,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'retry_wait') AS retry_wait,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'succeeded') AS succeeded,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'repair_required') AS repair_required,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'canceled') AS canceled,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'skipped') AS skipped,
		   min(t.run_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}')
								 AND t.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_ready,
		   min(t.created_at) FILTER (WHERE t.due_at IS NOT NULL) AS oldest_unfinished,
		   sum(t.unknown_attempts) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) ALL ('{succeeded,canceled,skipped}')) AS unknown_attempts,
		   count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'waiting') AS waiting,
		   min(t.created_at) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'waiting') AS oldest_waiting
	FROM ntask.task t
	GROUP BY t.queue
) s ON s.queue OPERATOR(pg_catalog.=) q.queue;
COMMENT ON VIEW ntask.queue_stats IS 'ntask: per queue, tasks per state, oldest due-and-ready age, oldest unfinished age, attempts whose outcome is unknown of unfinished tasks (incl. repair_required), repair count, tasks waiting for parents and the age of the oldest';

-- new arguments (appended) and the claim's context column: dropped and
-- created again.  Grants a user made on the old functions go with them
-- (grant them again, or better grant the roles ntask_producer,
-- ntask_worker, ntask_admin); a user's object that depends on one of them
-- (a BEGIN ATOMIC function calling it) stops the update: drop it first
-- and create it again after.
DROP FUNCTION @extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval);
DROP FUNCTION @extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer);
DROP FUNCTION @extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer);
DROP FUNCTION @extschema@.ntask_claim(text, text, integer, interval, interval, boolean);
DROP FUNCTION @extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb);

CREATE FUNCTION @extschema@.ntask_queue_set(
	queue text,
	max_attempts integer DEFAULT NULL,
	total_deadline interval DEFAULT NULL,
	lease interval DEFAULT NULL,
	backoff_base interval DEFAULT NULL,
	backoff_max interval DEFAULT NULL,
	guard regprocedure DEFAULT NULL,
	target jsonb DEFAULT NULL,
	retention interval DEFAULT NULL,
	notify boolean DEFAULT NULL,
	fairness text DEFAULT NULL,
	max_inflight integer DEFAULT NULL,
	partition_max_inflight integer DEFAULT NULL,
	ordered boolean DEFAULT NULL,
	ordered_skip_repair boolean DEFAULT NULL,
	rate_limit text DEFAULT NULL,
	partition_rate_limit text DEFAULT NULL,
	retry_share real DEFAULT NULL,
	breaker_failures integer DEFAULT NULL,
	breaker_cooldown interval DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS SETOF ntask.queue
AS 'MODULE_PATHNAME', 'ntask_queue_set'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval, text) IS
'ntask: create or update a queue''s policy; NULL arguments keep the current value (or the default for a new queue); 0 (caps, breaker_failures) or ''none'' (rate limits) turns an option off, target => ''null'' (or ''{}'') removes the target; an http target''s hosts must be in ntask.http_allowed_hosts; returns the resulting row';

CREATE FUNCTION @extschema@.ntask_enqueue(
	queue text,
	task_key text,
	payload jsonb DEFAULT '{}',
	run_at timestamptz DEFAULT NULL,
	partition_key text DEFAULT NULL,
	priority integer DEFAULT 0,
	traceparent text DEFAULT NULL,
	depends_on text[] DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS TABLE (task_id bigint, created boolean, state text, outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'ntask_enqueue'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text) IS
'ntask: idempotent enqueue on (queue, task_key); a duplicate returns the existing task with created = false and its outcome and stored result (after the producer right is checked), the same key with a different payload raises SQLSTATE NT001; with depends_on (task keys of the queue or queue:key, which must exist) the task waits until every parent has succeeded';

CREATE FUNCTION @extschema@.ntask_enqueue_many(
	queue text,
	task_keys text[],
	payloads jsonb[],
	run_at timestamptz DEFAULT NULL,
	partition_keys text[] DEFAULT NULL,
	priority integer DEFAULT 0,
	traceparent text DEFAULT NULL,
	depends_on text[] DEFAULT NULL,
	on_parent_failed text DEFAULT NULL)
RETURNS TABLE (task_id bigint, created boolean, state text, outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'ntask_enqueue_many'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer, text, text[], text) IS
'ntask: ntask_enqueue for each (task_keys[i], payloads[i], partition_keys[i]) in one statement; one row per element in input order; a key repeated in the call gives the same task (created only the first time), with a different payload NT001; depends_on and on_parent_failed apply to every task of the call';

CREATE FUNCTION @extschema@.ntask_claim(
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	lease interval DEFAULT NULL,
	wait interval DEFAULT NULL,
	invoked boolean DEFAULT false)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text,
			   context jsonb)
AS 'MODULE_PATHNAME', 'ntask_claim'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_claim(text, text, integer, interval, interval, boolean) IS
'ntask: lease up to max_tasks due tasks (FOR UPDATE SKIP LOCKED), taking over expired leases; each gets a new fencing token and counts an attempt; tasks whose budget is spent go to repair_required instead; with wait, when nothing is due, sleeps until work of the queue is committed or comes due (at most wait, cut to ntask.max_wait), holding no lock; with invoked, each leased attempt is marked invoked in the same statement (as ntask_invoked); context is NULL or an object (parents: the stored results of the task''s parents)';

CREATE FUNCTION @extschema@.ntask_transition_and_claim(
	finish_task_id bigint,
	finish_token bigint,
	to_state text,
	queue text,
	worker text,
	max_tasks integer DEFAULT 1,
	outcome text DEFAULT NULL,
	error_class text DEFAULT NULL,
	detail jsonb DEFAULT NULL,
	retry_at timestamptz DEFAULT NULL,
	error_stage text DEFAULT NULL,
	lease interval DEFAULT NULL,
	result jsonb DEFAULT NULL)
RETURNS TABLE (task_id bigint, task_key text, payload jsonb, attempt integer,
			   token bigint, lease_until timestamptz, prior_outcome text,
			   finish_result text, finish_state text, finish_run_at timestamptz,
			   context jsonb)
AS 'MODULE_PATHNAME', 'ntask_transition_and_claim'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb) IS
'ntask: ntask_transition of the task a worker holds, then ntask_claim of the next, in one statement; every row carries the transition''s answer (finish_result, finish_state, finish_run_at), and when nothing is claimed one row with the claim columns NULL still does';

REVOKE ALL ON FUNCTION
	@extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval, text),
	@extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text),
	@extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer, text, text[], text),
	@extschema@.ntask_claim(text, text, integer, interval, interval, boolean),
	@extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_enqueue(text, text, jsonb, timestamptz, text, integer, text, text[], text),
	@extschema@.ntask_enqueue_many(text, text[], jsonb[], timestamptz, text[], integer, text, text[], text)
TO ntask_producer;
GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_claim(text, text, integer, interval, interval, boolean),
	@extschema@.ntask_transition_and_claim(bigint, bigint, text, text, text, integer, text, text, jsonb, timestamptz, text, interval, jsonb)
TO ntask_worker;
GRANT EXECUTE ON FUNCTION
	@extschema@.ntask_queue_set(text, integer, interval, interval, interval, interval, regprocedure, jsonb, interval, boolean, text, integer, integer, boolean, boolean, text, text, real, integer, interval, text)
TO ntask_admin;
-- ntask_explain tells what a waiting task waits for
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
	is_http := q.target->>'type' OPERATOR(pg_catalog.=) 'http';

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
						CASE WHEN NOT is_http THEN 'the next attempt reconciles first'
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
								ELSE 'wait until it is replayed and succeeds' END)
			 FROM ntask.task_dep d JOIN ntask.task p ON p.task_id OPERATOR(pg_catalog.=) d.parent_id
			 WHERE d.task_id OPERATOR(pg_catalog.=) t.task_id)
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
			format('repair_required: %s, owner %s%s (%s of %s attempts, %s with unknown outcome)',
				   t.reason, coalesce(t.repair_owner, 'none assigned'),
				   coalesce(', next: ' || t.repair_next_action, ''),
				   t.attempts, t.max_attempts,
				   (SELECT count(*) FROM ntask.attempt_all x
					WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND NOT x.outcome_known))
		WHEN 'succeeded' THEN
			format('succeeded (%s) at %s after %s attempt(s): waiting for nothing',
				   t.outcome, ntask.explain_ts(t.finished_at), t.attempts)
		WHEN 'canceled' THEN
			format('canceled at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
		WHEN 'skipped' THEN
			format('skipped at %s by %s: %s', ntask.explain_ts(t.finished_at), fin_actor, t.reason)
	END;
	IF t.state OPERATOR(pg_catalog.=) ANY ('{ready,retry_wait}') THEN
		IF prior IS NOT NULL THEN
			words := words || '; ' || prior;
		END IF;
		IF q.guard IS NOT NULL THEN
			words := words || '; the guard ' || q.guard || ' decides at claim';
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
					  AND (x.due_at IS NOT NULL OR x.state OPERATOR(pg_catalog.=) 'repair_required')
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
			   format('queue %s, key %s, payload digest %s (digest v%s), priority %s%s%s',
					  t.queue, t.task_key,
					  pg_catalog.encode(t.payload_digest, 'hex'), t.digest_version, t.priority,
					  coalesce(', partition ' || t.partition_key, ''),
					  CASE WHEN is_http THEN ', Idempotency-Key ' || t.task_key ELSE '' END) AS detail
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
		SELECT x.ended_at, 6, x.token, 'ended', x.token, x.worker,
			   format('attempt %s ended: %s%s%s, outcome %s%s%s%s',
					  x.attempt, x.result,
					  CASE WHEN x.requested IS NOT NULL AND x.requested OPERATOR(pg_catalog.<>) x.result
						   THEN ' (asked for ' || x.requested || ')' ELSE '' END,
					  coalesce(', error ' || x.error_class || coalesce(' at ' || x.error_stage, ''), ''),
					  CASE WHEN x.outcome_known THEN 'known' ELSE 'unknown' END,
					  coalesce(' (' || x.outcome || ')', ''),
					  coalesce(', retry at ' || ntask.explain_ts(x.retry_at), ''),
					  coalesce(', ' || CASE WHEN x.detail ? 'http_status' THEN 'HTTP ' || (x.detail->>'http_status') || ' ' ELSE '' END
							   || x.detail::text, ''))
		FROM ntask.attempt_all x WHERE x.task_id OPERATOR(pg_catalog.=) t.task_id AND x.ended_at IS NOT NULL
		UNION ALL
		-- receipts (the business commit)
		SELECT r.committed_at, 5, r.token, 'receipt', r.token, r.db_user::text,
			   format('receipt committed by token %s, content digest %s (digest v%s)',
					  r.token, pg_catalog.encode(r.payload_digest, 'hex'), r.digest_version)
		FROM ntask.receipt r WHERE r.task_id OPERATOR(pg_catalog.=) t.task_id
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
COMMENT ON FUNCTION @extschema@.ntask_explain(bigint, boolean) IS
'ntask: one time-ordered record of a task for on-call: first what it is waiting for, in words, then the enqueue, every attempt (claimed, invoked, ended with result, error class and stage, outcome known or unknown, HTTP status), receipts, audited replays, cancels, repair assignments and guard errors, and the end; the payload only with include_payload';

-- DROP EXTENSION's warning counts the tasks waiting for parents as unfinished
CREATE OR REPLACE FUNCTION ntask.drop_cleanup() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	t record;
	jobs integer := 0;
BEGIN
	-- the jobs ntask_schedule registered in this database (by id: the
	-- dropping role need not be the one that owns them)
	IF to_regprocedure('cron.unschedule(bigint)') IS NOT NULL
	   AND to_regclass('cron.job') IS NOT NULL THEN
		EXECUTE 'SELECT count(cron.unschedule(j.jobid))::integer FROM cron.job j
				 WHERE j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
				   AND j.jobname OPERATOR(pg_catalog.=) ANY (
					   SELECT s.cron_job FROM ntask.schedule s WHERE s.cron_job IS NOT NULL)'
		INTO jobs;
	END IF;
	IF jobs > 0 THEN
		RAISE NOTICE 'ntask: unscheduled % pg_cron job(s) of ntask schedules', jobs;
	END IF;
	IF EXISTS (SELECT 1 FROM ntask.schedule s WHERE s.cron_job IS NULL) THEN
		RAISE NOTICE 'ntask: schedules registered by hand in pg_cron''s database (jobs named ntask:<name>) must be unscheduled there';
	END IF;

	SELECT count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) ANY ('{ready,leased,retry_wait,waiting}')) AS unfinished,
		   count(*) FILTER (WHERE tt.state OPERATOR(pg_catalog.=) 'repair_required') AS repair,
		   max(tt.task_id) AS max_id
	INTO t FROM ntask.task tt;
	IF t.unfinished > 0 OR t.repair > 0 THEN
		RAISE WARNING 'ntask: DROP EXTENSION ntask drops % unfinished task(s) and % awaiting repair', t.unfinished, t.repair
			USING DETAIL = format('The highest task id was %s; a new CREATE EXTENSION ntask numbers tasks from 1 again.', t.max_id),
				  HINT = format('To keep task ids unique after re-creating it: SELECT setval(''ntask.task_task_id_seq'', %s);', t.max_id);
	END IF;
END $$;

-- end of issue 36.1
