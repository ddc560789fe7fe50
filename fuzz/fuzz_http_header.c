/*-------------------------------------------------------------------------
 *
 * fuzz_http_header.c
 *	  libFuzzer harness for header names and values and the status
 *	  classification (ntask_header_name_ok, ntask_header_value_ok,
 *	  ntask_header_reserved, ntask_http_classify in src/http_parse.c).
 *
 * The input is "name NUL value" (no NUL: all of it is both the name and
 * the value).  Properties:
 *	- name_ok and value_ok agree with independent table-driven checks
 *	  (token characters and 1..256 bytes; no CTL but HTAB, no DEL, at most
 *	  8192 bytes), also for the value repeated past 8192 bytes;
 *	- so a header line "name: value CRLF" built from accepted parts holds
 *	  exactly one line break (no header injection);
 *	- reserved() does not depend on letter case, and every "ntask-*" name
 *	  is reserved;
 *	- classify() of the first bytes read as a status: 2xx is accepted,
 *	  408/425/429/503 transient, other 5xx unknown, everything else
 *	  permanent.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  fuzz/fuzz_http_header.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_parse.h"
#include "fuzz_common.h"

#include <limits.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool
ref_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') ||
		(c != 0 && memchr("!#$%&'*+-.^_`|~", c, 15) != NULL);
}

static bool
ref_name_ok(const char *s, size_t len)
{
	size_t		i;

	if (len < 1 || len > 256)
		return false;
	for (i = 0; i < len; i++)
		if (!ref_tchar((unsigned char) s[i]))
			return false;
	return true;
}

static bool
ref_value_ok(const char *s, size_t len)
{
	size_t		i;

	if (len > 8192)
		return false;
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == 0x7f || (c < 0x20 && c != '\t'))
			return false;
	}
	return true;
}

static void
check_classify(long status)
{
	NtaskHttpClass k = ntask_http_classify(status);

	if (status >= 200 && status <= 299)
		FUZZ_CHECK(k == NTASK_HTTP_ACCEPTED);
	else if (status == 408 || status == 425 || status == 429 || status == 503)
		FUZZ_CHECK(k == NTASK_HTTP_TRANSIENT);
	else if (status >= 500 && status <= 599)
		FUZZ_CHECK(k == NTASK_HTTP_UNKNOWN);
	else
		FUZZ_CHECK(k == NTASK_HTTP_PERMANENT);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t		nlen = nul ? (size_t) (nul - data) : size;
	size_t		vlen = nul ? size - nlen - 1 : size;
	char	   *name = fuzz_dup(data, nlen);
	char	   *value = fuzz_dup(nul ? nul + 1 : data, vlen);
	char	   *swapped;
	bool		name_ok = ntask_header_name_ok(name, nlen);
	bool		value_ok = ntask_header_value_ok(value, vlen);
	bool		reserved = ntask_header_reserved(name, nlen);
	size_t		i;
	unsigned	sum = 0;
	long		status = 0;

	FUZZ_CHECK(name_ok == ref_name_ok(name, nlen));
	FUZZ_CHECK(value_ok == ref_value_ok(value, vlen));

	/* an accepted header makes exactly one line */
	if (name_ok && value_ok)
	{
		char	   *line = malloc(nlen + vlen + 4);
		size_t		breaks = 0;

		FUZZ_CHECK(line != NULL);
		memcpy(line, name, nlen);
		memcpy(line + nlen, ": ", 2);
		if (vlen > 0)
			memcpy(line + nlen + 2, value, vlen);
		memcpy(line + nlen + 2 + vlen, "\r\n", 2);
		for (i = 0; i < nlen + vlen + 4; i++)
			breaks += line[i] == '\n' || line[i] == '\r' || line[i] == '\0';
		FUZZ_CHECK(breaks == 2);
		free(line);
	}

	/*
	 * The value repeated to just under and just over the length limit: for
	 * one input in 16 (by a checksum, so a crash reproduces), as it costs
	 * ten times the rest of the harness.
	 */
	for (i = 0; i < size; i++)
		sum += data[i];
	if (vlen > 0 && vlen <= 64 && sum % 16 == 0)
	{
		static char *big;		/* exact size, allocated once */
		size_t		n = vlen;

		if (big == NULL)
			big = malloc(8193);
		FUZZ_CHECK(big != NULL);
		memcpy(big, value, vlen);
		while (n < 8193)
		{
			size_t		k = n <= 8193 - n ? n : 8193 - n;

			memcpy(big + n, big, k);
			n += k;
		}
		FUZZ_CHECK(ntask_header_value_ok(big, 8192) == ref_value_ok(big, 8192));
		FUZZ_CHECK(!ntask_header_value_ok(big, 8193));
	}

	/* reserved names: case-insensitive; the ntask- prefix */
	swapped = fuzz_dup(name, nlen);
	for (i = 0; i < nlen; i++)
	{
		int			c = (unsigned char) swapped[i];

		swapped[i] = (char) (fuzz_lower(c) != c ? fuzz_lower(c) : fuzz_upper(c));
	}
	FUZZ_CHECK(ntask_header_reserved(swapped, nlen) == reserved);
	if (nlen >= 6)
	{
		for (i = 0; i < 6 && fuzz_lower((unsigned char) name[i]) == "ntask-"[i]; i++)
			;
		if (i == 6)
			FUZZ_CHECK(reserved);
	}
	free(swapped);

	/* a status from the first bytes, signed, plus the edges */
	for (i = 0; i < size && i < sizeof(long); i++)
		status = (long) (((unsigned long) status << 8) | data[i]);
	check_classify(status);
	check_classify(status % 1000);
	check_classify(status == LONG_MIN ? LONG_MAX : -status);

	free(name);
	free(value);
	return 0;
}
