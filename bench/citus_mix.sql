-- bench/citus_mix.sql: one producer call and one worker's claim and
-- transition per transaction, all shard-addressed (delegated), for
-- pgbench -r on the coordinator of a Citus cluster after
-- ntask_distribute(8) and ntask_queue_set('lat'), with ready tasks
-- preloaded (docs/scaling.md, "Numbers of issue 34"); :s is one of the
-- shard values 0 1 2 4 5 6 9 28 that 8 shards get from ntask_distribute
\set k random(1, 1000000000)
\set i random(0, 7)
\set s case when :i = 0 then 0 when :i = 1 then 1 when :i = 2 then 2 when :i = 3 then 4 when :i = 4 then 5 when :i = 5 then 6 when :i = 6 then 9 else 28 end
SELECT task_id FROM ntask_enqueue_on(ntask_shard('lat', 'm' || :k), 'lat', 'm' || :k, '{}');
SELECT coalesce(max(task_id), 0) AS task_id, coalesce(max(token), 0) AS token FROM ntask_claim_on(:s::smallint, 'lat', 'w') \gset
SELECT result FROM ntask_transition_on(ntask_shard(:task_id), :task_id, :token, 'succeeded');
