/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  ntask_cron_next / ntask_cron_prev: a standard 5-field cron evaluator
 *	  that is explicit about the schedule's time zone.
 *
 * An expression is "minute hour day-of-month month day-of-week", fields
 * separated by spaces or tabs, or one of the aliases @yearly (@annually),
 * @monthly, @weekly, @daily (@midnight), @hourly.  @reboot has no clock
 * time and is rejected.  Each field is a comma list of items
 *
 *	*   N   N-M   * /S   N-M/S   N/S (N to the field's maximum, step S)
 *
 * (read "* /S" without the space, which a C comment cannot show), with
 * minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec,
 * day-of-week 0-7 (0 and 7 are Sunday) or sun-sat; names are
 * case-insensitive and allowed in ranges ("mon-fri").  Ranges do not wrap
 * ("5-1" is an error), except that in day-of-week a range ending in Sunday
 * (0 or sun) after a later day runs to 7 ("fri-sun" = 5-7).  In
 * day-of-week, "*" and "N/S" run to 6, so Sunday is not counted twice.
 *
 * Day-of-month and day-of-week follow Vixie cron: when either field starts
 * with "*" (so "* /2" too), a day must match both; when both are
 * restricted, a day matches when either does ("0 0 13 * fri" fires on
 * every 13th and every Friday).
 *
 * Time zone: the fields are read as wall-clock time in the schedule's
 * zone (default UTC), looked up with pg_tzset().  Across DST changes:
 *	- a local time that does not exist (the spring-forward gap) does not
 *	  fire: "30 2 * * *" in Europe/Berlin skips 2026-03-29;
 *	- a local time that occurs twice (fall-back) fires once, at its first
 *	  occurrence.  This applies to every minute of the repeated hour, so
 *	  "* /15 * * * *" is silent during the second pass of that hour.
 * Local -> UTC is done here (cron_local_to_utc) rather than with
 * DetermineTimeZoneOffset, which resolves an ambiguous time to its later
 * occurrence; we want the earlier one.
 *
 * Search: candidates are walked in local calendar order, skipping whole
 * months, days and hours that cannot match, so a yearly schedule costs a
 * few hundred steps, not a minute-by-minute scan.  Mapping a local time to
 * its first occurrence is monotonic, so the first candidate past "after"
 * (the last one at or before "at") is the answer.  An expression whose
 * days can never exist ("0 0 30 2 *") is rejected up front; the search is
 * also bounded to 401 years (the Gregorian calendar repeats every 400),
 * past which it reports that the expression never fires.
 *
 * Parsing is in cron_parse.c (pure C, no PostgreSQL headers, so it is
 * fuzzed on its own under fuzz/); this file reports its errors and does
 * the time zone work and the search.
 *
 * ntask.cron_gaps lists the local times the expression matches that a
 * spring-forward gap skipped, so ntask_fire can record them as missed
 * instead of leaving no trace of the slot.
 *
 * Errors: invalid expression, unknown zone, infinite timestamp, a
 * cron_gaps range over 31 days -> 22023;
 * NULL -> 22004; expression over 200 bytes -> 22001; a firing time outside
 * the timestamptz range -> 22008.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/cron.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "shard.h"
#include "spi_util.h"
#include "cron_parse.h"

#include "funcapi.h"
#include "miscadmin.h"

#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/datetime.h"

PG_FUNCTION_INFO_V1(ntask_cron_next);
PG_FUNCTION_INFO_V1(ntask_cron_prev);
PG_FUNCTION_INFO_V1(ntask_cron_gaps);

#define CRON_MAX_EXPR_LEN	NTASK_CRON_MAX_EXPR_LEN
#define CRON_SEARCH_YEARS	401
#define CRON_MIN_YEAR		(-4713)		/* timestamptz starts in 4714 BC */
#define CRON_MAX_YEAR		294276		/* and ends at 294277-01-01 */

/*
 * cron_gaps walks every matching local minute of its range (a minute-by-
 * minute expression: 1440 a day): ntask.fire_due asks for at most 8 days,
 * a longer range than a month is refused rather than walked for minutes.
 */
#define CRON_GAPS_MAX_DAYS	31
#define CRON_GAPS_MAX_RANGE ((int64) CRON_GAPS_MAX_DAYS * USECS_PER_DAY)

#define CRON_BIT(v)			(UINT64CONST(1) << (v))

/* a parsed expression (cron_parse.h): bit v set when value v matches */
typedef NtaskCronSpec CronSpec;

/* a local wall-clock minute */
typedef struct CronLocal
{
	int			year;
	int			mon;			/* 1-12 */
	int			mday;			/* 1-31 */
	int			hour;
	int			min;
} CronLocal;

static void cron_parse(const char *expr, CronSpec *spec);
static int	cron_days_in_month(int year, int mon);
static bool cron_day_matches(const CronSpec *spec, int year, int mon, int mday);
static bool cron_search_forward(const CronSpec *spec, CronLocal *c, int ylimit);
static bool cron_search_backward(const CronSpec *spec, CronLocal *c, int ylimit);
static long cron_gmtoff(const pg_tz *tz, pg_time_t t);
static pg_time_t cron_wall_seconds(const CronLocal *c);
static void cron_split_wall(pg_time_t wall, CronLocal *c);
static bool cron_local_to_utc(const pg_tz *tz, const CronLocal *c,
							  pg_time_t *result);
static pg_time_t cron_floor_seconds(TimestampTz ts);
pg_noreturn static void cron_out_of_range(const char *expr);
static TimestampTz cron_eval(FunctionCallInfo fcinfo, bool forward);
static pg_time_t cron_gap_instant(const pg_tz *tz, const CronLocal *c);

/*
 * cron_parse
 *		Parse expr (an alias or five fields) into spec with the pure parser
 *		(cron_parse.c), or raise 22023: an invalid expression, with the
 *		field (if any) and the reason in the detail, or one whose days never
 *		exist, such as "0 0 30 2 *".
 */
static void
cron_parse(const char *expr, CronSpec *spec)
{
	NtaskCronError err;

	switch (ntask_cron_parse(expr, strlen(expr), spec, &err))
	{
		case NTASK_CRON_OK:
			return;
		case NTASK_CRON_NEVER_FIRES:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: cron expression \"%s\" never fires", expr),
					 errdetail("%s", err.detail)));
			break;
		case NTASK_CRON_INVALID:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: invalid cron expression \"%s\"", expr),
					 err.field ? errdetail("%s field: %s", err.field, err.detail)
					 : errdetail("%s", err.detail),
					 errhint("A cron expression is \"minute hour day-of-month month day-of-week\" or an alias such as @daily.")));
			break;
	}
	elog(ERROR, "ntask: unexpected cron parser status");
}

