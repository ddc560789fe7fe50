-- cron: ntask_cron_next / ntask_cron_prev, a 5-field cron evaluator with an
-- explicit time zone (default UTC): steps, lists, ranges, names, aliases,
-- month ends, leap days, the day-of-month/day-of-week OR rule, DST gaps and
-- repeats, and every invalid input with its SQLSTATE.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
-- every minute: next is strictly after, prev is at or before
SELECT ntask_cron_next('* * * * *', '2026-01-01 10:07:30') AS next_mid_minute,
       ntask_cron_next('* * * * *', '2026-01-01 10:07:00') AS next_on_minute,
       ntask_cron_prev('* * * * *', '2026-01-01 10:07:30') AS prev_mid_minute,
       ntask_cron_prev('* * * * *', '2026-01-01 10:07:00') AS prev_on_minute;
-- a firing time itself: next skips it, prev returns it
SELECT ntask_cron_next('0 12 * * *', '2026-01-01 12:00') AS next,
       ntask_cron_prev('0 12 * * *', '2026-01-01 12:00') AS prev,
       ntask_cron_prev('0 12 * * *', '2026-01-01 11:59:59.999999') AS prev_just_before;
-- steps: */15, 5-50/20 (5, 25, 45), N/S (10/20 = 10, 30, 50)
SELECT e, ntask_cron_next(e, '2026-01-01 10:07') AS next,
       ntask_cron_prev(e, '2026-01-01 10:07') AS prev
FROM (VALUES ('*/15 * * * *'), ('5-50/20 * * * *'), ('10/20 * * * *'),
             ('0 */6 * * *'), ('0 0 */10 * *')) v(e);
-- the firings of 5-50/20 over two hours
WITH RECURSIVE f(n, t) AS (
  SELECT 1, ntask_cron_next('5-50/20 * * * *', '2026-01-01 09:59')
  UNION ALL
  SELECT n + 1, ntask_cron_next('5-50/20 * * * *', t) FROM f WHERE n < 6)
SELECT n, t AS utc FROM f;
-- lists and ranges, with whitespace: tabs, runs of blanks, leading/trailing
SELECT ntask_cron_next('0,30 9-17 * * *', '2026-01-01 17:30') AS list_range,
       ntask_cron_next(E'  0\t 9,12-13   * *  *  ', '2026-01-01 12:00') AS blanks,
       ntask_cron_next('1,2,3-5,50-52/2 * * * *', '2026-01-01 10:05') AS mixed;
-- names: mon-fri (2026-01-02 is a Friday), jan,jul, case-insensitive
SELECT ntask_cron_next('0 9 * * mon-fri', '2026-01-02 09:00') AS after_friday,
       ntask_cron_next('0 9 * * MON-Fri', '2026-01-03 12:00') AS saturday_noon,
       ntask_cron_next('0 0 1 jan,jul *', '2026-01-01') AS jan_jul,
       ntask_cron_next('0 0 1 JUN-aug/2 *', '2026-07-01') AS jun_aug_step,
       ntask_cron_next('0 0 * * fri-sun', '2026-01-04 00:00') AS fri_to_sunday;
-- day-of-week 0 and 7 are both Sunday (2026-01-04)
SELECT ntask_cron_next('0 0 * * 0', '2026-01-01') AS dow_0,
       ntask_cron_next('0 0 * * 7', '2026-01-01') AS dow_7,
       ntask_cron_next('0 0 * * sun', '2026-01-01') AS dow_sun,
       ntask_cron_next('0 0 * * 5-7', '2026-01-03 00:00') AS dow_5_7;
-- aliases (2026-01-01 is a Thursday)
SELECT e, ntask_cron_next(e, '2026-01-01 10:07') AS next
FROM (VALUES ('@yearly'), ('@annually'), ('@monthly'), ('@weekly'),
             ('@daily'), ('@midnight'), ('@hourly'), ('  @Daily  ')) v(e);
-- month ends: the 31st skips 30-day months and February
SELECT ntask_cron_next('0 0 31 * *', '2026-01-31') AS after_jan_31,
       ntask_cron_next('0 0 31 * *', '2026-03-31') AS after_mar_31,
       ntask_cron_prev('0 0 31 * *', '2026-07-30') AS before_jul_30,
       ntask_cron_next('0 0 30 * *', '2026-01-30') AS thirtieth_skips_feb,
       ntask_cron_next('59 23 28-31 * *', '2026-02-28 23:59') AS after_feb_28;
-- leap days: Feb 29 from 2025 is 2028; 2100 is not a leap year
SELECT ntask_cron_next('0 12 29 2 *', '2025-01-01') AS leap_next,
       ntask_cron_prev('0 12 29 2 *', '2028-02-29 11:59') AS leap_prev,
       ntask_cron_next('0 0 29 2 *', '2096-03-01') AS skips_2100,
       ntask_cron_prev('0 0 29 2 *', '2104-01-01') AS back_over_2100,
       ntask_cron_next('0 0 29 2 */7', '2026-01-01') AS feb29_on_sunday;
