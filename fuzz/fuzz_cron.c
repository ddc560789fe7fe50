/*-------------------------------------------------------------------------
 *
 * fuzz_cron.c
 *	  libFuzzer harness for the cron expression parser (src/cron_parse.c).
 *
 * The input is the expression, bytes as they come (NUL included).
 * Properties checked on every input:
 *	- the error detail is NUL-terminated and names a known field or none;
 *	- a parsed expression has non-empty sets, each within its field's
 *	  range (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-6);
 *	- a parsed expression can fire: with the AND rule some month of the
 *	  month field has one of the days of the day-of-month field;
 *	- the result does not change when the expression is upper-cased or
 *	  padded with blanks;
 *	- printing the parsed sets back as lists and parsing that gives the
 *	  same sets.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  fuzz/fuzz_cron.c
 *
 *-------------------------------------------------------------------------
 */
#include "cron_parse.h"
#include "fuzz_common.h"

#define BIT(v)	(((uint64_t) 1) << (v))
/* bits lo..hi */
#define RANGE_MASK(lo, hi)	((((uint64_t) 2) << (hi)) - BIT(lo))

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_spec(const NtaskCronSpec *s);
static void check_error(NtaskCronStatus st, const NtaskCronError *err);
static bool same_spec(const NtaskCronSpec *a, const NtaskCronSpec *b);
static size_t print_set(char *buf, size_t pos, uint64_t bits, int lo, int hi,
						const char *star_prefix);
static void check_roundtrip(const NtaskCronSpec *s);

static void
check_spec(const NtaskCronSpec *s)
{
	static const int max_days[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool		fires = false;
	int			m;

	FUZZ_CHECK(s->minute != 0 && (s->minute & ~RANGE_MASK(0, 59)) == 0);
	FUZZ_CHECK(s->hour != 0 && (s->hour & ~RANGE_MASK(0, 23)) == 0);
	FUZZ_CHECK(s->dom != 0 && (s->dom & ~RANGE_MASK(1, 31)) == 0);
	FUZZ_CHECK(s->month != 0 && (s->month & ~RANGE_MASK(1, 12)) == 0);
	FUZZ_CHECK(s->dow != 0 && (s->dow & ~RANGE_MASK(0, 6)) == 0);
	/* a field starting with '*' includes its minimum */
	FUZZ_CHECK(!s->dom_star || (s->dom & BIT(1)));
	FUZZ_CHECK(!s->dow_star || (s->dow & BIT(0)));

	if (!s->dom_star && !s->dow_star)
		return;					/* OR rule: every month has the weekdays */
	/* AND rule: each (month, day) recurs on every weekday within 400 years */
	for (m = 1; m <= 12 && !fires; m++)
		if (s->month & BIT(m))
			fires = (s->dom & RANGE_MASK(1, max_days[m])) != 0;
	FUZZ_CHECK(fires);
}

static void
check_error(NtaskCronStatus st, const NtaskCronError *err)
{
	static const char *const names[] = {
		"minute", "hour", "day-of-month", "month", "day-of-week"
	};
	bool		known = err->field == NULL;
	int			i;

	FUZZ_CHECK(st == NTASK_CRON_INVALID || st == NTASK_CRON_NEVER_FIRES);
	FUZZ_CHECK(memchr(err->detail, '\0', sizeof(err->detail)) != NULL);
	FUZZ_CHECK(err->detail[0] != '\0');
	for (i = 0; i < 5 && !known; i++)
		known = strcmp(err->field, names[i]) == 0;
	FUZZ_CHECK(known);
	FUZZ_CHECK(st != NTASK_CRON_NEVER_FIRES || err->field == NULL);
}

static bool
same_spec(const NtaskCronSpec *a, const NtaskCronSpec *b)
{
	return a->minute == b->minute && a->hour == b->hour && a->dom == b->dom &&
		a->month == b->month && a->dow == b->dow &&
		a->dom_star == b->dom_star && a->dow_star == b->dow_star;
}

/* print_set: append "v,v,..." (after star_prefix, if any) and a blank */
static size_t
print_set(char *buf, size_t pos, uint64_t bits, int lo, int hi,
		  const char *star_prefix)
{
	int			v;
	bool		first = true;

	if (star_prefix)
	{
		pos += (size_t) sprintf(buf + pos, "%s", star_prefix);
		first = false;
	}
	for (v = lo; v <= hi; v++)
		if (bits & BIT(v))
		{
			pos += (size_t) sprintf(buf + pos, first ? "%d" : ",%d", v);
			first = false;
		}
	buf[pos++] = ' ';
	return pos;
}

/*
 * check_roundtrip: print the sets as lists and parse again.  A field that
 * started with '*' is printed as "* /31,..." (day-of-month: just 1) or
 * "* /7,..." (day-of-week: just Sunday) so the flag survives too.
 */
static void
check_roundtrip(const NtaskCronSpec *s)
{
	char		buf[1024];
	size_t		pos = 0;
	NtaskCronSpec again;
	NtaskCronError err;

	pos = print_set(buf, pos, s->minute, 0, 59, NULL);
	pos = print_set(buf, pos, s->hour, 0, 23, NULL);
	pos = print_set(buf, pos, s->dom, 1, 31, s->dom_star ? "*/31" : NULL);
	pos = print_set(buf, pos, s->month, 1, 12, NULL);
	pos = print_set(buf, pos, s->dow, 0, 6, s->dow_star ? "*/7" : NULL);
	FUZZ_CHECK(pos < sizeof(buf));
	FUZZ_CHECK(ntask_cron_parse(buf, pos, &again, &err) == NTASK_CRON_OK);
	FUZZ_CHECK(same_spec(s, &again));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	NtaskCronSpec spec,
				spec2;
	NtaskCronError err,
				err2;
	NtaskCronStatus st,
				st2;
	char	   *buf;
	size_t		i;

	st = ntask_cron_parse((const char *) data, size, &spec, &err);
	if (st == NTASK_CRON_OK)
	{
		check_spec(&spec);
		check_roundtrip(&spec);
	}
	else
		check_error(st, &err);

	/* upper-cased: names and aliases are case-insensitive */
	buf = fuzz_dup(data, size);
	for (i = 0; i < size; i++)
		buf[i] = (char) fuzz_upper((unsigned char) buf[i]);
	st2 = ntask_cron_parse(buf, size, &spec2, &err2);
	FUZZ_CHECK(st2 == st);
	FUZZ_CHECK(st != NTASK_CRON_OK || same_spec(&spec, &spec2));
	free(buf);

	/* padded with blanks on both sides */
	buf = malloc(size + 3);
	FUZZ_CHECK(buf != NULL);
	buf[0] = ' ';
	buf[1] = '\t';
	if (size > 0)
		memcpy(buf + 2, data, size);
	buf[size + 2] = ' ';
	st2 = ntask_cron_parse(buf, size + 3, &spec2, &err2);
	FUZZ_CHECK(st2 == st);
	FUZZ_CHECK(st != NTASK_CRON_OK || same_spec(&spec, &spec2));
	free(buf);
	return 0;
}
