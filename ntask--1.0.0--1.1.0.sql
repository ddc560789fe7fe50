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

-- end of issue 45


-- issue 46: the third first hour

-- 46.4: a queue's signal_role alone is the right to signal it; the
-- function's own check refuses everyone else (42501)
GRANT EXECUTE ON FUNCTION @extschema@.ntask_signal(text, text, jsonb) TO PUBLIC;

-- end of issue 46


-- issue 48: a leaner task

-- end of issue 48


-- issue 49: Citus, direct shard execution

-- end of issue 49
