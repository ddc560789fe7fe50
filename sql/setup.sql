-- setup: install ntask and check the catalog it creates
CREATE EXTENSION ntask;
SELECT extversion FROM pg_extension WHERE extname = 'ntask';
SHOW ntask.backoff_jitter;
-- the prefix is reserved (MarkGUCPrefixReserved): a misspelt setting is
-- refused, not kept as a placeholder
SET ntask.no_such_setting = 1;
-- every object the extension creates (18 also records the row types of
-- its tables and views, and their arrays, as members: they come with their
-- relation, so the list leaves them out on every version)
SELECT pg_describe_object(classid, objid, 0) AS object
FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
  AND deptype = 'e'
  AND NOT (classid = 'pg_type'::regclass AND EXISTS (
        SELECT FROM pg_type t JOIN pg_class c ON c.oid = t.typrelid
        WHERE c.relkind <> 'c'
          AND objid IN (t.oid, t.typarray)))
ORDER BY 1;
-- every function and view is documented
SELECT p.proname FROM pg_proc p
JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
 AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ntask')
WHERE obj_description(p.oid, 'pg_proc') IS NULL;
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = 'ntask'::regnamespace AND c.relkind IN ('r', 'v')
  AND obj_description(c.oid, 'pg_class') IS NULL;
-- the saved plans survive DROP EXTENSION / CREATE EXTENSION in one session
SELECT queue FROM ntask_queue_set('tmp');
SELECT created FROM ntask_enqueue('tmp', 'a');
SELECT token FROM ntask_claim('tmp', 'W1');
DROP EXTENSION ntask;
CREATE EXTENSION ntask;
SELECT queue FROM ntask_queue_set('tmp');
SELECT created FROM ntask_enqueue('tmp', 'a');
SELECT task_key, token FROM ntask_claim('tmp', 'W1');
DROP EXTENSION ntask;
CREATE EXTENSION ntask;
-- queue names, task keys and partition keys compare as bytes (COLLATE "C")
SELECT attrelid::regclass AS rel, attname, attcollation::regcollation AS collation
FROM pg_attribute
WHERE attrelid IN ('ntask.queue'::regclass, 'ntask.task'::regclass, 'ntask.schedule'::regclass,
				   'ntask.audit'::regclass)
  AND attname IN ('queue', 'task_key', 'partition_key')
ORDER BY 1, 2;
-- tests name a task's token by its place: tok(task, n) is the task's n-th
-- token (its n-th lease), since tokens come from one sequence per node
-- (docs/design.md "Tokens: one sequence, an attempt's name"); for an n the
-- task has not reached, a token above its latest, never issued for it
CREATE FUNCTION public.tok(task bigint, n integer) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
	SELECT COALESCE(
		(SELECT a.token FROM ntask.attempt_all a WHERE a.task_id = task
		 ORDER BY a.token OFFSET n - 1 LIMIT 1),
		(SELECT COALESCE(max(a.token), 0) FROM ntask.attempt_all a WHERE a.task_id = task)
		+ n - (SELECT count(*) FROM ntask.attempt_all a WHERE a.task_id = task))
$$;
GRANT EXECUTE ON FUNCTION public.tok(bigint, integer) TO PUBLIC;
