# bench/plain_queue.sh: the plain-SQL queue that bench/run and bench/hot_path
# compare ntask with (sourced by both; bench/README.md "Baseline").
#
#   plain_queue_sql               its tables on stdout (bq.job, its token
#                                 sequence, and bq.attempt, the ledger of
#                                 the "baseline + ledger" system)
#   plain_queue_scripts DIR BATCH the pgbench drain scripts of both systems
#                                 in DIR: drain1_a.sql, drain1_l.sql (claim 1,
#                                 then finish), batch_a.sql, batch_l.sql
#                                 (claim BATCH, then finish them at once)

plain_queue_sql() {
	cat <<'EOF'
-- Baseline: the plain queue a careful team would write by hand.
CREATE SCHEMA bq;
CREATE TABLE bq.job (
	id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue		text NOT NULL,
	task_key	text NOT NULL,
	payload		jsonb NOT NULL,
	state		text NOT NULL DEFAULT 'ready',
	run_at		timestamptz NOT NULL DEFAULT now(),
	token		bigint,
	lease_until	timestamptz,
	claimed_at	timestamptz,	-- set by the ledger system's and the steady workload's claims only
	UNIQUE (queue, task_key)
);
CREATE INDEX job_ready_idx ON bq.job (queue, run_at, id) WHERE state = 'ready';
CREATE SEQUENCE bq.token_seq;
-- Baseline + ledger (system l, drains only): the same queue that also keeps
-- what ntask.attempt keeps at the least, one row per finished attempt,
-- written by the statement that finishes it.
CREATE TABLE bq.attempt (
	job_id		bigint NOT NULL,
	token		bigint NOT NULL,
	worker		text NOT NULL,
	claimed_at	timestamptz NOT NULL,
	ended_at	timestamptz NOT NULL,
	result		text NOT NULL,
	PRIMARY KEY (job_id, token)
);
EOF
}

plain_queue_scripts() {
	local dir=$1 batch=$2 stamp
	# claim n: one statement; the ledger system also stamps claimed_at
	claim() {
		echo "WITH c AS (UPDATE bq.job SET state = 'leased', token = nextval('bq.token_seq'), lease_until = now() + interval '30 seconds'$2 WHERE id IN (SELECT id FROM bq.job WHERE queue = 'bench' AND state = 'ready' AND run_at <= now() ORDER BY run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, token)"
	}
	stamp=", claimed_at = now()"
	# claim and complete: two statements, i.e. two transactions (autocommit)
	cat >"$dir/drain1_a.sql" <<EOF
$(claim 1 "") SELECT coalesce(max(id), 0) AS id, coalesce(max(token), 0) AS token FROM c \\gset
\\if :id > 0
UPDATE bq.job SET state = 'succeeded' WHERE id = :id AND token = :token;
\\endif
EOF
	cat >"$dir/drain1_l.sql" <<EOF
$(claim 1 "$stamp") SELECT coalesce(max(id), 0) AS id, coalesce(max(token), 0) AS token FROM c \\gset
\\if :id > 0
WITH f AS (UPDATE bq.job SET state = 'succeeded' WHERE id = :id AND token = :token RETURNING id, token, claimed_at) INSERT INTO bq.attempt SELECT id, token, 'w' || :client_id, claimed_at, now(), 'succeeded' FROM f;
\\endif
EOF
	cat >"$dir/batch_a.sql" <<EOF
$(claim "$batch" "") SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(token), '{}') AS toks, count(*) AS n FROM c \\gset
\\if :n > 0
UPDATE bq.job SET state = 'succeeded' WHERE (id, token) IN (SELECT * FROM unnest(:ids::bigint[], :toks::bigint[]));
\\endif
EOF
	cat >"$dir/batch_l.sql" <<EOF
$(claim "$batch" "$stamp") SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(token), '{}') AS toks, count(*) AS n FROM c \\gset
\\if :n > 0
WITH f AS (UPDATE bq.job SET state = 'succeeded' WHERE (id, token) IN (SELECT * FROM unnest(:ids::bigint[], :toks::bigint[])) RETURNING id, token, claimed_at) INSERT INTO bq.attempt SELECT id, token, 'w' || :client_id, claimed_at, now(), 'succeeded' FROM f;
\\endif
EOF
	unset -f claim
}
