-- bench/storage.sql: the measuring side of bench/storage.sh (issue 48),
-- loaded into its throwaway cluster after ntask, pg_walinspect and the
-- plain queue (bench/plain_queue.sh).  Nothing here runs inside a
-- measured range but storage.cpu_ticks() and pg_current_wal_insert_lsn(),
-- which write no WAL.
CREATE SCHEMA storage;

-- the issue's plain queue with a token (bench/storage.sh "plain")
CREATE SCHEMA pq;
CREATE TABLE pq.job (
	id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	payload		jsonb NOT NULL,
	state		text NOT NULL DEFAULT 'ready',
	run_at		timestamptz NOT NULL DEFAULT now(),
	token		bigint,
	lease_until	timestamptz
);
CREATE INDEX job_ready_idx ON pq.job (run_at, id) WHERE state = 'ready';
CREATE SEQUENCE pq.token_seq;

-- the clock ticks per second of /proc (getconf CLK_TCK) and the tasks per
-- workload, set by the script
CREATE TABLE storage.conf (clk_tck integer NOT NULL, tasks integer NOT NULL);

-- one row per measured loop
CREATE TABLE storage.run (
	sys		text NOT NULL,		-- plain, plainkey, ntask, pgmq
	wl		text NOT NULL,		-- enqueue, drain, drain_tc (and enqueue_*, unmeasured preloads)
	rep		integer NOT NULL,	-- the round (STORAGE_REPEAT)
	n		integer NOT NULL,	-- tasks
	lsn0	pg_lsn NOT NULL,
	lsn1	pg_lsn NOT NULL,
	cpu		bigint NOT NULL,	-- the backend's utime + stime, clock ticks
	PRIMARY KEY (sys, wl, rep)
);

-- relation bytes of a system at a mark (empty, ready, kept)
CREATE TABLE storage.size (
	sys		text NOT NULL,
	mark	text NOT NULL,
	bytes	bigint NOT NULL,
	PRIMARY KEY (sys, mark)
);

-- the same by relation (a table, each index, the TOAST table and index)
CREATE TABLE storage.size_rel (
	sys		text NOT NULL,
	mark	text NOT NULL,
	rel		text NOT NULL,
	bytes	bigint NOT NULL,
	PRIMARY KEY (sys, mark, rel)
);

-- the WAL of a loop by relation and record type
CREATE TABLE storage.wal (
	sys		text NOT NULL,
	wl		text NOT NULL,
	rel		text NOT NULL,
	rec		text NOT NULL,
	records	bigint NOT NULL,
	bytes	bigint NOT NULL
);

-- the backend's own CPU time so far: utime + stime of /proc/self/stat
-- (fields 14 and 15; counted after the command name, which may hold
-- spaces, as fields 12 and 13 of what follows its closing parenthesis)
CREATE FUNCTION storage.cpu_ticks() RETURNS bigint LANGUAGE sql AS $$
	SELECT f[12]::bigint + f[13]::bigint
	FROM (SELECT string_to_array(substr(s, strpos(s, ') ') + 2), ' ') AS f
		  FROM pg_read_file('/proc/self/stat') s) x
$$;

-- the tables a system writes: the plain queue's one; ntask's task tables
-- (every table of schema ntask with a task_id column: the task row, the
-- ledger, receipts, dependencies, and any table a new layout adds)
CREATE FUNCTION storage.tables(sys text) RETURNS regclass[] LANGUAGE sql AS $$
	SELECT CASE sys WHEN 'plain' THEN ARRAY['pq.job'::regclass]
		WHEN 'plainkey' THEN ARRAY['bq.job'::regclass]
		-- pgmq's queue table and its archive (pgmq.create('bench'))
		WHEN 'pgmq' THEN ARRAY[to_regclass('pgmq.q_bench'), to_regclass('pgmq.a_bench')]
		WHEN 'ntask' THEN ARRAY(SELECT c.oid::regclass FROM pg_class c
				   WHERE c.relnamespace = 'ntask'::regnamespace AND c.relkind = 'r'
					 AND EXISTS (SELECT 1 FROM pg_attribute a
								 WHERE a.attrelid = c.oid AND a.attname = 'task_id'
								   AND NOT a.attisdropped)
				   ORDER BY c.oid)
		-- a simulated layout (bench/storage_layout.sql): its schema's tables
		ELSE ARRAY(SELECT c.oid::regclass FROM pg_class c
				   WHERE c.relnamespace = sys::regnamespace AND c.relkind = 'r' ORDER BY c.oid)
	END
