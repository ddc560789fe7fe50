/*-------------------------------------------------------------------------
 *
 * http_parse.c
 *	  Pure-C parsers used by HTTP dispatch (see http_parse.h).  No PostgreSQL
 *	  headers: fuzz/ links this file on its own under ASan and UBSan.
 *
 * IDENTIFICATION
 *	  src/http_parse.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_parse.h"

#include <string.h>

static int	hp_lower(int c);
static bool hp_digits(const char *s, size_t len, int64_t max, int64_t *out);
static int	hp_month(const char *s);
static bool hp_time(const char *s, int *h, int *m, int *sec);
static int64_t hp_days_from_civil(int64_t y, int m, int d);
static bool hp_make_time(int64_t y, int mon, int d, int h, int mi, int s,
						 int64_t *out);

static int
hp_lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

NtaskHttpClass
ntask_http_classify(long status)
{
	if (status >= 200 && status <= 299)
		return NTASK_HTTP_ACCEPTED;
	if (status == 408 || status == 425 || status == 429 || status == 503)
		return NTASK_HTTP_TRANSIENT;

	/*
	 * 500, 502, 504 and the rest of 5xx: a server or gateway failed after
	 * the request reached it; the upstream may have committed (a gateway
	 * timeout after the upstream's commit).  Not proof of "no effect".
	 */
	if (status >= 500 && status <= 599)
		return NTASK_HTTP_UNKNOWN;
	return NTASK_HTTP_PERMANENT;
}

