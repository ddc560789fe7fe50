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
 *	- a fixed table of addresses (loopback, metadata, private, the IANA
 *	  special-purpose blocks, mapped, NAT64 and 6to4 forms, public) and
 *	  ranges gets the documented answers;
 *	- the fuzzed allowlist is evaluated for the host and the addresses
 *	  (no crash, no read past its end).
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
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

/*
 * The checks on a list given as text, as ntask.http_allowed_hosts is: parsed
 * (ntask_hostlist_parse, the GUC's check hook), then asked.  A list the
 * parser refuses (an entry with '/' that is no address range, which could
 * never match) answers as the empty list would.
 */
static NtaskHostList *
parse_list(const char *text)
{
	char		bad[32];
	NtaskHostList *list = ntask_hostlist_parse(text, bad, sizeof(bad));

	FUZZ_CHECK(list != NULL || bad[0] != '\0');	/* refused, not lost */
	return list;
}

static bool
host_allowed(const char *host, const char *text)
{
	NtaskHostList *list = parse_list(text);
	bool		r = ntask_host_allowed(host, list);

	free(list);
	return r;
}

static bool
host_listed(const char *host, const char *text)
{
	NtaskHostList *list = parse_list(text);
	bool		r = ntask_host_listed(host, list);

	free(list);
	return r;
}

static bool
addr_permitted(int family, const unsigned char *a, const char *text)
{
	NtaskHostList *list = parse_list(text);
	bool		r = ntask_addr_permitted(family, a, list);

	free(list);
	return r;
}

/*
 * ref_groups: the eight 16-bit groups of a printed IPv6 address (inet_ntop's
 * form: "::" once at most, a dotted IPv4 tail possible), parsed by hand.
 */
static bool
ref_groups(const char *t, unsigned int g[8])
{
	unsigned int head[10],
				tail[10];
	int			nh = 0,
				nt = 0,
				k;
	const char *dc = strstr(t, "::");
	const char *p = t;
	int			part;

	for (part = 0; part < 2; part++)
	{
		unsigned int *out = part == 0 ? head : tail;
		int		   *n = part == 0 ? &nh : &nt;
		const char *end = part == 0 ? (dc ? dc : t + strlen(t)) : t + strlen(t);

		if (part == 1)
		{
			if (!dc)
				break;
			p = dc + 2;
		}
		while (p < end)
		{
			unsigned int o[4];
			char	   *e;

			if (strchr(p, '.') != NULL && memchr(p, ':', (size_t) (end - p)) == NULL)
			{
				if (sscanf(p, "%u.%u.%u.%u", &o[0], &o[1], &o[2], &o[3]) != 4 || *n > 6)
					return false;
				out[(*n)++] = (o[0] << 8) | o[1];
				out[(*n)++] = (o[2] << 8) | o[3];
				break;
			}
			if (*n > 7)
				return false;
			out[(*n)++] = (unsigned int) strtoul(p, &e, 16);
			p = (*e == ':' && e < end) ? e + 1 : e;
			if (p == e && p < end)
				return false;
		}
	}
	if (nh + nt > 8 || (!dc && nh != 8))
		return false;
	for (k = 0; k < 8; k++)
		g[k] = 0;
	for (k = 0; k < nh; k++)
		g[k] = head[k];
	for (k = 0; k < nt; k++)
		g[8 - nt + k] = tail[k];
	return true;
}