$$;

CREATE FUNCTION storage.reset(sys text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE 'TRUNCATE ' || array_to_string(storage.tables(sys)::text[], ', ') || ' RESTART IDENTITY';
	IF sys = 'plain' THEN
		ALTER SEQUENCE pq.token_seq RESTART;
	ELSIF sys = 'plainkey' THEN
		ALTER SEQUENCE bq.token_seq RESTART;
	END IF;
END
$$;

-- main-fork bytes of a table, its indexes, its TOAST table and index (no
-- free space or visibility map: those are VACUUM's, not the rows')
CREATE FUNCTION storage.rel_bytes(t regclass) RETURNS bigint LANGUAGE sql AS $$
	SELECT pg_relation_size(t)
		 + coalesce((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i
					 WHERE i.indrelid = t), 0)
		 + coalesce((SELECT pg_relation_size(c.reltoastrelid)
						  + coalesce((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i
									  WHERE i.indrelid = c.reltoastrelid), 0)
					 FROM pg_class c WHERE c.oid = t AND c.reltoastrelid <> 0), 0)
$$;

CREATE FUNCTION storage.size_mark(sys text, mark text) RETURNS void LANGUAGE sql AS $$
	INSERT INTO storage.size
	SELECT sys, mark, sum(storage.rel_bytes(t)) FROM unnest(storage.tables(sys)) t
	ON CONFLICT (sys, mark) DO UPDATE SET bytes = excluded.bytes;
	INSERT INTO storage.size_rel
	SELECT sys, mark, r::regclass::text, pg_relation_size(r)
	FROM unnest(storage.tables(sys)) t,
		 LATERAL (SELECT t::oid UNION ALL SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = t
				  UNION ALL SELECT c.reltoastrelid FROM pg_class c WHERE c.oid = t AND c.reltoastrelid <> 0
				  UNION ALL SELECT i.indexrelid FROM pg_class c JOIN pg_index i ON i.indrelid = c.reltoastrelid
				  WHERE c.oid = t) x(r)
	ON CONFLICT (sys, mark, rel) DO UPDATE SET bytes = excluded.bytes
$$;

-- every task of the system finished (a drain that drained nothing would
-- measure nothing)
CREATE FUNCTION storage.check_done(sys text, n integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	done bigint;
BEGIN
	IF sys = 'plain' THEN
		SELECT count(*) INTO done FROM pq.job WHERE state = 'succeeded';
	ELSIF sys = 'plainkey' THEN
		SELECT count(*) INTO done FROM bq.job WHERE state = 'succeeded';
	ELSIF sys = 'ntask' THEN
		SELECT count(*) INTO done FROM ntask.task WHERE state = 'succeeded';
	ELSIF sys = 'pgmq' THEN
		-- pgmq deletes what it finishes: n messages sent (the identity
		-- restarts at each reset), none left
		EXECUTE format('SELECT CASE WHEN EXISTS (SELECT 1 FROM pgmq.q_bench) THEN -1
							ELSE (SELECT last_value FROM %s) END',
					   pg_get_serial_sequence('pgmq.q_bench', 'msg_id'))
			INTO done;
	ELSIF to_regclass(sys || '.task_done') IS NOT NULL THEN
		EXECUTE format('SELECT count(*) FROM %I.task_done WHERE state = $1', sys) INTO done USING 'succeeded';
	ELSE
		EXECUTE format('SELECT count(*) FROM %I.task WHERE state = $1', sys) INTO done USING 'succeeded';
	END IF;
	IF done <> n THEN
		RAISE EXCEPTION 'bench/storage: % finished % tasks of %', sys, done, n;
	END IF;
END
$$;

-- the WAL records of a loop's LSN range, each counted against the relation
-- of its first block reference (none: commits, running xacts...), plus the
-- bytes of the range that no record's length holds (records are 8-byte
-- aligned; each 8 kB WAL page has a header)
CREATE FUNCTION storage.breakdown(s text, w text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	r storage.run;
BEGIN
	SELECT * INTO STRICT r FROM storage.run WHERE sys = s AND wl = w AND rep = 1;
	IF pg_current_wal_flush_lsn() < r.lsn1 THEN
		PERFORM pg_switch_wal();		-- after the range: flushes it
	END IF;
	INSERT INTO storage.wal
	SELECT s, w,
		   CASE WHEN m IS NULL THEN '-'
				ELSE coalesce(pg_filenode_relation(
						CASE WHEN m[1]::oid = (SELECT dattablespace FROM pg_database
											   WHERE datname = current_database())
							 THEN 0 ELSE m[1]::oid END, m[3]::oid)::text,
						'filenode ' || m[3]) END,
		   x.resource_manager || ' ' || x.record_type, count(*), sum(x.record_length)
	FROM pg_get_wal_records_info(r.lsn0, r.lsn1) x
		 CROSS JOIN LATERAL (SELECT regexp_match(x.block_ref, 'rel (\d+)/(\d+)/(\d+)') AS m) b
	GROUP BY 3, 4;
	INSERT INTO storage.wal
	SELECT s, w, '-', '(alignment, page headers)', 0,
		   pg_wal_lsn_diff(r.lsn1, r.lsn0) - coalesce(sum(bytes), 0)
	FROM storage.wal WHERE sys = s AND wl = w;
END
$$;

CREATE FUNCTION storage.wal_per_task(s text, w text) RETURNS numeric LANGUAGE sql AS $$
	SELECT round(pg_wal_lsn_diff(lsn1, lsn0) / n) FROM storage.run WHERE sys = s AND wl = w AND rep = 1
$$;

CREATE FUNCTION storage.cpu_us_per_task(s text, w text) RETURNS numeric LANGUAGE sql AS $$
	SELECT round(min(cpu * 1e6 / (SELECT clk_tck FROM storage.conf) / n), 1)
	FROM storage.run WHERE sys = s AND wl = w
$$;

CREATE FUNCTION storage.bytes_per_task(s text, k text) RETURNS numeric LANGUAGE sql AS $$
	SELECT round((m.bytes - e.bytes)::numeric / (SELECT tasks FROM storage.conf))
	FROM storage.size m, storage.size e
	WHERE m.sys = s AND m.mark = k AND e.sys = s AND e.mark = 'empty'
$$;

-- one figure: kind wal, wal2 (enqueue + drain), size, cpu
CREATE FUNCTION storage.metric(kind text, s text, w text) RETURNS numeric LANGUAGE sql AS $$
	SELECT CASE kind
		WHEN 'wal' THEN storage.wal_per_task(s, w)
		WHEN 'wal2' THEN storage.wal_per_task(s, 'enqueue') + storage.wal_per_task(s, 'drain')
		WHEN 'size' THEN storage.bytes_per_task(s, w)
		WHEN 'cpu' THEN storage.cpu_us_per_task(s, w)
	END
$$;

-- the table: plain, plain+key, ntask, the ratios, and the issue's 1.0
-- figures (ntask / plain)
CREATE FUNCTION storage.report()
RETURNS TABLE (per_task text, plain numeric, "plain+key" numeric, pgmq numeric, ntask numeric,
			   "ntask/plain" numeric, "ntask/plain+key" numeric, "ntask/pgmq" numeric,
			   "1.0 (issue 48)" text)
LANGUAGE sql AS $$
	SELECT m, p, k, q, n, round(n / nullif(p, 0), 2), round(n / nullif(k, 0), 2),
		   round(n / nullif(q, 0), 2), i
	FROM (SELECT o, m, storage.metric(kind, 'plain', w1) AS p,
				 storage.metric(kind, 'plainkey', w1) AS k,
				 storage.metric(kind, 'pgmq', w1) AS q,
				 storage.metric(kind, 'ntask', w3) AS n, i
		  FROM (VALUES
			(1, 'WAL per enqueue, B', 'wal', 'enqueue', 'enqueue', '682 / 361'),
			(2, 'WAL per drain (claim 1, commit, finish, commit), B', 'wal', 'drain', 'drain', '1357 / 616'),
			(3, 'WAL per drain, ntask_transition_and_claim, B', 'wal', 'drain', 'drain_tc', ''),
			(3.5, 'WAL per drain with ntask_invoked (3 commits), B', 'wal', 'drain', 'drain_invoked', ''),
			(4, 'WAL per task, enqueue + drain, B', 'wal2', '', '', '2039 / 977'),
			(5, 'table + index bytes per ready task', 'size', 'ready', 'ready', '522 / 221'),
			(6, 'bytes per finished task kept (after VACUUM)', 'size', 'kept', 'kept', '819 / 249'),
			(7, 'backend CPU per enqueue, us', 'cpu', 'enqueue', 'enqueue', ''),
			(8, 'backend CPU per drained task, us', 'cpu', 'drain', 'drain', ''),
			(9, 'backend CPU per task, ntask_transition_and_claim, us', 'cpu', 'drain', 'drain_tc', '')
		  ) v(o, m, kind, w1, w3, i)
		 ) x
	ORDER BY o
$$;

-- the simulated layouts against the real ntask and the plain queue
CREATE FUNCTION storage.layout_report()
RETURNS TABLE (layout text, "WAL enqueue" numeric, "WAL drain" numeric, "WAL enq+drain" numeric,
			   "ready B" numeric, "kept B" numeric, "WAL vs sim_wide" numeric, "WAL vs plain" numeric,
			   "ready vs plain" numeric, "CPU enqueue us" numeric, "CPU drain us" numeric)
LANGUAGE sql AS $$
	SELECT s, e, d, e + d, r, k,
		   round((e + d) / nullif(storage.metric('wal2', 'sim_wide', ''), 0), 2),
		   round((e + d) / nullif(storage.metric('wal2', 'plain', ''), 0), 2),
		   round(r / nullif(storage.bytes_per_task('plain', 'ready'), 0), 2),
		   storage.cpu_us_per_task(s, 'enqueue'), storage.cpu_us_per_task(s, 'drain')
	FROM (SELECT s, storage.wal_per_task(s, 'enqueue') AS e, storage.wal_per_task(s, 'drain') AS d,
				 storage.bytes_per_task(s, 'ready') AS r, storage.bytes_per_task(s, 'kept') AS k, o
		  FROM (SELECT 'ntask', 0 UNION ALL
				SELECT nspname, oid::int FROM pg_namespace WHERE nspname LIKE 'sim\_%') n(s, o)) x
	ORDER BY o
$$;

-- ready and kept bytes by relation, per task (relations that grew)
CREATE FUNCTION storage.size_report()
RETURNS TABLE (sys text, relation text, "ready B/task" numeric, "kept B/task" numeric)
LANGUAGE sql AS $$
	SELECT e.sys, e.rel,
		   round((r.bytes - e.bytes)::numeric / c.tasks, 1),
		   round((k.bytes - e.bytes)::numeric / c.tasks, 1)
	FROM storage.size_rel e
		 JOIN storage.size_rel r ON r.sys = e.sys AND r.rel = e.rel AND r.mark = 'ready'
		 JOIN storage.size_rel k ON k.sys = e.sys AND k.rel = e.rel AND k.mark = 'kept'
		 CROSS JOIN storage.conf c
	WHERE e.mark = 'empty' AND (r.bytes > e.bytes OR k.bytes > e.bytes) AND e.sys NOT LIKE 'sim\_%' 
	ORDER BY e.sys DESC, k.bytes - e.bytes DESC
$$;

-- the WAL by relation and record type, per task, largest first
CREATE FUNCTION storage.breakdown_report()
RETURNS TABLE (sys text, workload text, relation text, record text, "records/task" numeric, "B/task" numeric)
LANGUAGE sql AS $$
	SELECT w.sys, w.wl, w.rel, w.rec, round(w.records::numeric / r.n, 2), round(w.bytes::numeric / r.n, 1)
	FROM storage.wal w JOIN storage.run r ON r.sys = w.sys AND r.wl = w.wl AND r.rep = 1
	WHERE w.wl NOT LIKE 'enqueue_%'
	  -- at least 1 B per task; of a simulated layout, 5 B
	  AND w.bytes >= r.n * CASE WHEN w.sys LIKE 'sim\_%' THEN 5 ELSE 1 END
	ORDER BY w.sys LIKE 'sim\_%', w.sys DESC, w.wl, w.bytes DESC
$$;