/* hp_digits: all of s[0..len) are digits and the value is <= max */
static bool
hp_digits(const char *s, size_t len, int64_t max, int64_t *out)
{
	int64_t		v = 0;
	size_t		i;

	if (len == 0)
		return false;
	for (i = 0; i < len; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (v > (max - (s[i] - '0')) / 10)
			return false;		/* would exceed max */
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/* hp_month: "Jan".."Dec" (case-sensitive, as HTTP-date requires) -> 1..12 */
static int
hp_month(const char *s)
{
	static const char *const months = "JanFebMarAprMayJunJulAugSepOctNovDec";
	int			i;

	for (i = 0; i < 12; i++)
		if (memcmp(s, months + 3 * i, 3) == 0)
			return i + 1;
	return 0;
}

/* hp_time: "HH:MM:SS" (exactly 8 characters at s) */
static bool
hp_time(const char *s, int *h, int *m, int *sec)
{
	int64_t		a,
				b,
				c;

	if (s[2] != ':' || s[5] != ':')
		return false;
	if (!hp_digits(s, 2, 23, &a) || !hp_digits(s + 3, 2, 59, &b) ||
		!hp_digits(s + 6, 2, 60, &c))
		return false;
	*h = (int) a;
	*m = (int) b;
	*sec = (int) (c == 60 ? 59 : c);	/* a leap second counts as :59 */
	return true;
}

/* days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant) */
static int64_t
hp_days_from_civil(int64_t y, int m, int d)
{
	int64_t		era;
	int64_t		yoe,
				doy,
				doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static bool
hp_make_time(int64_t y, int mon, int d, int h, int mi, int s, int64_t *out)
{
	static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool		leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	if (y < 1900 || y > 9999 || mon < 1 || mon > 12 || d < 1 ||
		d > mdays[mon - 1] || (mon == 2 && d == 29 && !leap))
		return false;
	*out = hp_days_from_civil(y, mon, d) * 86400 + h * 3600 + mi * 60 + s;
	return true;
}

/*
 * ntask_parse_http_date
 *	  IMF-fixdate	"Sun, 06 Nov 1994 08:49:37 GMT"		(29 bytes)
 *	  RFC 850		"Sunday, 06-Nov-94 08:49:37 GMT"
 *	  asctime		"Sun Nov  6 08:49:37 1994"			(24 bytes)
 * The day name is checked for shape only; a two-digit RFC 850 year is read
 * as 19xx/20xx by RFC 9110's 50-year rule relative to 2000.
 */
bool
ntask_parse_http_date(const char *v, size_t len, int64_t *unix_out)
{
	int			h,
				mi,
				s,
				mon;
	int64_t		d,
				y;
	const char *comma;
	size_t		i;

	if (len < 24 || len > 40)
		return false;
	for (i = 0; i < len; i++)
		if ((unsigned char) v[i] < 0x20 || (unsigned char) v[i] > 0x7e)
			return false;

	if (len == 29 && v[3] == ',')
	{
		/* IMF-fixdate */
		if (v[4] != ' ' || v[7] != ' ' || v[11] != ' ' || v[16] != ' ' ||
			v[25] != ' ' || memcmp(v + 26, "GMT", 3) != 0)
			return false;
		if (!hp_digits(v + 5, 2, 31, &d) || (mon = hp_month(v + 8)) == 0 ||
			!hp_digits(v + 12, 4, 9999, &y) || !hp_time(v + 17, &h, &mi, &s))
			return false;
		return hp_make_time(y, mon, (int) d, h, mi, s, unix_out);
	}
	if (len == 24 && v[3] == ' ')
	{
		/* asctime: day of month is " 6" or "16" */
		if (v[7] != ' ' || v[10] != ' ' || v[19] != ' ')
			return false;
		if ((mon = hp_month(v + 4)) == 0 || !hp_time(v + 11, &h, &mi, &s) ||
			!hp_digits(v + 20, 4, 9999, &y))
			return false;
		if (v[8] == ' ' ? !hp_digits(v + 9, 1, 9, &d) : !hp_digits(v + 8, 2, 31, &d))
			return false;
		return hp_make_time(y, mon, (int) d, h, mi, s, unix_out);
	}
	comma = memchr(v, ',', len);
	if (comma != NULL && comma - v >= 6 && comma - v <= 9 &&
		len - (size_t) (comma - v) == 24)
	{
		/* RFC 850: ", 06-Nov-94 08:49:37 GMT" after the day name */
		const char *p = comma + 1;

		if (p[0] != ' ' || p[3] != '-' || p[7] != '-' || p[10] != ' ' ||
			p[19] != ' ' || memcmp(p + 20, "GMT", 3) != 0)
			return false;
		if (!hp_digits(p + 1, 2, 31, &d) || (mon = hp_month(p + 4)) == 0 ||
			!hp_digits(p + 8, 2, 99, &y) || !hp_time(p + 11, &h, &mi, &s))
			return false;
		y += y < 50 ? 2000 : 1900;
		return hp_make_time(y, mon, (int) d, h, mi, s, unix_out);
	}
	return false;
}

int64_t
ntask_parse_retry_after(const char *value, size_t len, int64_t now_unix,
						int64_t max_seconds)
{
	int64_t		secs;
	int64_t		at;
	uint64_t	diff;

	/* optional whitespace around the field value */
	while (len > 0 && (value[0] == ' ' || value[0] == '\t'))
		value++, len--;
	while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
		len--;
	if (max_seconds < 0)
		max_seconds = 0;
	if (len > 0 && value[0] >= '0' && value[0] <= '9')
	{
		/* delay-seconds: accept any length of digits, cap the value */
		size_t		i;

		secs = 0;
		for (i = 0; i < len; i++)
		{
			int			d = value[i] - '0';

			if (d < 0 || d > 9)
				return -1;
			/* secs * 10 + d > max_seconds, asked without overflowing */
			if (d > max_seconds || secs > (max_seconds - d) / 10)
				secs = max_seconds;
			else
				secs = secs * 10 + d;
		}
		return secs;
	}
	if (!ntask_parse_http_date(value, len, &at))
		return -1;
	if (at <= now_unix)
		return 0;
	/* at > now_unix, so the difference is exact as an unsigned number */
	diff = (uint64_t) at - (uint64_t) now_unix;
	return diff > (uint64_t) max_seconds ? max_seconds : (int64_t) diff;
}

bool
ntask_header_name_ok(const char *name, size_t len)
{
	static const char *const tchar = "!#$%&'*+-.^_`|~";
	size_t		i;

	if (len == 0 || len > 256)
		return false;
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || (c != 0 && strchr(tchar, c) != NULL)))
			return false;
	}
	return true;
}

