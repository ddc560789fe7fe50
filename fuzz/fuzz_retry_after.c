/*-------------------------------------------------------------------------
 *
 * fuzz_retry_after.c
 *	  libFuzzer harness for Retry-After and HTTP-date parsing
 *	  (ntask_parse_retry_after, ntask_parse_http_date in src/http_parse.c).
 *
 * The input is the header value.  It is parsed against several (now,
 * max_seconds) pairs, including extreme ones the API allows.  Properties:
 *	- the result is -1 or within [0, max(max_seconds, 0)];
 *	- blanks around the value do not change the result;
 *	- a value of digits is min(value, max_seconds), however long;
 *	- a value that starts with a digit but is not all digits is invalid;
 *	  any other value is valid exactly when it is an HTTP-date, and then
 *	  the result is the distance from now, clamped to [0, max_seconds];
 *	- an HTTP-date lies in years 1900-9999 and, printed back as an
 *	  IMF-fixdate, parses to the same instant.
 *
 * IDENTIFICATION
 *	  fuzz/fuzz_retry_after.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_parse.h"
#include "fuzz_common.h"

#define MIN_HTTP_DATE	INT64_C(-2208988800)	/* 1900-01-01T00:00:00Z */
#define MAX_HTTP_DATE	INT64_C(253402300799)	/* 9999-12-31T23:59:59Z */

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct
{
	int64_t		now;
	int64_t		max;
}			cases[] = {
	{INT64_C(1795000000), 86400},	/* 2026, a day */
	{0, 0},
	{INT64_C(1795000000), -5},
	{INT64_MIN, INT64_MAX},
	{INT64_MAX, INT64_MAX},
	{INT64_C(-1), INT64_MAX / 10 + 7},
	{MAX_HTTP_DATE, 1}
};

/* civil_from_days (H. Hinnant): days since 1970-01-01 -> y, m, d */
static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t		era,
				doe,
				yoe,
				doy,
				mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int) (doy - (153 * mp + 2) / 5 + 1);
	*m = (int) (mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

/* the expected result for a valid date "at", computed without overflow */
static int64_t
expected_for_date(int64_t at, int64_t now, int64_t max)
{
	__int128	diff = (__int128) at - (__int128) now;

	if (max < 0)
		max = 0;
	if (diff <= 0)
		return 0;
	return diff > max ? max : (int64_t) diff;
}

/* the expected result for a string of digits: min(value, max) */
static int64_t
expected_for_digits(const char *s, size_t len, int64_t max)
{
	__int128	v = 0;
	size_t		i;

	if (max < 0)
		max = 0;
	for (i = 0; i < len; i++)
	{
		v = v * 10 + (s[i] - '0');
		if (v > max)
			return max;
	}
	return (int64_t) v;
}

static void
check_date_roundtrip(int64_t at)
{
	static const char *const mon = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char		buf[64];
	int64_t		y,
				days = at / 86400,
				secs = at % 86400,
				again;
	int			m,
				d,
				n;

	if (secs < 0)
		days--, secs += 86400;
	civil_from_days(days, &y, &m, &d);
	n = snprintf(buf, sizeof(buf), "Xxx, %02d %.3s %04lld %02d:%02d:%02d GMT",
				 d, mon + 3 * (m - 1), (long long) y, (int) (secs / 3600),
				 (int) (secs % 3600 / 60), (int) (secs % 60));
	FUZZ_CHECK(n == 29);
	FUZZ_CHECK(ntask_parse_http_date(buf, (size_t) n, &again));
	FUZZ_CHECK(again == at);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *v = (const char *) data;
	const char *t = v;
	size_t		tlen = size;
	bool		digits,
				is_date;
	int64_t		at = 0;
	char	   *padded;
	size_t		i,
				c;

	/* the value without surrounding blanks */
	while (tlen > 0 && (t[0] == ' ' || t[0] == '\t'))
		t++, tlen--;
	while (tlen > 0 && (t[tlen - 1] == ' ' || t[tlen - 1] == '\t'))
		tlen--;
	digits = tlen > 0;
	for (i = 0; i < tlen && digits; i++)
		digits = t[i] >= '0' && t[i] <= '9';

	is_date = ntask_parse_http_date(t, tlen, &at);
	if (is_date)
	{
		FUZZ_CHECK(at >= MIN_HTTP_DATE && at <= MAX_HTTP_DATE);
		check_date_roundtrip(at);
	}

	padded = malloc(size + 4);
	FUZZ_CHECK(padded != NULL);
	padded[0] = '\t';
	padded[1] = ' ';
	if (size > 0)
		memcpy(padded + 2, data, size);
	padded[size + 2] = ' ';
	padded[size + 3] = '\t';

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
	{
		int64_t		now = cases[c].now;
		int64_t		max = cases[c].max;
		int64_t		r = ntask_parse_retry_after(v, size, now, max);
		int64_t		r2 = ntask_parse_retry_after(padded, size + 4, now, max);

		FUZZ_CHECK(r == -1 || (r >= 0 && r <= (max < 0 ? 0 : max)));
		FUZZ_CHECK(r2 == r);
		if (digits)
			FUZZ_CHECK(r == expected_for_digits(t, tlen, max));
		else if (tlen > 0 && t[0] >= '0' && t[0] <= '9')
			FUZZ_CHECK(r == -1);	/* digits, then something else */
		else if (is_date)
			FUZZ_CHECK(r == expected_for_date(at, now, max));
		else
			FUZZ_CHECK(r == -1);
	}
	free(padded);
	return 0;
}
