/* ntask--0.3--1.0.0.sql: every schema change of the 1.0 wave (issues 29-36) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ntask UPDATE TO '1.0.0'" to load this file. \quit

/*
 * One upgrade script for the whole 1.0 wave: each issue adds its part under
 * its own heading below (keep the headings: parallel work merges cleanly).
 * A fresh CREATE EXTENSION runs 0.1, 0.1--0.2, 0.2--0.3 and this script, so
 * new and upgraded installations are the same (regress "upgrade").
 */

-- issue 29.1: waiting claims on limited queues

-- end of issue 29.1


-- issue 29.2: cap and turn locks

-- end of issue 29.2


-- issue 29.3 and 29.6: guards

-- end of issue 29.3 and 29.6


-- issue 29.4 and 29.5: rate-limit buckets, retry shares, fair cursors

-- end of issue 29.4 and 29.5


-- issue 29.7 and 29.9: http retry-after, connected addresses

-- end of issue 29.7 and 29.9


-- issue 29.8: saga keys

-- end of issue 29.8


-- issue 29.10 and the suspicions: upgrade grants, schedules, results

-- end of issue 29.10


-- issue 30

-- end of issue 30
