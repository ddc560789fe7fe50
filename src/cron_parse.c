/*-------------------------------------------------------------------------
 *
 * cron_parse.c
 *	  Pure-C parser of a 5-field cron expression (see cron_parse.h; the
 *	  grammar and the day-of-month/day-of-week rule are described in
 *	  cron.c).  No PostgreSQL headers: fuzz/ links this file on its own
 *	  under ASan and UBSan.
 *
 * The input is (pointer, length); every read is bounded by the end of the
 * field being parsed, and nothing is copied or allocated.  A NUL byte is
 * an ordinary (unexpected) byte.  The error details are the ones cron.c
 * has always reported, so its regress output does not depend on where
 * the parser lives.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/cron_parse.c
 *
 *-------------------------------------------------------------------------
 */
#include "cron_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CP_IS_SPACE(c)	((c) == ' ' || (c) == '\t')
#define CP_IS_DIGIT(c)	((c) >= '0' && (c) <= '9')
#define CP_IS_ALPHA(c)	(((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define CP_BIT(v)		(((uint64_t) 1) << (v))
#define CP_LENGTHOF(a)	(sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__) || defined(__clang__)
#define CP_PRINTF(f, a)	__attribute__((format(printf, f, a)))
#else
#define CP_PRINTF(f, a)
#endif

typedef struct CronField
{
	const char *name;
	int			min;
	int			max;
	int			star_max;		/* upper end of '*' and 'N/S' */
	const char *const *names;	/* 3-letter names for min..star_max */
} CronField;

static const char *const cron_month_names[] = {
	"jan", "feb", "mar", "apr", "may", "jun",
	"jul", "aug", "sep", "oct", "nov", "dec", NULL
};
static const char *const cron_dow_names[] = {
	"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL
};

static const CronField cron_fields[5] = {
	{"minute", 0, 59, 59, NULL},
	{"hour", 0, 23, 23, NULL},
	{"day-of-month", 1, 31, 31, NULL},
	{"month", 1, 12, 12, cron_month_names},
	{"day-of-week", 0, 7, 6, cron_dow_names}
};