-- day-of-month and day-of-week both restricted: either matches
-- (every 13th and every Friday); 2026-01-02 is a Friday, 01-13 a Tuesday
SELECT ntask_cron_next('0 0 13 * fri', '2026-01-01') AS first,
       ntask_cron_next('0 0 13 * fri', '2026-01-02') AS second,
       ntask_cron_next('0 0 13 * fri', '2026-01-09') AS third,
       ntask_cron_next('0 0 13 * fri', '2026-01-13') AS fourth;
-- "1 * mon": both restricted, so the first Monday (01-05) comes before
-- the 1st of February.  A field starting with '*' (so "*/7" = Sunday too)
-- makes it AND, as in Vixie cron: "1 * */7" is a 1st that is a Sunday
-- (2026-02-01), "*/2 * mon" an odd-numbered Monday (01-05, then 01-19)
SELECT ntask_cron_next('0 0 1 * mon', '2026-01-01') AS dom_or_dow,
       ntask_cron_next('0 0 1 * */7', '2026-01-01') AS first_and_sunday,
       ntask_cron_next('0 0 * * mon', '2026-01-01') AS dow_only,
       ntask_cron_next('0 0 */2 * mon', '2026-01-05') AS odd_mondays,
       ntask_cron_next('0 0 1 * *', '2026-01-01') AS dom_only;
-- DST, Europe/Berlin: 2026-03-29 02:00 CET jumps to 03:00 CEST, so
-- 02:30 does not exist that day and "30 2 * * *" does not fire
WITH RECURSIVE f(n, t) AS (
  SELECT 1, ntask_cron_next('30 2 * * *', '2026-03-27 00:00+00', 'Europe/Berlin')
  UNION ALL
  SELECT n + 1, ntask_cron_next('30 2 * * *', t, 'Europe/Berlin') FROM f WHERE n < 4)
SELECT n, t AS utc, t AT TIME ZONE 'Europe/Berlin' AS local FROM f;
-- prev across the gap goes back to the 28th
SELECT ntask_cron_prev('30 2 * * *', '2026-03-30 00:00+00', 'Europe/Berlin') AS prev_over_gap,
       ntask_cron_next('* * * * *', '2026-03-29 00:59+00', 'Europe/Berlin') AS minute_after_gap;
-- 2026-10-25 03:00 CEST falls back to 02:00 CET: 02:30 occurs twice and
-- fires once, at its first occurrence (00:30 UTC, not 01:30 UTC)
WITH RECURSIVE f(n, t) AS (
  SELECT 1, ntask_cron_next('30 2 * * *', '2026-10-24 00:00+00', 'Europe/Berlin')
  UNION ALL
  SELECT n + 1, ntask_cron_next('30 2 * * *', t, 'Europe/Berlin') FROM f WHERE n < 4)
SELECT n, t AS utc, t AT TIME ZONE 'Europe/Berlin' AS local FROM f;
SELECT ntask_cron_next('30 2 * * *', '2026-10-25 00:30+00', 'Europe/Berlin') AS after_first_pass,
       ntask_cron_prev('30 2 * * *', '2026-10-25 01:45+00', 'Europe/Berlin') AS prev_in_second_pass,
       ntask_cron_prev('45 2 * * *', '2026-10-25 01:35+00', 'Europe/Berlin') AS prev_later_wall_time;
-- "*/20" across the Berlin fall-back: fires through the first pass of
-- 02:00-02:59, is silent during the second, resumes at 03:00 CET
WITH RECURSIVE f(n, t) AS (
  SELECT 1, ntask_cron_next('*/20 * * * *', '2026-10-24 23:50+00', 'Europe/Berlin')
  UNION ALL
  SELECT n + 1, ntask_cron_next('*/20 * * * *', t, 'Europe/Berlin') FROM f WHERE n < 6)
SELECT n, t AS utc, t AT TIME ZONE 'Europe/Berlin' AS local FROM f;
-- America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT
-- -> 01:00 EST.  "30 2 * * *" skips March 8; "30 1 * * *" fires once on Nov 1
SELECT ntask_cron_next('30 2 * * *', '2026-03-07 07:00', 'America/New_York') AS mar_7,
       ntask_cron_next('30 2 * * *', '2026-03-07 08:00', 'America/New_York') AS after_mar_7,
       ntask_cron_next('30 1 * * *', '2026-10-31 06:00', 'America/New_York') AS nov_1,
       ntask_cron_next('30 1 * * *', '2026-11-01 05:30', 'America/New_York') AS after_nov_1;
-- every half hour from 01:00 to 03:59 local across both New York changes
WITH RECURSIVE f(n, t) AS (
  SELECT 1, ntask_cron_next('*/30 1-3 * * *', '2026-03-08 05:00+00', 'America/New_York')
  UNION ALL
  SELECT n + 1, ntask_cron_next('*/30 1-3 * * *', t, 'America/New_York') FROM f WHERE n < 5)
