-- bench/storage_layout.sql: issue 48's levers (c) and (d) simulated in SQL
-- (bench/storage.sh, STORAGE_LAYOUTS=1): ntask's task row, ledger and
-- indexes copied, then written by plain statements that change the columns
-- ntask's claim (CLAIM_LEASE_SET, src/claim.c) and finish (TR_APPLY_UPDATE
-- and the ledger insert, src/transition.c) change, with the values a real
-- enqueue stored (each simulated enqueue copies one row of ntask.task).
-- No ntask code runs in them: they measure what a layout writes, not what
-- ntask does to get there, and sim_wide against the real ntask tells how
-- close the simulation is.
--
--   sim_wide            the 1.1 layout as it is (ntask.task, ntask.attempt)
--   sim_wide_noledger   (c): a first attempt that succeeds writes no
--                       ledger row; the task row keeps its worker
--   sim_split           (d): ntask.task keeps what moves, a body table
--                       holds what is written once, with the unique key
--   sim_split_noledger  (c) and (d)
--   sim_ready_table     not in the list of issue 48: the ready set in a
--                       narrow table of its own (task_id, queue, priority,
--                       due_at and the claim's index), the claim deleting
--                       the task's entry and inserting its lease's, the
--                       finish deleting that; the task row keeps only its
--                       primary key and unique key, so its updates can be
--                       HOT (fillfactor 80), no ledger row for a first
--                       success, the moving columns last.  Not simulated:
--                       what the lease, deadline and finished indexes
--                       serve (the sweeps and retention) would need
--                       (deadline in the narrow table, partitions)
--   sim_ready_deadline  sim_ready_table with what the deadline sweep needs:
--                       the ready set's rows carry the task's deadline, in
--                       a partial index (the lease's rows carry none);
--                       retention would read the task rows by a cursor of
--                       its own (no index of finished tasks)
--   sim_ready_full      sim_ready_deadline and an index of finished tasks
--                       for retention, in a narrow table of its own
--                       (task_id, queue, finished_at; the finish inserts
--                       its row), since finished_at in an index of the
--                       task row would make the finish not HOT
--   sim_wide_due_unleased  (b): task_due_idx without the leased rows
--   sim_split_done      (c), (d) and finished tasks out of the hot table:
--                       the finish deletes the moving row and inserts it,
--                       with its worker, into a done table (primary key,
--                       and the retention index (queue, finished_at))

-- the columns written once at enqueue (docs/design.md "Storage: the row
-- that moves and the row written once")
CREATE FUNCTION storage.body_cols() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
	SELECT ARRAY['task_key', 'payload', 'payload_digest', 'digest_version', 'traceparent',
				 'saga_id', 'enqueued_by', 'on_parent_failed', 'created_at']
$$;

-- the columns the claim and the finish write (CLAIM_LEASE_SET,
-- TR_APPLY_UPDATE): a reordered layout puts them last, together
CREATE FUNCTION storage.moving_cols() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
	SELECT ARRAY['state', 'run_at', 'due_at', 'attempts', 'token', 'lease_owner', 'lease_until',
				 'unknown_attempts', 'last_error_class', 'last_error_stage', 'outcome', 'reason',
				 'updated_at', 'finished_at', 'result', 'claimed_at', 'invoked_at', 'progress',
				 'progress_at', 'await_on_timeout']
$$;

CREATE FUNCTION storage.make_layout(s text, split boolean, noledger boolean, done boolean DEFAULT false,
									reorder boolean DEFAULT false, ff integer DEFAULT 100)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	hot text;
	ix record;
BEGIN
	EXECUTE format('CREATE SCHEMA %I', s);
	IF s LIKE 'sim\_ready\_%' THEN
		SELECT string_agg(format('%I', a.attname), ', '
						  ORDER BY a.attname = ANY (storage.moving_cols()), a.attnum) INTO hot
		FROM pg_attribute a
		WHERE a.attrelid = 'ntask.task'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
		EXECUTE format('CREATE TABLE %I.task AS SELECT %s FROM ntask.task WITH NO DATA', s, hot);
		EXECUTE format('ALTER TABLE %I.task ADD PRIMARY KEY (task_id), ADD UNIQUE (queue, task_key)', s);
		EXECUTE format('CREATE TABLE %I.ready (task_id bigint NOT NULL, queue text COLLATE "C" NOT NULL, '
					   'priority integer NOT NULL, due_at timestamptz NOT NULL)', s);
		EXECUTE format('CREATE INDEX ON %I.ready (queue, priority DESC, due_at, task_id)', s);
		IF s <> 'sim_ready_table' THEN
			EXECUTE format('ALTER TABLE %I.ready ADD COLUMN deadline timestamptz', s);
			EXECUTE format('CREATE INDEX ON %I.ready (deadline) WHERE deadline IS NOT NULL', s);
		END IF;
		IF s = 'sim_ready_full' THEN
			EXECUTE format('CREATE TABLE %I.finished (task_id bigint NOT NULL, queue text COLLATE "C" NOT NULL, '
						   'finished_at timestamptz NOT NULL)', s);
			EXECUTE format('CREATE INDEX ON %I.finished (queue, finished_at)', s);
		END IF;
	ELSIF reorder AND NOT split THEN
		SELECT string_agg(format('%I', a.attname), ', '
						  ORDER BY a.attname = ANY (storage.moving_cols()), a.attnum) INTO hot
		FROM pg_attribute a
		WHERE a.attrelid = 'ntask.task'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
		EXECUTE format('CREATE TABLE %I.task AS SELECT %s FROM ntask.task WITH NO DATA', s, hot);
		EXECUTE format('ALTER TABLE %I.task ADD PRIMARY KEY (task_id), ADD UNIQUE (queue, task_key)', s);
		FOR ix IN SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i
				  WHERE i.indrelid = 'ntask.task'::regclass AND NOT i.indisunique
		LOOP
			EXECUTE replace(regexp_replace(ix.def, 'INDEX (\S+) ON', 'INDEX ON'),
							'ON ntask.task', format('ON %I.task', s));
		END LOOP;
	ELSIF NOT split THEN
		EXECUTE format('CREATE TABLE %I.task (LIKE ntask.task INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)', s);
	ELSE
		SELECT string_agg(format('%I', a.attname), ', '
						  ORDER BY reorder AND a.attname = ANY (storage.moving_cols()), a.attnum) INTO hot
		FROM pg_attribute a
		WHERE a.attrelid = 'ntask.task'::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND a.attname <> ALL (storage.body_cols());
		EXECUTE format('CREATE TABLE %I.task AS SELECT %s FROM ntask.task WITH NO DATA', s, hot);
		EXECUTE format('ALTER TABLE %I.task ADD PRIMARY KEY (task_id)', s);
		-- an index on a column of the body (task_waiting_idx: created_at)
		-- is left out: it holds only waiting tasks, which no workload has
		FOR ix IN SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i
				  WHERE i.indrelid = 'ntask.task'::regclass AND NOT i.indisunique
					AND NOT EXISTS (SELECT 1 FROM unnest(storage.body_cols()) c
									WHERE pg_get_indexdef(i.indexrelid) ~ ('\m' || c || '\M'))
		LOOP
			EXECUTE replace(regexp_replace(ix.def, 'INDEX (\S+) ON', 'INDEX ON'),
							'ON ntask.task', format('ON %I.task', s));
		END LOOP;
		EXECUTE format('CREATE TABLE %I.task_body AS SELECT task_id, queue, %s FROM ntask.task WITH NO DATA',
					   s, array_to_string(storage.body_cols(), ', '));
		EXECUTE format('ALTER TABLE %I.task_body ADD PRIMARY KEY (task_id), ADD UNIQUE (queue, task_key)', s);
	END IF;
	IF noledger THEN
		EXECUTE format('ALTER TABLE %I.task ADD COLUMN worker text', s);
	END IF;
	IF done THEN
		EXECUTE format('CREATE TABLE %1$I.task_done AS SELECT * FROM %1$I.task WITH NO DATA', s);
		EXECUTE format('ALTER TABLE %I.task_done ADD PRIMARY KEY (task_id)', s);
		EXECUTE format('CREATE INDEX ON %I.task_done (queue, finished_at)', s);
	END IF;
	EXECUTE format('CREATE TABLE %I.attempt (LIKE ntask.attempt INCLUDING DEFAULTS INCLUDING INDEXES)', s);
	IF ff < 100 THEN
		EXECUTE format('ALTER TABLE %I.task SET (fillfactor = %s)', s, ff);
	END IF;
END
$$;

SELECT storage.make_layout('sim_wide', false, false);
SELECT storage.make_layout('sim_wide_noledger', false, true);
SELECT storage.make_layout('sim_split', true, false);
SELECT storage.make_layout('sim_split_noledger', true, true);
SELECT storage.make_layout('sim_split_done', true, true, true);
-- the 1.1 layout with the moving columns last (a same-page update logs
-- only the bytes between the first and the last that changed), with and
-- without room on the page for the updates
SELECT storage.make_layout('sim_wide_reordered', false, false, false, true);
SELECT storage.make_layout('sim_wide_reordered_ff80', false, false, false, true, 80);
-- all of it: no ledger row for a first success, the body apart, the
-- finished tasks apart, the moving columns last, room on the page
SELECT storage.make_layout('sim_split_done_reordered_ff80', true, true, true, true, 80);
SELECT storage.make_layout('sim_ready_table', false, true, false, true, 80);
SELECT storage.make_layout('sim_ready_deadline', false, true, false, true, 80);
SELECT storage.make_layout('sim_ready_full', false, true, false, true, 80);
-- lever (b): task_due_idx without the leased rows (takeovers found through
-- task_lease_idx instead), so the claim writes no entry in it
SELECT storage.make_layout('sim_wide_due_unleased', false, false);
DROP INDEX sim_wide_due_unleased.task_queue_priority_due_at_task_id_idx;
CREATE INDEX ON sim_wide_due_unleased.task (queue, priority DESC, due_at, task_id)
	WHERE due_at IS NOT NULL AND state <> 'leased';

-- the statements of layout s, as PREPAREs for one session: enq(task_id)
-- copies the ready task of ntask.task (ON CONFLICT DO NOTHING, as
-- ntask_enqueue), claim and fin(task_id, token) as in bench/storage.sh
CREATE FUNCTION storage.layout_sql(s text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	split boolean := to_regclass(s || '.task_body') IS NOT NULL;
	noledger boolean := EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = (s || '.task')::regclass
								AND attname = 'worker');
	done boolean := to_regclass(s || '.task_done') IS NOT NULL;
	ready boolean := to_regclass(s || '.ready') IS NOT NULL;
	rdl boolean := EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(s || '.ready')
						   AND attname = 'deadline');
	fint boolean := to_regclass(s || '.finished') IS NOT NULL;
	hot text;
	enq text;
	fin text;
BEGIN
	IF split THEN
		SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) INTO hot
		FROM pg_attribute a
		WHERE a.attrelid = (s || '.task')::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND a.attname <> 'worker';
		enq := format('PREPARE enq(bigint) AS WITH b AS (INSERT INTO %1$I.task_body '
					  'SELECT task_id, queue, %2$s FROM ntask.task WHERE task_id = $1 '
					  'ON CONFLICT (queue, task_key) DO NOTHING RETURNING task_id) '
					  'INSERT INTO %1$I.task (%3$s) SELECT %3$s FROM ntask.task '
					  'WHERE task_id = (SELECT task_id FROM b);',
					  s, array_to_string(storage.body_cols(), ', '), hot);
	ELSE
		SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) INTO hot
		FROM pg_attribute a
		WHERE a.attrelid = (s || '.task')::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND a.attname <> 'worker';
		enq := format('PREPARE enq(bigint) AS INSERT INTO %1$I.task (%2$s) %3$s '
					  'SELECT %2$s FROM ntask.task WHERE task_id = $1 '
					  'ON CONFLICT (queue, task_key) DO NOTHING;', s, hot,
					  CASE WHEN EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = (s || '.task')::regclass
										AND attidentity <> '') THEN 'OVERRIDING SYSTEM VALUE' ELSE '' END);
	END IF;
	-- the finish: TR_APPLY_UPDATE's columns, then the ledger row (or, a
	-- first attempt that succeeded without a ledger row, its worker kept)
	fin := format('UPDATE %I.task t SET state = ''succeeded'', run_at = t.run_at, due_at = NULL, '
				  'lease_owner = NULL, lease_until = NULL, last_error_class = t.last_error_class, '
				  'last_error_stage = t.last_error_stage, outcome = NULL, result = NULL, reason = NULL, '
				  'unknown_attempts = t.unknown_attempts, finished_at = now(), updated_at = now()%s '
				  'WHERE t.task_id = $1 AND t.token = $2 AND t.state = ''leased'' '
				  'RETURNING t.task_id, t.shard, t.token, t.attempts, t.claimed_at, t.invoked_at, t.progress',
				  s, CASE WHEN noledger THEN ', worker = t.lease_owner' ELSE '' END);
	IF done THEN
		-- the moving row leaves: the done table gets it as the finish leaves it
		fin := format('PREPARE fin(bigint, bigint) AS WITH d AS (DELETE FROM %1$I.task t '
					  'WHERE t.task_id = $1 AND t.token = $2 AND t.state = ''leased'' RETURNING t.*) '
					  'INSERT INTO %1$I.task_done (%2$s, worker) SELECT %3$s, d.lease_owner FROM d;',
					  s, hot,
					  (SELECT string_agg(CASE a.attname
							WHEN 'state' THEN '''succeeded'''
							WHEN 'due_at' THEN 'NULL' WHEN 'lease_owner' THEN 'NULL'
							WHEN 'lease_until' THEN 'NULL' WHEN 'outcome' THEN 'NULL'
							WHEN 'result' THEN 'NULL' WHEN 'reason' THEN 'NULL'
							WHEN 'finished_at' THEN 'now()' WHEN 'updated_at' THEN 'now()'
							ELSE 'd.' || quote_ident(a.attname) END, ', ' ORDER BY a.attnum)
					   FROM pg_attribute a
					   WHERE a.attrelid = (s || '.task')::regclass AND a.attnum > 0
						 AND NOT a.attisdropped AND a.attname <> 'worker'));
	ELSIF noledger THEN
		fin := 'PREPARE fin(bigint, bigint) AS ' || fin || ';';
	ELSE
		fin := format('PREPARE fin(bigint, bigint) AS WITH u AS (%s) INSERT INTO %I.attempt (task_id, shard, '
					  'token, attempt, worker, claimed_at, invoked_at, ended_at, result, requested, '
					  'error_class, error_stage, outcome_known, outcome, retry_at, detail, progress) '
					  'SELECT task_id, shard, token, attempts, ''w1'', claimed_at, invoked_at, now(), '
					  '''succeeded'', ''succeeded'', NULL, NULL, true, NULL, NULL, NULL, progress FROM u;',
					  fin, s);
	END IF;
	IF ready THEN
		RETURN format(
			'PREPARE enq(bigint) AS WITH t AS (INSERT INTO %1$I.task (%2$s) SELECT %2$s FROM ntask.task '
			'WHERE task_id = $1 ON CONFLICT (queue, task_key) DO NOTHING RETURNING task_id, queue, priority, due_at, deadline) '
			'INSERT INTO %1$I.ready (task_id, queue, priority, due_at%3$s) SELECT task_id, queue, priority, due_at%3$s FROM t;',
			s, hot, CASE WHEN rdl THEN ', deadline' ELSE '' END)
			|| E'\n' || format(
			'PREPARE claim AS WITH p AS (DELETE FROM %1$I.ready r WHERE r.ctid = (SELECT x.ctid FROM %1$I.ready x '
			'WHERE x.queue = ''bench'' AND x.priority = 0 AND x.due_at <= now() '
			'ORDER BY x.queue, x.priority DESC, x.due_at, x.task_id LIMIT 1 FOR UPDATE SKIP LOCKED) '
			'RETURNING r.task_id), '
			'u AS (UPDATE %1$I.task t SET state = ''leased'', '
			'token = t.token + 1, attempts = t.attempts + 1, lease_owner = ''w1'', '
			'lease_until = now() + interval ''30 seconds'', due_at = now() + interval ''30 seconds'', '
			'finished_at = NULL, unknown_attempts = t.unknown_attempts, '
			'last_error_class = t.last_error_class, last_error_stage = t.last_error_stage, '
			'claimed_at = now(), invoked_at = NULL, progress = NULL, progress_at = NULL, '
			'await_on_timeout = NULL, updated_at = now() '
			'WHERE t.task_id = (SELECT task_id FROM p) RETURNING t.task_id, t.token, t.queue, t.priority, t.due_at), '
			'i AS (INSERT INTO %1$I.ready (task_id, queue, priority, due_at) SELECT task_id, queue, priority, due_at FROM u) '
			'SELECT coalesce(max(u.task_id), 0) AS id, coalesce(max(u.token), 0) AS token FROM u;', s)
			|| E'\n' || format(
			'PREPARE fin(bigint, bigint) AS WITH u AS (UPDATE %1$I.task t SET state = ''succeeded'', '
			'run_at = t.run_at, due_at = NULL, '
			'lease_owner = NULL, lease_until = NULL, last_error_class = t.last_error_class, '
			'last_error_stage = t.last_error_stage, outcome = NULL, result = NULL, reason = NULL, '
			'unknown_attempts = t.unknown_attempts, finished_at = now(), updated_at = now(), '
			'worker = t.lease_owner FROM %1$I.task o '
			'WHERE t.task_id = $1 AND t.token = $2 AND t.state = ''leased'' AND o.task_id = $1 '
			'RETURNING t.task_id, t.queue, t.priority, o.due_at, t.finished_at)%2$s '
			'DELETE FROM %1$I.ready r USING u WHERE r.queue = u.queue AND r.priority = u.priority '
			'AND r.due_at = u.due_at AND r.task_id = u.task_id;', s,
			CASE WHEN fint THEN format(', f AS (INSERT INTO %I.finished SELECT task_id, queue, finished_at FROM u)', s)
				 ELSE '' END);
	END IF;
	RETURN enq || E'\n' || format(
		'PREPARE claim AS WITH u AS (UPDATE %1$I.task t SET state = ''leased'', '
		'token = t.token + 1, attempts = t.attempts + 1, lease_owner = ''w1'', '
		'lease_until = now() + interval ''30 seconds'', due_at = now() + interval ''30 seconds'', '
		'finished_at = NULL, unknown_attempts = t.unknown_attempts, '
		'last_error_class = t.last_error_class, last_error_stage = t.last_error_stage, '
		'claimed_at = now(), invoked_at = NULL, progress = NULL, progress_at = NULL, '
		'await_on_timeout = NULL, updated_at = now() '
		'WHERE t.task_id = (SELECT x.task_id FROM %1$I.task x WHERE x.queue = ''bench'' '
		'AND x.priority = 0 AND x.due_at IS NOT NULL AND x.lease_until IS NULL AND x.due_at <= now() %3$s'
		'ORDER BY x.queue, x.priority DESC, x.due_at, x.task_id LIMIT 1 FOR UPDATE SKIP LOCKED) '
		'RETURNING t.task_id, t.token) '
		'SELECT coalesce(max(u.task_id), 0) AS id, coalesce(max(u.token), 0) AS token FROM u%2$s;',
		s, CASE WHEN split THEN format(' LEFT JOIN %I.task_body b ON b.task_id = u.task_id', s) ELSE '' END,
		CASE WHEN s = 'sim_wide_due_unleased' THEN 'AND x.state <> ''leased'' ' ELSE '' END)
		|| E'\n' || fin;
END
$$;