static const struct
{
	const char *alias;
	const char *expr;
}			cron_aliases[] = {
	{"@yearly", "0 0 1 1 *"},
	{"@annually", "0 0 1 1 *"},
	{"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},
	{"@daily", "0 0 * * *"},
	{"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"}
};

static bool cp_fail(NtaskCronError *err, const char *field,
					const char *fmt,...) CP_PRINTF(3, 4);
static bool cp_bad_char(NtaskCronError *err, const CronField *f, char c);
static int	cp_lower(int c);
static bool cp_caseeq(const char *a, size_t alen, const char *b);
static int	cp_number(const char **pp, const char *e);
static bool cp_value(const CronField *f, const char **pp, const char *e,
					 int *out, NtaskCronError *err);
static bool cp_field(const CronField *f, const char *p, const char *e,
					 uint64_t *out, NtaskCronError *err);
static bool cp_fires(const NtaskCronSpec *spec);

/* cp_fail: fill *err (field may be NULL) and return false. */
static bool
cp_fail(NtaskCronError *err, const char *field, const char *fmt,...)
{
	va_list		ap;

	err->field = field;
	va_start(ap, fmt);
	vsnprintf(err->detail, sizeof(err->detail), fmt, ap);
	va_end(ap);
	return false;
}

/* cp_bad_char: an unexpected character in field f. */
static bool
cp_bad_char(NtaskCronError *err, const CronField *f, char c)
{
	if ((unsigned char) c >= 0x20 && (unsigned char) c < 0x7f)
		return cp_fail(err, f->name, "unexpected character \"%c\"", c);
	return cp_fail(err, f->name, "unexpected byte 0x%02x", (unsigned char) c);
}

static int
cp_lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

/* cp_caseeq: a[0..alen) equals the NUL-terminated b, ASCII case-insensitively */
static bool
cp_caseeq(const char *a, size_t alen, const char *b)
{
	size_t		i;

	if (strlen(b) != alen)
		return false;
	for (i = 0; i < alen; i++)
		if (cp_lower((unsigned char) a[i]) != cp_lower((unsigned char) b[i]))
			return false;
	return true;
}

/* cp_number: read digits at *pp (capped at 100000: out of any range). */
static int
cp_number(const char **pp, const char *e)
{
	int			v = 0;

	for (; *pp < e && CP_IS_DIGIT(**pp); (*pp)++)
		if (v < 100000)
			v = v * 10 + (**pp - '0');
	return v;
}

/*
 * cp_value
 *		Read one number or name at *pp (before e), advance past it and set
 *		*out to its value, checked against the field's range.
 */
static bool
cp_value(const CronField *f, const char **pp, const char *e, int *out,
		 NtaskCronError *err)
{
	const char *p = *pp;
	const char *start = p;
	int			v;

	if (p < e && CP_IS_DIGIT(*p))
	{
		v = cp_number(&p, e);
		if (v < f->min || v > f->max)
			return cp_fail(err, f->name, "%.*s is out of range %d-%d",
						   (int) (p - start), start, f->min, f->max);
	}
	else if (p < e && CP_IS_ALPHA(*p))
	{
		int			i;

		while (p < e && CP_IS_ALPHA(*p))
			p++;
		if (f->names == NULL)
			return cp_fail(err, f->name, "\"%.*s\" is not a number",
						   (int) (p - start), start);
		for (i = 0; f->names[i] != NULL; i++)
			if (cp_caseeq(start, (size_t) (p - start), f->names[i]))
				break;
		if (f->names[i] == NULL)
			return cp_fail(err, f->name, "unknown name \"%.*s\" (use %s-%s)",
						   (int) (p - start), start, f->names[0],
						   f->names[f->star_max - f->min]);
		v = i + f->min;
	}
	else if (p == e || *p == '-' || *p == '/' || *p == ',')
		return cp_fail(err, f->name, "a number is missing");
	else
		return cp_bad_char(err, f, *p);
	*pp = p;
	*out = v;
	return true;
}

/*
 * cp_field
 *		Parse one field, the comma list p[0..e), into a value bitmask.
 */
static bool
cp_field(const CronField *f, const char *p, const char *e, uint64_t *out,
		 NtaskCronError *err)
{
	uint64_t	bits = 0;

	for (;;)
	{
		const char *item = p;
		int			lo,
					hi,
					step = 1,
					v;

		if (p < e && *p == '*')
		{
			p++;
			lo = f->min;
			hi = f->star_max;
		}
		else
		{
			if (!cp_value(f, &p, e, &lo, err))
				return false;
			hi = lo;
			if (p < e && *p == '-')
			{
				p++;
				if (!cp_value(f, &p, e, &hi, err))
					return false;
				if (hi == 0 && lo > 0 && f->max == 7)
					hi = 7;		/* day-of-week "fri-sun" */
				if (lo > hi)
					return cp_fail(err, f->name,
								   "range \"%.*s\" is reversed (ranges do not wrap)",
								   (int) (p - item), item);
			}
			else if (p < e && *p == '/')
				hi = lo > f->star_max ? lo : f->star_max;	/* N/S: N to the
															 * maximum */
		}
		if (p < e && *p == '/')
		{
			p++;
			if (p == e || !CP_IS_DIGIT(*p))
				return cp_fail(err, f->name, "a step is missing after \"/\"");
			step = cp_number(&p, e);
			if (step < 1 || step > f->star_max - f->min + 1)
				return cp_fail(err, f->name, "step %d is out of range 1-%d",
							   step, f->star_max - f->min + 1);
		}
		if (p < e && *p != ',')
			return cp_bad_char(err, f, *p);
		for (v = lo; v <= hi; v += step)
			bits |= CP_BIT(v);
		if (p == e)
			break;
		p++;					/* past ',' */
		if (p == e || *p == ',')
			return cp_fail(err, f->name, "empty item in list");
	}
	*out = bits;
	return true;
}

/*
 * cp_fires
 *		False for an expression whose days never exist, such as
 *		"0 0 30 2 *".  Only the day-of-month-alone case can fail: a
 *		restricted day-of-week hits every month, and a day-of-month
 *		starting with '*' includes 1.  (With the AND rule every
 *		day/weekday pair recurs within 400 years.)
 */
static bool
cp_fires(const NtaskCronSpec *spec)
{
	static const int max_days[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int			m;

	if (spec->dom_star || !spec->dow_star)
		return true;
	for (m = 1; m <= 12; m++)
		if ((spec->month & CP_BIT(m)) &&
			(spec->dom & (CP_BIT(max_days[m] + 1) - 2)))
			return true;
	return false;
}

NtaskCronStatus
ntask_cron_parse(const char *expr, size_t len, NtaskCronSpec *spec,
				 NtaskCronError *err)
{
	const char *s = expr;
	const char *end = expr + len;
	const char *fstart[5];
	const char *fend[5];
	size_t		nfields = 0;
	size_t		i;

	err->field = NULL;
	err->detail[0] = '\0';

	/* trim blanks */
	while (s < end && CP_IS_SPACE(*s))
		s++;
	while (end > s && CP_IS_SPACE(end[-1]))
		end--;

	if (s < end && s[0] == '@')
	{
		for (i = 0; i < CP_LENGTHOF(cron_aliases); i++)
			if (cp_caseeq(s, (size_t) (end - s), cron_aliases[i].alias))
				break;
		if (i < CP_LENGTHOF(cron_aliases))
		{
			s = cron_aliases[i].expr;
			end = s + strlen(s);
		}
		else if (cp_caseeq(s, (size_t) (end - s), "@reboot"))
		{
			cp_fail(err, NULL,
					"@reboot fires at server start, not at a clock time, so it has no next or previous firing time.");
			return NTASK_CRON_INVALID;
		}
		else
		{
			cp_fail(err, NULL,
					"Unknown alias \"%.*s\"; use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly.",
					(int) (end - s), s);
			return NTASK_CRON_INVALID;
		}
	}

	/* split on runs of blanks */
	while (s < end)
	{
		const char *f = s;

		while (s < end && !CP_IS_SPACE(*s))
			s++;
		if (nfields < 5)
		{
			fstart[nfields] = f;
			fend[nfields] = s;
		}
		nfields++;
		while (s < end && CP_IS_SPACE(*s))
			s++;
	}
	if (nfields != 5)
	{
		cp_fail(err, NULL,
				"Expected 5 fields (minute hour day-of-month month day-of-week), found %zu.",
				nfields);
		return NTASK_CRON_INVALID;
	}

	if (!cp_field(&cron_fields[0], fstart[0], fend[0], &spec->minute, err) ||
		!cp_field(&cron_fields[1], fstart[1], fend[1], &spec->hour, err) ||
		!cp_field(&cron_fields[2], fstart[2], fend[2], &spec->dom, err) ||
		!cp_field(&cron_fields[3], fstart[3], fend[3], &spec->month, err) ||
		!cp_field(&cron_fields[4], fstart[4], fend[4], &spec->dow, err))
		return NTASK_CRON_INVALID;
	if (spec->dow & CP_BIT(7))
		spec->dow = (spec->dow | 1) & ~CP_BIT(7);
	spec->dom_star = (fstart[2][0] == '*');
	spec->dow_star = (fstart[4][0] == '*');
	if (!cp_fires(spec))
	{
		cp_fail(err, NULL,
				"No month in the month field has any of the days in the day-of-month field.");
		return NTASK_CRON_NEVER_FIRES;
	}
	return NTASK_CRON_OK;
}