bool
ntask_header_value_ok(const char *value, size_t len)
{
	size_t		i;

	if (len > 8192)
		return false;
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) value[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

bool
ntask_header_reserved(const char *name, size_t len)
{
	static const char *const reserved[] = {
		"idempotency-key", "content-length", "host", "transfer-encoding",
		"connection", "expect", NULL
	};
	int			i;
	size_t		j;

	if (len >= 6)
	{
		for (j = 0; j < 6 && hp_lower(name[j]) == "ntask-"[j]; j++)
			;
		if (j == 6)
			return true;
	}
	for (i = 0; reserved[i] != NULL; i++)
	{
		if (strlen(reserved[i]) != len)
			continue;
		for (j = 0; j < len && hp_lower(name[j]) == reserved[i][j]; j++)
			;
		if (j == len)
			return true;
	}
	return false;
}

bool
ntask_url_host(const char *url, size_t len, char *host, size_t hostsz,
			   bool *https)
{
	size_t		i,
				start,
				end,
				hstart,
				hend;

	if (hostsz == 0)
		return false;
	host[0] = '\0';
	for (i = 0; i < len; i++)
		if ((unsigned char) url[i] <= 0x20 || (unsigned char) url[i] == 0x7f)
			return false;		/* controls, spaces, NUL */

	if (len >= 7 && hp_lower(url[0]) == 'h' && hp_lower(url[1]) == 't' &&
		hp_lower(url[2]) == 't' && hp_lower(url[3]) == 'p' &&
		memcmp(url + 4, "://", 3) == 0)
	{
		*https = false;
		start = 7;
	}
	else if (len >= 8 && hp_lower(url[0]) == 'h' && hp_lower(url[1]) == 't' &&
			 hp_lower(url[2]) == 't' && hp_lower(url[3]) == 'p' &&
			 hp_lower(url[4]) == 's' && memcmp(url + 5, "://", 3) == 0)
	{
		*https = true;
		start = 8;
	}
	else
		return false;

	/* the authority ends at the first '/', '?' or '#' */
	for (end = start; end < len; end++)
		if (url[end] == '/' || url[end] == '?' || url[end] == '#')
			break;
	for (i = start; i < end; i++)
		if (url[i] == '@' || url[i] == '\\')
			return false;		/* user info, or a parser-confusion attempt */

	if (start < end && url[start] == '[')
	{
		/* IPv6 literal */
		hstart = start + 1;
		for (hend = hstart; hend < end && url[hend] != ']'; hend++)
		{
			char		c = url[hend];

			if (!((c >= '0' && c <= '9') || (hp_lower(c) >= 'a' && hp_lower(c) <= 'f') ||
				  c == ':' || c == '.'))
				return false;
		}
		if (hend >= end || hend == hstart)
			return false;
		i = hend + 1;
	}
	else
	{
		hstart = start;
		for (hend = hstart; hend < end && url[hend] != ':'; hend++)
		{
			char		c = url[hend];

			if (!((c >= '0' && c <= '9') || (hp_lower(c) >= 'a' && hp_lower(c) <= 'z') ||
				  c == '-' || c == '.' || c == '_'))
				return false;
		}
		if (hend == hstart)
			return false;
		i = hend;
	}
	if (i < end)
	{
		int64_t		port;

		if (url[i] != ':' || !hp_digits(url + i + 1, end - i - 1, 65535, &port) ||
			port == 0)
			return false;
	}
	if (hend - hstart + 1 > hostsz)
		return false;
	for (i = hstart; i < hend; i++)
		host[i - hstart] = (char) hp_lower(url[i]);
	host[hend - hstart] = '\0';
	return true;
}

static bool hp_host_in_list(const char *host, const char *allowlist,
							bool wildcard);

bool
ntask_host_allowed(const char *host, const char *allowlist)
{
	return hp_host_in_list(host, allowlist, true);
}

bool
ntask_host_listed(const char *host, const char *allowlist)
{
	return hp_host_in_list(host, allowlist, false);
}

/* hp_host_in_list: host is an entry of the list (or '*' is, if wildcard) */
static bool
hp_host_in_list(const char *host, const char *allowlist, bool wildcard)
{
	const char *p = allowlist;
	size_t		hlen = strlen(host);

	if (p == NULL || hlen == 0)
		return false;
	while (*p)
	{
		const char *e;
		const char *b;
		size_t		n,
					i;

		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		b = p;
		while (*p && *p != ',')
			p++;
		e = p;
		while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (e - b == 1 && b[0] == '*')
		{
			if (wildcard)
				return true;
			continue;
		}
		if (e - b >= 2 && b[0] == '[' && e[-1] == ']')
			b++, e--;
		n = (size_t) (e - b);
		if (n != hlen || n == 0)
			continue;
		for (i = 0; i < n && hp_lower(b[i]) == host[i]; i++)
			;
		if (i == n)
			return true;
	}
	return false;
}

bool
ntask_addr_refused(int family, const unsigned char *a)
{
	static const unsigned char ec2[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0x02, 0x54};
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (family == 4)
		return a[0] == 169 && a[1] == 254;
	if (family != 6)
		return false;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return true;			/* fe80::/10 */
	if (memcmp(a, ec2, 16) == 0)
		return true;			/* fd00:ec2::254 */
	return memcmp(a, mapped, 12) == 0 && a[12] == 169 && a[13] == 254;
}