SELECT n, t AS utc, t AT TIME ZONE 'America/New_York' AS local FROM f;
WITH RECURSIVE f(n, t) AS (
  SELECT 1, ntask_cron_next('*/30 1-2 * * *', '2026-11-01 04:00+00', 'America/New_York')
  UNION ALL
  SELECT n + 1, ntask_cron_next('*/30 1-2 * * *', t, 'America/New_York') FROM f WHERE n < 5)
SELECT n, t AS utc, t AT TIME ZONE 'America/New_York' AS local FROM f;
SELECT ntask_cron_next('30 1 * * *', '2026-10-31 06:00', 'America/New_York')
         AT TIME ZONE 'America/New_York' AS nov_1_local,
       ntask_cron_next('0 9 * * mon-fri', '2026-03-06 15:00', 'America/New_York')
         AT TIME ZONE 'America/New_York' AS monday_9am_local,
       ntask_cron_next('0 9 * * mon-fri', '2026-03-06 15:00', 'America/New_York') AS monday_9am_utc;
-- the time zone argument is case-insensitive and defaults to UTC
SELECT ntask_cron_next('0 0 * * *', '2026-06-01 12:00', 'utc') AS utc_lower,
       ntask_cron_next('0 0 * * *', '2026-06-01 12:00', 'asia/kolkata') AS kolkata,
       ntask_cron_next('0 0 * * *', '2026-06-01 12:00', timezone => 'Europe/Berlin') AS berlin,
       ntask_cron_next('0 0 * * *', '2026-06-01 12:00') AS default_utc;
-- far searches are fast (no minute-by-minute scan)
SELECT ntask_cron_next('0 0 29 2 */7', '2088-03-01') AS next_sunday_feb_29,
       ntask_cron_prev('59 23 31 12 *', '2026-12-31 23:58') AS prev_new_years_eve;
-- invalid input: each raises an error with an SQLSTATE
\set ON_ERROR_STOP 0
SELECT ntask_cron_next(NULL, '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('* * * * *', NULL);
\echo :SQLSTATE
SELECT ntask_cron_prev('* * * * *', '2026-01-01', NULL);
\echo :SQLSTATE
SELECT ntask_cron_next('', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('   ', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('* * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 * * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('61 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 24 * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 0 * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 32 * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * 13 *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * * 8', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('99999999999999999999 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('*/0 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('*/61 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('*/ * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('5-1 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * * fri-mon', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('5- * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('1,,2 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('1, * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * foo *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * * monday', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * jan-mon *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('mon * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('@reboot', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('@fortnightly', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('@daily 0', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * * 1#2', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 L * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('? * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('*5 * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next(E'0 0 * * *\n', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 * * 1é', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('0 0 30 2 *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_prev('0 0 31 4,6,9,11 *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next('* * * * *', '2026-01-01', 'Mars/Olympus_Mons');
\echo :SQLSTATE
SELECT ntask_cron_next('* * * * *', '2026-01-01', '');
\echo :SQLSTATE
SELECT ntask_cron_next('* * * * *', 'infinity');
\echo :SQLSTATE
SELECT ntask_cron_prev('* * * * *', '-infinity');
\echo :SQLSTATE
SELECT ntask_cron_next('* * * * *', '294276-12-31 23:59:00+00');
\echo :SQLSTATE
SELECT ntask_cron_prev('0 0 1 1 *', '4714-12-01 00:00:00+00 BC');
\echo :SQLSTATE
SELECT ntask_cron_next(repeat(' ', 192) || '* * * * *', '2026-01-01');
\echo :SQLSTATE
SELECT ntask_cron_next(repeat(' ', 191) || '* * * * *', '2026-01-01') AS exactly_200_bytes;
-- ntask.cron_gaps walks the matching minutes of its range, one by one: it
-- is made for ntask.fire_due's ranges (at most 8 days) and refuses one over
-- 31 days (22023).  Walking decades of minutes took longer than
-- statement_timeout, and could not be interrupted: the call ended without
-- error and the timeout canceled the session's next statement.
SET statement_timeout = '2s';
SELECT * FROM ntask.cron_gaps('* * * * *', '2000-01-01 00:00+00', '2026-01-01 00:00+00', 'UTC');
\echo :SQLSTATE
SELECT 'runs' AS the_next_statement;
\echo :SQLSTATE
SELECT * FROM ntask.cron_gaps('* * * * *', '2026-03-01 00:00+00', '2026-04-01 00:00:01+00', 'UTC');
\echo :SQLSTATE
SELECT count(*) AS minutes_in_gap FROM ntask.cron_gaps('* * * * *', '2026-03-01 00:00+00', '2026-04-01 00:00+00', 'Europe/Berlin');
SELECT count(*) AS reversed FROM ntask.cron_gaps('* * * * *', '2026-01-01 00:00+00', '4714-11-24 00:00:00+00 BC', 'UTC');
RESET statement_timeout;
\set ON_ERROR_STOP 1
RESET DateStyle;
RESET TimeZone;