/* cron_days_in_month: 28-31 for the proleptic Gregorian calendar. */
static int
cron_days_in_month(int year, int mon)
{
	return day_tab[isleap(year) ? 1 : 0][mon - 1];
}

/* cron_day_matches: the day-of-month / day-of-week rule (see header). */
static bool
cron_day_matches(const CronSpec *spec, int year, int mon, int mday)
{
	bool		dom_ok = (spec->dom & CRON_BIT(mday)) != 0;
	bool		dow_ok = (spec->dow & CRON_BIT(j2day(date2j(year, mon, mday)))) != 0;

	if (spec->dom_star || spec->dow_star)
		return dom_ok && dow_ok;
	return dom_ok || dow_ok;
}

/*
 * cron_search_forward
 *		Move *c to the first local minute >= *c (fields may overflow by one,
 *		e.g. min = 60) that the spec matches.  False once the year passes
 *		ylimit.
 */
static bool
cron_search_forward(const CronSpec *spec, CronLocal *c, int ylimit)
{
	for (;;)
	{
		if (c->min > 59)
			c->min = 0, c->hour++;
		if (c->hour > 23)
			c->hour = 0, c->mday++;
		if (c->mday > cron_days_in_month(c->year, c->mon))
			c->mday = 1, c->mon++;
		if (c->mon > 12)
			c->mon = 1, c->year++;
		if (c->year > ylimit)
			return false;

		if (!(spec->month & CRON_BIT(c->mon)))
			c->mon++, c->mday = 1, c->hour = 0, c->min = 0;
		else if (!cron_day_matches(spec, c->year, c->mon, c->mday))
			c->mday++, c->hour = 0, c->min = 0;
		else if (!(spec->hour & CRON_BIT(c->hour)))
			c->hour++, c->min = 0;
		else if (!(spec->minute & CRON_BIT(c->min)))
			c->min++;
		else
			return true;
	}
}

/*
 * cron_search_backward
 *		Move *c to the last local minute <= *c (fields may underflow by one,
 *		e.g. min = -1) that the spec matches.  False once the year drops
 *		below ylimit.
 */
