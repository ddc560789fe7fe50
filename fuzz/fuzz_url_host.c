/*-------------------------------------------------------------------------
 *
 * fuzz_url_host.c
 *	  libFuzzer harness for the host of a target URL and the host
 *	  allowlist (ntask_url_host, ntask_host_allowed in src/http_parse.c).
 *
 * The input is "url LF allowlist" (no LF: all of it is the URL and the
 * allowlist is empty).  The URL is parsed into exact-size heap buffers of
 * several sizes, so ASan sees any write past hostsz.  Properties:
 *	- an accepted host is non-empty, fits hostsz with its NUL, is
 *	  lower-case and holds no '@', '/', '?', '#', '\', '[', ']', blank or
 *	  control byte; ':' only when the URL gave an IPv6 literal ("[...]");
 *	- https is set exactly for an https:// URL;
 *	- the same host comes out for every hostsz that fits, and a hostsz
 *	  that does not fit is refused;
 *	- the host is allowed by "*", by a list naming it (also bracketed, in
 *	  upper case, with blanks and empty entries around), never by an empty
 *	  list; the fuzzed allowlist is evaluated too (no crash).
 *
 * IDENTIFICATION
 *	  fuzz/fuzz_url_host.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_parse.h"
#include "fuzz_common.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HOST_MAX	1024

static void
check_host(const char *url, size_t ulen, const char *host, bool https)
{
	size_t		hlen = strlen(host);
	size_t		start = https ? 8 : 7;
	size_t		i;
	char	   *list;
	size_t		llen;

	FUZZ_CHECK(hlen > 0);
	FUZZ_CHECK(ulen >= start);
	FUZZ_CHECK(fuzz_lower((unsigned char) url[4]) == (https ? 's' : ':'));
	for (i = 0; i < hlen; i++)
	{
		unsigned char c = (unsigned char) host[i];

		FUZZ_CHECK(c > 0x20 && c != 0x7f);
		FUZZ_CHECK(fuzz_lower(c) == c);
		FUZZ_CHECK(strchr("@/?#\\[]", c) == NULL);
		if (c == ':')
			FUZZ_CHECK(url[start] == '[');	/* IPv6 literals only */
	}

	/* the allowlist */
	FUZZ_CHECK(ntask_host_allowed(host, "*"));
	FUZZ_CHECK(ntask_host_allowed(host, " x.invalid , * "));
	FUZZ_CHECK(!ntask_host_allowed(host, ""));
	FUZZ_CHECK(!ntask_host_allowed(host, " , ,"));
	FUZZ_CHECK(ntask_host_allowed(host, host));

	llen = hlen * 2 + 64;
	list = malloc(llen);
	FUZZ_CHECK(list != NULL);
	snprintf(list, llen, ",, a.invalid,\t[%s] ,b", host);
	FUZZ_CHECK(ntask_host_allowed(host, list));
	snprintf(list, llen, "x%s,%sx,[%s", host, host, host);
	FUZZ_CHECK(!ntask_host_allowed(host, list));
	for (i = 0; i < hlen; i++)
		list[i] = (char) fuzz_upper((unsigned char) host[i]);
	list[hlen] = '\0';
	FUZZ_CHECK(ntask_host_allowed(host, list));
	free(list);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *lf = memchr(data, '\n', size);
	size_t		ulen = lf ? (size_t) (lf - data) : size;
	char	   *url = fuzz_dup(data, ulen);
	char	   *allow = fuzz_cstr(lf ? lf + 1 : data + size,
								  lf ? size - ulen - 1 : 0);
	char	   *host = malloc(HOST_MAX);
	bool		https = false;
	bool		ok;

	FUZZ_CHECK(host != NULL);
	ok = ntask_url_host(url, ulen, host, HOST_MAX, &https);
	if (ok)
	{
		size_t		hlen = strlen(host);
		size_t		sz;

		check_host(url, ulen, host, https);

		/* exact-size buffers around the host's length */
		for (sz = (hlen > 2 ? hlen - 2 : 1); sz <= hlen + 2; sz++)
		{
			char	   *h2 = malloc(sz);
			bool		https2 = !https;
			bool		ok2;

			FUZZ_CHECK(h2 != NULL);
			ok2 = ntask_url_host(url, ulen, h2, sz, &https2);
			FUZZ_CHECK(ok2 == (sz >= hlen + 1));
			if (ok2)
			{
				FUZZ_CHECK(strcmp(h2, host) == 0);
				FUZZ_CHECK(https2 == https);
			}
			free(h2);
		}
		(void) ntask_host_allowed(host, allow);
	}
	else
	{
		/* a refused URL is refused for any buffer size, even a tiny one */
		char		tiny[1];

		FUZZ_CHECK(!ntask_url_host(url, ulen, tiny, 0, &https));
		FUZZ_CHECK(!ntask_url_host(url, ulen, tiny, 1, &https));
	}
	/* the fuzzed allowlist against a few fixed hosts */
	(void) ntask_host_allowed("example.com", allow);
	(void) ntask_host_allowed("::1", allow);
	FUZZ_CHECK(!ntask_host_allowed("", allow));

	free(host);
	free(url);
	free(allow);
	return 0;
}