/* the reference: "public" decided on the printed address, not the bytes */
static bool
ref_public(int family, const unsigned char *a)
{
	char		t[INET6_ADDRSTRLEN];
	unsigned int o1,
				o2,
				o3;
	unsigned int g[8];

	if (family == 4)
	{
		inet_ntop(AF_INET, a, t, sizeof(t));
		if (sscanf(t, "%u.%u.%u.", &o1, &o2, &o3) != 3)
			return false;
		return !(o1 == 0 || o1 == 10 || (o1 == 100 && o2 >= 64 && o2 <= 127) ||
				 o1 == 127 || (o1 == 169 && o2 == 254) ||
				 (o1 == 172 && o2 >= 16 && o2 <= 31) ||
				 (o1 == 192 && o2 == 0 && (o3 == 0 || o3 == 2)) ||
				 (o1 == 192 && o2 == 88 && o3 == 99) || (o1 == 192 && o2 == 168) ||
				 (o1 == 198 && (o2 == 18 || o2 == 19)) ||
				 (o1 == 198 && o2 == 51 && o3 == 100) ||
				 (o1 == 203 && o2 == 0 && o3 == 113) || o1 >= 224);
	}
	inet_ntop(AF_INET6, a, t, sizeof(t));
	if (!ref_groups(t, g))
	{
		fprintf(stderr, "reference cannot read %s\n", t);
		abort();
	}
	if ((g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0 && g[4] == 0 && g[5] == 0xffff) ||
		(g[0] == 0x64 && g[1] == 0xff9b && g[2] == 0 && g[3] == 0 && g[4] == 0 && g[5] == 0))
	{
		unsigned char v4[4] = {g[6] >> 8, g[6] & 0xff, g[7] >> 8, g[7] & 0xff};

		return ref_public(4, v4);
	}
	if (g[0] == 0x2002)
	{
		unsigned char v4[4] = {g[1] >> 8, g[1] & 0xff, g[2] >> 8, g[2] & 0xff};

		return ref_public(4, v4);
	}
	if (g[0] < 0x2000 || g[0] > 0x3fff)
		return false;			/* not global unicast */
	return !((g[0] == 0x2001 && g[1] <= 0x01ff) ||	/* 2001::/23 */
			 (g[0] == 0x2001 && g[1] == 0x0db8) ||
			 (g[0] == 0x3fff && g[1] <= 0x0fff));	/* 3fff::/20 */
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
		{"2001:db8::1", "", false},			/* documentation */
		{"2001:db8::1", "2001:db8::/32", true},
		{"2606:4700::1111", "", true},		/* public */
		/* issue 29.9: the rest of the IANA special-purpose registries */
		{"192.0.0.192", "", false},			/* a cloud metadata address */
		{"192.0.0.192", "*", false},
		{"192.0.0.192", "192.0.0.192", true},
		{"192.0.0.9", "", false},
		{"192.0.1.1", "", true},
		{"192.0.2.1", "", false},
		{"192.88.99.1", "", false},
		{"198.18.0.1", "", false},
		{"198.19.255.255", "", false},
		{"198.20.0.1", "", true},
		{"198.51.100.7", "", false},
		{"203.0.113.7", "", false},
		{"224.0.0.1", "", false},
		{"239.255.255.250", "", false},
		{"240.0.0.1", "", false},
		{"255.255.255.255", "", false},
		{"223.255.255.255", "", true},
		{"64:ff9b::a9fe:a9fe", "", false},	/* NAT64 of 169.254.169.254 */
		{"64:ff9b::127.0.0.1", "", false},
		{"64:ff9b::192.0.0.192", "", false},
		{"64:ff9b::8.8.8.8", "", true},
		{"64:ff9b:1::8.8.8.8", "", false},	/* local-use NAT64 */
		{"2002:a9fe:a9fe::1", "", false},	/* 6to4 of 169.254.169.254 */
		{"2002:7f00:1::", "", false},
		{"2002:c000:00c0::1", "", false},
		{"2002:0808:0808::1", "", true},
		{"::127.0.0.1", "", false},			/* IPv4-compatible */
		{"::8.8.8.8", "", false},
		{"::ffff:0:8.8.8.8", "", false},	/* IPv4-translated */
		{"::ffff:192.0.0.192", "", false},
		{"::ffff:8.8.8.8", "", true},
		{"2001::1", "", false},				/* Teredo */
		{"2001:2::1", "", false},			/* benchmarking */
		{"2001:200::1", "", true},
		{"3fff::1", "", false},
		{"100::1", "", false},
		{"fec0::1", "", false},
		{"ff02::1", "", false},
		{"5f00::1", "", false},
		{"4000::1", "", false},
		{"::1", "::1", true},
		{"127.0.0.1", "127.0.0.1, ::1", true},
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
		if (addr_permitted(family, a, cases[i].list) != cases[i].permitted)
		{
			fprintf(stderr, "table: %s with \"%s\"\n", cases[i].addr, cases[i].list);
			abort();
		}
	}
	/* issue 31: an entry with '/' that no address range reads is refused */
	{
		char		bad[8];
		NtaskHostList *l;

		FUZZ_CHECK(ntask_hostlist_parse("x, 10.0.0.0/33", bad, sizeof(bad)) == NULL &&
				   strcmp(bad, "10.0.0.") == 0);	/* cut to 7 bytes */
		FUZZ_CHECK(ntask_hostlist_parse("a/b", bad, sizeof(bad)) == NULL);
		l = ntask_hostlist_parse(" , [::1], *, 10.0.0.0/8 ,", bad, sizeof(bad));
		FUZZ_CHECK(l != NULL && l->n == 3);
		free(l);
	}
	FUZZ_CHECK(host_allowed("10.1.2.3", "10.0.0.0/8"));
	FUZZ_CHECK(!host_allowed("10.1.2.3", "11.0.0.0/8"));
	FUZZ_CHECK(!host_allowed("push.example", "10.0.0.0/8"));
	FUZZ_CHECK(host_allowed("::1", "[::1]"));
	FUZZ_CHECK(!addr_permitted(5, (const unsigned char *) "abcdabcdabcdabcd", "*"));
}

static void
check_addr(int family, const unsigned char *a, const char *fuzzed)
{
	char		t[INET6_ADDRSTRLEN + 2];

	FUZZ_CHECK(addr_permitted(family, a, "") == ref_public(family, a));
	FUZZ_CHECK(addr_permitted(family, a, "") == addr_permitted(family, a, "*"));
	inet_ntop(family == 4 ? AF_INET : AF_INET6, a, t, sizeof(t));
	FUZZ_CHECK(addr_permitted(family, a, t));
	FUZZ_CHECK(addr_permitted(family, a, family == 4 ? "0.0.0.0/0" : "::/0"));
	(void) addr_permitted(family, a, fuzzed);
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
		FUZZ_CHECK(host_allowed(host, "*"));
		FUZZ_CHECK(host_allowed(host, " x.invalid , * "));
		FUZZ_CHECK(!host_listed(host, "*"));
		FUZZ_CHECK(!host_allowed(host, ""));
		FUZZ_CHECK(!host_allowed(host, " , ,"));
	}
	(void) host_allowed(host, list);
	(void) host_listed(host, list);

	memset(a, 0, sizeof(a));
	memcpy(a, data, size < 16 ? size : 16);
	check_addr(4, a, list);
	check_addr(6, a, list);

	free(host);
	free(list);
	return 0;
}