static bool
cron_search_backward(const CronSpec *spec, CronLocal *c, int ylimit)
{
	for (;;)
	{
		if (c->min < 0)
			c->min = 59, c->hour--;
		if (c->hour < 0)
			c->hour = 23, c->mday--;
		if (c->mon < 1 || c->mday < 1)
		{
			if (c->mday < 1)
				c->mon--;
			if (c->mon < 1)
				c->mon = 12, c->year--;
			c->mday = cron_days_in_month(c->year, c->mon);
		}
		if (c->year < ylimit)
			return false;

		if (!(spec->month & CRON_BIT(c->mon)))
			c->mon--, c->mday = 31, c->hour = 23, c->min = 59;
		else if (!cron_day_matches(spec, c->year, c->mon, c->mday))
			c->mday--, c->hour = 23, c->min = 59;
		else if (!(spec->hour & CRON_BIT(c->hour)))
			c->hour--, c->min = 59;
		else if (!(spec->minute & CRON_BIT(c->min)))
			c->min--;
		else
			return true;

		/* after "mon--", clamp the day to that month (mday = 31 above) */
		if (c->mon >= 1 && c->mday > cron_days_in_month(c->year, c->mon))
			c->mday = cron_days_in_month(c->year, c->mon);
	}
}

/* cron_gmtoff: the zone's UTC offset (seconds east) at instant t. */
static long
cron_gmtoff(const pg_tz *tz, pg_time_t t)
{
	struct pg_tm *tm = pg_localtime(&t, tz);

	if (tm == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("ntask: timestamp out of range")));
	return tm->tm_gmtoff;
}

/* cron_wall_seconds: a local minute as seconds since 1970-01-01 00:00 local. */
static pg_time_t
cron_wall_seconds(const CronLocal *c)
{
	return ((pg_time_t) (date2j(c->year, c->mon, c->mday) - UNIX_EPOCH_JDATE))
		* SECS_PER_DAY + c->hour * SECS_PER_HOUR + c->min * SECS_PER_MINUTE;
}

/* cron_split_wall: the inverse of cron_wall_seconds, truncating to a minute. */
static void
cron_split_wall(pg_time_t wall, CronLocal *c)
{
	pg_time_t	days = wall / SECS_PER_DAY;
	pg_time_t	secs = wall % SECS_PER_DAY;

	if (secs < 0)
		days--, secs += SECS_PER_DAY;
	j2date((int) (days + UNIX_EPOCH_JDATE), &c->year, &c->mon, &c->mday);
	c->hour = (int) (secs / SECS_PER_HOUR);
	c->min = (int) (secs % SECS_PER_HOUR) / SECS_PER_MINUTE;
}

/*
 * cron_local_to_utc
 *		The first instant whose wall-clock time in tz is *c, or false when
 *		*c falls in a gap.  An instant u shows wall time w iff the offset at
 *		u is w - u; we try every offset seen within 30 hours of w (more than
 *		any zone's offset) and keep the earliest instant that checks out.
 */
static bool
cron_local_to_utc(const pg_tz *tz, const CronLocal *c, pg_time_t *result)
{
	pg_time_t	wall = cron_wall_seconds(c);
	long		prev_off = LONG_MIN;
	pg_time_t	best = 0;
	bool		found = false;
	int			h;

	for (h = -30; h <= 30; h += 6)
	{
		long		off = cron_gmtoff(tz, wall + h * SECS_PER_HOUR);
		pg_time_t	u = wall - off;

		if (off == prev_off)
			continue;
		prev_off = off;
		if (cron_gmtoff(tz, u) == off && (!found || u < best))
		{
			best = u;
			found = true;
		}
	}
	*result = best;
	return found;
}

/* cron_floor_seconds: a timestamptz as Unix seconds, rounded down. */
static pg_time_t
cron_floor_seconds(TimestampTz ts)
{
	pg_time_t	secs = ts / USECS_PER_SEC;

	if (ts % USECS_PER_SEC < 0)
		secs--;
	return secs + (pg_time_t) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
}

/* cron_out_of_range: raise 22008, the answer is outside timestamptz. */
static void
cron_out_of_range(const char *expr)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
			 errmsg("ntask: cron expression \"%s\" has no firing time within the timestamptz range",
					expr)));
}

/*
 * cron_eval
 *		Shared body of ntask_cron_next (forward) and ntask_cron_prev.
 *		Arguments: expr text, a timestamptz, timezone text.
 */
