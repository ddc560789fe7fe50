/*-------------------------------------------------------------------------
 *
 * fuzz_allowlist.c
 *	  libFuzzer harness for ntask's own part of HTTP dispatch's checks, now
 *	  that libcurl parses URLs and Retry-After: the host allowlist and the
 *	  connected-address check (ntask_host_allowed, ntask_host_listed,
 *	  ntask_addr_permitted in src/http_parse.c).
 *
 * The input is "host LF allowlist" (no LF: all of it is the host and the
 * allowlist is empty); its first 16 bytes are also read as an address.
 * Properties:
 *	- any non-empty host is allowed by "*", by a list naming it (also in
 *	  upper case, bracketed, with blanks and empty entries around), never
 *	  by an empty list; ntask_host_listed never counts "*";
 *	- an address is permitted by an empty list exactly when a reference
 *	  classification, written on its text form, calls it public; a list
 *	  naming its text form, or "0.0.0.0/0" / "::/0", always permits it;
 *	- a fixed table of addresses (loopback, metadata, private, mapped,
 *	  public) and ranges gets the documented answers;
 *	- the fuzzed allowlist is evaluated for the host and the addresses
 *	  (no crash, no read past its end).
 *
 * IDENTIFICATION
 *	  fuzz/fuzz_allowlist.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_parse.h"
#include "fuzz_common.h"

#include <arpa/inet.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the reference: "public" decided on the printed address, not the bytes */
static bool
ref_public(int family, const unsigned char *a)
{
	char		t[INET6_ADDRSTRLEN];
	unsigned int o1,
				o2;

	if (family == 4)
	{
		inet_ntop(AF_INET, a, t, sizeof(t));
		if (sscanf(t, "%u.%u.", &o1, &o2) != 2)
			return false;
		return !(o1 == 127 || o1 == 0 || o1 == 10 || (o1 == 169 && o2 == 254) ||
				 (o1 == 172 && o2 >= 16 && o2 <= 31) || (o1 == 192 && o2 == 168) ||
				 (o1 == 100 && o2 >= 64 && o2 <= 127));
	}
	inet_ntop(AF_INET6, a, t, sizeof(t));
	if (strncmp(t, "::ffff:", 7) == 0 && strchr(t + 7, '.') != NULL)
		return ref_public(4, a + 12);
	if (strcmp(t, "::") == 0 || strcmp(t, "::1") == 0)
		return false;
	if ((strncmp(t, "fe8", 3) == 0 || strncmp(t, "fe9", 3) == 0 ||
		 strncmp(t, "fea", 3) == 0 || strncmp(t, "feb", 3) == 0) &&
		t[3] != ':' && t[3] != '\0')
		return false;			/* a four-digit first group fe80..febf */
	return !(t[0] == 'f' && (t[1] == 'c' || t[1] == 'd') && t[2] != ':' &&
			 t[2] != '\0' && t[3] != ':' && t[3] != '\0');
}

static void
check_table(void)
{
	static const struct
	{
		const char *addr;
		const char *list;
		bool		permitted;
	}			cases[] = {
		{"169.254.169.254", "", false},		/* cloud metadata */
		{"169.254.169.254", "*", false},	/* '*' is for names only */
		{"169.254.169.254", "169.254.169.254", true},
		{"127.0.0.1", "", false},
		{"127.0.0.1", "localhost", false},
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.2", "127.0.0.0/8", true},
		{"127.0.0.2", "127.0.0.1", false},
		{"10.1.2.3", "10.0.0.0/8", true},
		{"10.1.2.3", "10.0.0.0/16", false},
		{"172.16.0.1", "", false},
		{"172.32.0.1", "", true},
		{"192.168.1.1", " x , [192.168.1.1] ", true},
		{"100.64.0.1", "", false},
		{"0.0.0.0", "", false},
		{"93.184.216.34", "", true},		/* public */
		{"::1", "", false},
		{"::1", "[::1]", true},
		{"fe80::1", "", false},
		{"fd00:ec2::254", "", false},
		{"fd00:ec2::254", "fd00::/8", true},
		{"fc00::1", "fd00::/8", false},
		{"::ffff:127.0.0.1", "", false},
		{"::ffff:127.0.0.1", "127.0.0.1", true},
		{"::ffff:169.254.169.254", "", false},
		{"2001:db8::1", "", true},
		{"10.0.0.1", "10.0.0.0/33", false},	/* no such range */
		{"10.0.0.1", "10.0.0.0/", false},
	};
	static bool done = false;
	size_t		i;

	if (done)
		return;
	done = true;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		unsigned char a[16];
		int			family = strchr(cases[i].addr, ':') ? 6 : 4;

		FUZZ_CHECK(inet_pton(family == 4 ? AF_INET : AF_INET6, cases[i].addr, a) == 1);
		if (ntask_addr_permitted(family, a, cases[i].list) != cases[i].permitted)
		{
			fprintf(stderr, "table: %s with \"%s\"\n", cases[i].addr, cases[i].list);
			abort();
		}
	}
	FUZZ_CHECK(ntask_host_allowed("10.1.2.3", "10.0.0.0/8"));
	FUZZ_CHECK(!ntask_host_allowed("10.1.2.3", "11.0.0.0/8"));
	FUZZ_CHECK(!ntask_host_allowed("push.example", "10.0.0.0/8"));
	FUZZ_CHECK(ntask_host_allowed("::1", "[::1]"));
	FUZZ_CHECK(!ntask_addr_permitted(5, (const unsigned char *) "abcdabcdabcdabcd", "*"));
}

static void
check_addr(int family, const unsigned char *a, const char *fuzzed)
{
	char		t[INET6_ADDRSTRLEN + 2];

	FUZZ_CHECK(ntask_addr_permitted(family, a, "") == ref_public(family, a));
	FUZZ_CHECK(ntask_addr_permitted(family, a, "") == ntask_addr_permitted(family, a, "*"));
	inet_ntop(family == 4 ? AF_INET : AF_INET6, a, t, sizeof(t));
	FUZZ_CHECK(ntask_addr_permitted(family, a, t));
	FUZZ_CHECK(ntask_addr_permitted(family, a, family == 4 ? "0.0.0.0/0" : "::/0"));
	(void) ntask_addr_permitted(family, a, fuzzed);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *lf = memchr(data, '\n', size);
	size_t		hlen = lf ? (size_t) (lf - data) : size;
	char	   *host = fuzz_cstr(data, hlen);
	char	   *list = lf ? fuzz_cstr(lf + 1, size - hlen - 1) : fuzz_cstr(data, 0);
	unsigned char a[16];

	check_table();

	if (hlen > 0 && memchr(host, '\0', hlen) == NULL && memchr(host, ',', hlen) == NULL &&
		host[0] != ' ' && host[hlen - 1] != ' ' && host[0] != '\t' && host[hlen - 1] != '\t')
	{
		FUZZ_CHECK(ntask_host_allowed(host, "*"));
		FUZZ_CHECK(ntask_host_allowed(host, " x.invalid , * "));
		FUZZ_CHECK(!ntask_host_listed(host, "*"));
		FUZZ_CHECK(!ntask_host_allowed(host, ""));
		FUZZ_CHECK(!ntask_host_allowed(host, " , ,"));
	}
	(void) ntask_host_allowed(host, list);
	(void) ntask_host_listed(host, list);

	memset(a, 0, sizeof(a));
	memcpy(a, data, size < 16 ? size : 16);
	check_addr(4, a, list);
	check_addr(6, a, list);

	free(host);
	free(list);
	return 0;
}
