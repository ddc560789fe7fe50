-- http_target: a queue's http target is checked by ntask_queue_set
-- (docs/worker.md "Dispatch"); this cluster allows push.example,
-- allowed.example and 127.0.0.1 (test/ntask.conf): a target at any other
-- host is refused (22023), naming the host
\set VERBOSITY terse
SHOW ntask.http_allowed_hosts;
SELECT queue, target FROM ntask_queue_set('ht',
	target => '{"type": "http", "url": "http://127.0.0.1:9/send"}');
SELECT queue, target FROM ntask_queue_set('ht2', target => '{"type": "http",
	"url": "https://push.example/v1/send", "method": "PUT", "timeout_ms": 2500,
	"headers": {"Authorization": "Bearer x", "Content-Type": "application/json; charset=utf-8"},
	"reconcile_url": "https://push.example/v1/status", "max_inflight": 8}');
SELECT (target->>'timeout_ms')::int AS timeout_ms FROM ntask.queue WHERE queue = 'ht2';
-- IPv6 literal
SELECT queue FROM ntask_queue_set('ht3', target => '{"type": "http", "url": "http://[::1]:8080/x"}');
-- a target of type external belongs to your own workers and is stored as given
SELECT queue, target FROM ntask_queue_set('ext', target => '{"type": "external", "anything": [1, 2]}');
-- any other type, another spelling or none is refused: nobody would take the tasks
SELECT * FROM ntask_queue_set('badtype', target => '{"type": "HTTP", "url": "http://127.0.0.1:9/send"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('badtype', target => '{"url": "http://127.0.0.1:9/send"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('badtype', target => '{"type": "sql"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('badtype', target => '{"type": 1}');
\echo :SQLSTATE
SELECT count(*) AS created FROM ntask.queue WHERE queue = 'badtype';
-- every problem is named, SQLSTATE 22023
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "ftp://h/x"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://user:pw@h/x"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h:0/x"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h:65536/x"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h x/"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": 42}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http:///x"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "method": "GET"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "timeout_ms": 0}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "timeout_ms": 600001}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "timeout_ms": "5"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "max_inflight": 1001}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": ["a"]}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": {"X-A": "a\r\nX-Injected: 1"}}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": {"X A": "a"}}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": {"X-A": 1}}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": {"Idempotency-Key": "mine"}}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": {"ntask-attempt": "9"}}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "headers": {"Host": "evil"}}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "reconcile_url": "gopher://h/"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => '{"type": "http", "url": "http://h/", "retries": 3}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('bad', target => ('{"type": "http", "url": "http://h/' || repeat('a', 2100) || '"}')::jsonb);
\echo :SQLSTATE
-- nothing was stored for the refused targets
SELECT count(*) FROM ntask.queue WHERE queue = 'bad';

-- URLs are parsed by libcurl's URL API, the parser the transfer uses: the
-- host named in each refusal is the host ntask checks against the
-- allowlist and curl would connect to.  Where a naive parser and libcurl
-- disagree:
SET client_min_messages = warning;
CREATE FUNCTION pg_temp.try_url(u text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	msg text;
BEGIN
	PERFORM * FROM ntask_queue_set('urlq', target => jsonb_build_object('type', 'http', 'url', u));
	RETURN 'accepted';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
	RETURN SQLSTATE || ' ' || msg;
END $$;
SELECT u AS url, pg_temp.try_url(u) AS result FROM (VALUES
	('http://allowed.example@evil.example/'),
	('http://evil.example\@allowed.example/'),
	('http://allowed.example.evil.example/'),
	('http://[::1]/'),
	('http://2130706433/'),
	('http://0x7f.1/'),
	('HTTP://ALLOWED.EXAMPLE./'),
	('http://%61llowed.example/'),
	('http://[fe80::1%25eth0]/'),
	('http://allowed.example\evil/'),
	('http://xn--nxasmq6b.example/'),
	('http://ÄÖ.example/'),
	('http://allowed.example#@evil.example/'),
	('http://h:0/'),
	('http:///allowed.example'),
	('gopher://allowed.example/')) v(u);
RESET client_min_messages;

-- issue 30.7: a host the allowlist does not name is refused, not stored
-- with a WARNING (its tasks would all go to repair within a tick); the
-- reconcile_url's host too.  Nothing is stored.
SELECT * FROM ntask_queue_set('ht4', target => '{"type": "http", "url": "https://not-listed.example/x"}');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('ht4', target => '{"type": "http", "url": "https://push.example/x",
	"reconcile_url": "https://not-listed.example/status"}');
\echo :SQLSTATE
SELECT count(*) AS ht4_created FROM ntask.queue WHERE queue = 'ht4';
SELECT target->>'url' AS ht2_kept FROM ntask.queue WHERE queue = 'ht2';
-- a target is removed with JSON null or {}; SQL NULL keeps it
SELECT queue, target FROM ntask_queue_set('ht2', target => 'null');
SELECT queue, target FROM ntask_queue_set('ext', target => '{}');
SELECT queue, target FROM ntask_queue_set('ht', max_attempts => 4);
SELECT queue, target IS NULL AS removed FROM ntask_queue_set('ht', target => 'null');
SELECT queue, target FROM ntask_queue_set('ht2', target => '{"type": "external"}');
-- other non-objects are still refused
SELECT * FROM ntask_queue_set('ht2', target => '[]');
\echo :SQLSTATE
SELECT * FROM ntask_queue_set('ht2', target => '"none"');
\echo :SQLSTATE
SELECT target FROM ntask.queue WHERE queue = 'ht2';
-- issue 31: ntask.http_allowed_hosts is parsed where it is set; an entry
-- with "/" that is not an address range (it could never match) is refused
-- (a sighup setting: SET is refused anyway, ALTER SYSTEM checks the value)
\set VERBOSITY default
ALTER SYSTEM SET ntask.http_allowed_hosts = 'push.example, 10.0.0.0/33';
ALTER SYSTEM SET ntask.http_allowed_hosts = '10.0.0/8, push.example';
ALTER SYSTEM SET ntask.http_allowed_hosts = '[fd00::]/8';
ALTER SYSTEM SET ntask.http_allowed_hosts = 'push.example/x';
\set VERBOSITY terse
-- host names, '*', addresses, bracketed ones, ranges, blanks and empty entries pass
ALTER SYSTEM SET ntask.http_allowed_hosts = ' push.example, , *, 127.0.0.1, [::1], 10.0.0.0/8, [fd00::/8], ';
ALTER SYSTEM RESET ntask.http_allowed_hosts;
SHOW ntask.http_allowed_hosts;