/*
 * cron_args
 *		The arguments every cron function takes: the expression (argument
 *		0, parsed into *spec), a finite timestamp (argument tsarg, named
 *		tsname in errors) and the time zone (argument tzarg).
 */
static void
cron_args(FunctionCallInfo fcinfo, int tsarg, const char *tsname, int tzarg,
		  char **expr, CronSpec *spec, TimestampTz *ts, char **tzname,
		  pg_tz **tz)
{
	text	   *expr_t = NtaskArgText(fcinfo, 0, "expr", CRON_MAX_EXPR_LEN);
	text	   *tz_t = NtaskArgText(fcinfo, tzarg, "timezone", TZ_STRLEN_MAX);

	*expr = text_to_cstring(expr_t);
	*tzname = text_to_cstring(tz_t);
	if (PG_ARGISNULL(tsarg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: %s must not be NULL", tsname)));
	*ts = PG_GETARG_TIMESTAMPTZ(tsarg);
	if (TIMESTAMP_NOT_FINITE(*ts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: %s must be a finite timestamp", tsname)));

	cron_parse(*expr, spec);

	*tz = pg_tzset(*tzname);
	if (*tz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: unknown time zone \"%s\"", *tzname),
				 errhint("Use a name from pg_timezone_names, such as 'UTC' or 'Europe/Berlin'.")));
}

static TimestampTz
cron_eval(FunctionCallInfo fcinfo, bool forward)
{
	const char *tsname = forward ? "after" : "at";
	char	   *expr;
	char	   *tzname;
	TimestampTz ts;
	pg_tz	   *tz;
	CronSpec	spec;
	CronLocal	c;
	pg_time_t	secs,
				u;
	long		maxoff;
	int			ylimit;
	int			h;

	cron_args(fcinfo, 1, tsname, 2, &expr, &spec, &ts, &tzname, &tz);

	/*
	 * Forward: every local minute up to local(ts) first occurs at or before
	 * ts, so start one minute later.  Backward: in a repeated hour, later
	 * wall times than local(ts) may already have occurred, so start from
	 * the largest wall time seen in the 30 hours before ts.
	 */
	secs = cron_floor_seconds(ts);
	maxoff = cron_gmtoff(tz, secs);
	if (!forward)
		for (h = 1; h <= 30; h++)
			maxoff = Max(maxoff, cron_gmtoff(tz, secs - h * SECS_PER_HOUR));
	if (secs + maxoff < -(pg_time_t) UNIX_EPOCH_JDATE * SECS_PER_DAY)
		cron_out_of_range(expr);	/* before Julian day 0 */
	cron_split_wall(secs + maxoff, &c);
	if (forward)
		c.min++;
	ylimit = forward ? Min(c.year + CRON_SEARCH_YEARS, CRON_MAX_YEAR)
		: Max(c.year - CRON_SEARCH_YEARS, CRON_MIN_YEAR);

	for (;;)
	{
		bool		ok = forward ? cron_search_forward(&spec, &c, ylimit)
			: cron_search_backward(&spec, &c, ylimit);

		if (!ok)
		{
			if (ylimit == CRON_MAX_YEAR || ylimit == CRON_MIN_YEAR)
				cron_out_of_range(expr);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("ntask: cron expression \"%s\" never fires", expr),
					 errdetail("No firing time in time zone \"%s\" within %d years %s %s.",
							   tzname, CRON_SEARCH_YEARS,
							   forward ? "after" : "before",
							   timestamptz_to_str(ts))));
		}
		if (cron_local_to_utc(tz, &c, &u))
		{
			TimestampTz r = time_t_to_timestamptz(u);

			if (!IS_VALID_TIMESTAMP(r))
				cron_out_of_range(expr);
			if (forward ? r > ts : r <= ts)
				return r;
		}
		/* a gap, or not yet past ts: try the next candidate minute */
		if (forward)
			c.min++;
		else
			c.min--;
	}
}

/*
 * ntask_cron_next(expr text, after timestamptz, timezone text DEFAULT 'UTC')
 *		RETURNS timestamptz
 *		The first firing time strictly after "after".
 */
Datum
ntask_cron_next(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(cron_eval(fcinfo, true));
}

/*
 * ntask_cron_prev(expr text, at timestamptz, timezone text DEFAULT 'UTC')
 *		RETURNS timestamptz
 *		The latest firing time at or before "at".
 */
Datum
ntask_cron_prev(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(cron_eval(fcinfo, false));
}

/*
 * cron_gap_instant
 *		For a local minute *c that a spring-forward gap skipped: the instant
 *		the clock jumped over it (the transition), found by bisection
 *		between the instants that would show *c under the offsets after and
 *		before the gap (real zones change their offset at most once a day).
 */
static pg_time_t
cron_gap_instant(const pg_tz *tz, const CronLocal *c)
{
	pg_time_t	wall = cron_wall_seconds(c);
	long		before = cron_gmtoff(tz, wall - SECS_PER_DAY);
	long		after = cron_gmtoff(tz, wall + SECS_PER_DAY);
	pg_time_t	lo = wall - after;	/* still shows the old offset */
	pg_time_t	hi = wall - before; /* already shows the new one */

	if (after <= before || cron_gmtoff(tz, hi) == before)
		return hi;
	while (hi - lo > 1)
	{
		pg_time_t	mid = lo + (hi - lo) / 2;

		if (cron_gmtoff(tz, mid) == before)
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

/* the result columns of ntask.cron_gaps */
typedef enum CronGapsCol
{
	CRON_GAPS_SLOT,
	CRON_GAPS_LOCAL_TIME,
	CRON_GAPS_NCOLS
} CronGapsCol;

/*
 * ntask.cron_gaps(expr text, after timestamptz, upto timestamptz,
 *				   timezone text)
 *		RETURNS TABLE (slot timestamptz, local_time timestamp)
 *		The local times the expression matches that do not exist in the
 *		zone (a spring-forward gap), whose gap began in (after, upto]: slot
 *		is that instant (when the clock jumped over the local time).  The
 *		walk visits the matching local minutes in between, so the range is
 *		at most 31 days (22023; ntask_fire asks for at most 8).
 */
Datum
ntask_cron_gaps(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *expr;
	char	   *tzname;
	TimestampTz after;
	TimestampTz upto;
	pg_tz	   *tz;
	CronSpec	spec;
	CronLocal	c;
	pg_time_t	secs,
				upto_secs;
	int			ylimit;

	cron_args(fcinfo, 1, "after", 3, &expr, &spec, &after, &tzname, &tz);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ntask: upto must not be NULL")));
	upto = PG_GETARG_TIMESTAMPTZ(2);
	if (TIMESTAMP_NOT_FINITE(upto))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: upto must be a finite timestamp")));

	/* (upto - after can overflow: 4714 BC to 294276 AD) */
	if (after < upto - CRON_GAPS_MAX_RANGE)
	{
		/* timestamptz_to_str returns a static buffer */
		char	   *after_str = pstrdup(timestamptz_to_str(after));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: cron_gaps covers at most %d days",
						CRON_GAPS_MAX_DAYS),
				 errdetail("The range from %s to %s is longer.",
						   after_str, timestamptz_to_str(upto))));
	}

	InitMaterializedSRF(fcinfo, 0);
	if (upto <= after)
		return (Datum) 0;

	/* the first local minute after "after", as in cron_eval (forward) */
	secs = cron_floor_seconds(after);
	upto_secs = cron_floor_seconds(upto);
	cron_split_wall(secs + cron_gmtoff(tz, secs), &c);
	c.min++;
	ylimit = Min(c.year + CRON_SEARCH_YEARS, CRON_MAX_YEAR);

	while (cron_search_forward(&spec, &c, ylimit))
	{
		pg_time_t	u;

		/* unchecked, a cancel would hit the session's next statement */
		CHECK_FOR_INTERRUPTS();
		if (cron_local_to_utc(tz, &c, &u))
		{
			if (u > upto_secs)
				break;
		}
		else
		{
			Datum		values[CRON_GAPS_NCOLS];
			bool		nulls[CRON_GAPS_NCOLS] = {false, false};
			Timestamp	local;
			struct pg_tm tm;

			u = cron_gap_instant(tz, &c);
			if (u > upto_secs)
				break;
			memset(&tm, 0, sizeof(tm));
			tm.tm_year = c.year;
			tm.tm_mon = c.mon;
			tm.tm_mday = c.mday;
			tm.tm_hour = c.hour;
			tm.tm_min = c.min;
			if (tm2timestamp(&tm, 0, NULL, &local) != 0)
				cron_out_of_range(expr);
			values[CRON_GAPS_SLOT] = TimestampTzGetDatum(time_t_to_timestamptz(u));
			values[CRON_GAPS_LOCAL_TIME] = TimestampGetDatum(local);
			if (time_t_to_timestamptz(u) > after)
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
									 values, nulls);
		}
		c.min++;
	}
	return (Datum) 0;
}
