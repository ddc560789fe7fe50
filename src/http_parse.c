/*-------------------------------------------------------------------------
 *
 * http_parse.c
 *	  Pure-C checks used by HTTP dispatch (see http_parse.h): header names
 *	  and values, the status classification, the allowlist.  URLs and
 *	  Retry-After are parsed by libcurl itself (target.c, dispatch.c).  No PostgreSQL
 *	  headers: fuzz/ links this file on its own under ASan and UBSan.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/http_parse.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_parse.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

static int	hp_lower(int c);
static bool hp_special(int family, const unsigned char *a);
static const char *hp_next_entry(const char *p, const char **b, const char **e);
static bool hp_in_prefix(const unsigned char *a, const unsigned char *net, int bits);
static bool hp_parse_addr(const char *e, size_t n, NtaskHostEntry *ent);
static bool hp_entry_covers(const NtaskHostEntry *ent, int family,
							const unsigned char *a);

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

static bool hp_host_in_list(const char *host, const NtaskHostList *list,
							bool wildcard);

bool
ntask_host_allowed(const char *host, const NtaskHostList *list)
{
	return hp_host_in_list(host, list, true);
}

bool
ntask_host_listed(const char *host, const NtaskHostList *list)
{
	return hp_host_in_list(host, list, false);
}

/*
 * hp_next_entry
 *		The next entry of a comma-separated list at p: [*b, *e) without the
 *		blanks around it (possibly empty).  Returns where the rest begins.
 */
static const char *
hp_next_entry(const char *p, const char **b, const char **e)
{
	while (*p == ' ' || *p == '\t' || *p == ',')
		p++;
	*b = p;
	while (*p && *p != ',')
		p++;
	*e = p;
	while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
		(*e)--;
	return p;
}

NtaskHostList *
ntask_hostlist_parse(const char *text, char *bad, size_t bad_len)
{
	const char *p;
	size_t		max = 1;
	size_t		tlen;
	NtaskHostList *list;
	char	   *copy;

	if (bad_len > 0)
		bad[0] = '\0';
	if (text == NULL)
		text = "";
	tlen = strlen(text);
	for (p = text; *p; p++)
		max += *p == ',';

	/* one block: the header, the entries, the text they point into */
	list = malloc(sizeof(NtaskHostList) + max * sizeof(NtaskHostEntry) + tlen + 1);
	if (list == NULL)
		return NULL;
	list->size = sizeof(NtaskHostList) + max * sizeof(NtaskHostEntry) + tlen + 1;
	copy = (char *) &list->e[max];
	memcpy(copy, text, tlen + 1);
	list->n = 0;
	p = copy;
	while (*p)
	{
		const char *b;
		const char *e;
		NtaskHostEntry *ent = &list->e[list->n];

		p = hp_next_entry(p, &b, &e);
		if (e == b)
			continue;			/* an empty entry matches nothing */
		memset(ent, 0, sizeof(*ent));
		ent->star = e - b == 1 && b[0] == '*';
		if (e - b >= 2 && b[0] == '[' && e[-1] == ']')
			b++, e--;
		ent->name = b;
		ent->len = (size_t) (e - b);
		ent->range = memchr(b, '/', ent->len) != NULL;
		if (!hp_parse_addr(b, ent->len, ent) && ent->range)
		{
			if (bad_len > 0)
			{
				size_t		n = ent->len < bad_len - 1 ? ent->len : bad_len - 1;

				memcpy(bad, b, n);
				bad[n] = '\0';
			}
			free(list);
			return NULL;
		}
		list->n++;
	}
	return list;
}

NtaskHostList *
ntask_hostlist_move(const NtaskHostList *list, void *dst)
{
	NtaskHostList *copy = dst;
	int			k;

	memcpy(copy, list, list->size);
	for (k = 0; k < copy->n; k++)
		copy->e[k].name = (const char *) copy +
			(list->e[k].name - (const char *) list);
	return copy;
}

/* hp_host_in_list: host is an entry of the list (or '*' is, if wildcard) */
static bool
hp_host_in_list(const char *host, const NtaskHostList *list, bool wildcard)
{
	unsigned char addr[16];
	int			family = 0;
	size_t		hlen = strlen(host);
	int			k;

	if (list == NULL || hlen == 0)
		return false;
	if (inet_pton(AF_INET, host, addr) == 1)
		family = 4;
	else if (inet_pton(AF_INET6, host, addr) == 1)
		family = 6;
	for (k = 0; k < list->n; k++)
	{
		const NtaskHostEntry *ent = &list->e[k];
		size_t		i;

		if (ent->star)
		{
			if (wildcard)
				return true;
			continue;
		}
		if (family != 0 && ent->range && hp_entry_covers(ent, family, addr))
			return true;		/* an address host inside a listed range */
		if (ent->len != hlen)
			continue;
		for (i = 0; i < ent->len && hp_lower(ent->name[i]) == host[i]; i++)
			;
		if (i == ent->len)
			return true;
	}
	return false;
}

/*
 * The IPv4 blocks that are not the public internet: the IANA IPv4
 * Special-Purpose Address Registry's entries that are not globally
 * reachable (192.0.0.9 and .10, globally reachable, go with the rest of
 * 192.0.0.0/24: 192.0.0.192 is a cloud metadata address), the deprecated
 * 6to4 relay anycast block, multicast and the reserved 240.0.0.0/4 (with
 * the broadcast address).
 */
static const struct
{
	unsigned char net[4];
	int			bits;
}			hp_special4[] = {
	{{0, 0, 0, 0}, 8},			/* "this network" */
	{{10, 0, 0, 0}, 8},			/* private */
	{{100, 64, 0, 0}, 10},		/* shared (CGNAT) */
	{{127, 0, 0, 0}, 8},		/* loopback */
	{{169, 254, 0, 0}, 16},		/* link-local, cloud metadata */
	{{172, 16, 0, 0}, 12},		/* private */
	{{192, 0, 0, 0}, 24},		/* IETF protocol assignments */
	{{192, 0, 2, 0}, 24},		/* documentation (TEST-NET-1) */
	{{192, 88, 99, 0}, 24},		/* 6to4 relay anycast (deprecated) */
	{{192, 168, 0, 0}, 16},		/* private */
	{{198, 18, 0, 0}, 15},		/* benchmarking */
	{{198, 51, 100, 0}, 24},	/* documentation (TEST-NET-2) */
	{{203, 0, 113, 0}, 24},		/* documentation (TEST-NET-3) */
	{{224, 0, 0, 0}, 4},		/* multicast */
	{{240, 0, 0, 0}, 4},		/* reserved, broadcast */
};

/*
 * The IPv6 blocks inside global unicast (2000::/3) that are not the public
 * internet (IANA IPv6 Special-Purpose Address Registry); everything outside
 * 2000::/3 is not global unicast either (hp_special).
 */
static const struct
{
	unsigned char net[16];
	int			bits;
}			hp_special6[] = {
	{{0x20, 0x01}, 23},			/* IETF protocol assignments, Teredo */
	{{0x20, 0x01, 0x0d, 0xb8}, 32}, /* documentation */
	{{0x3f, 0xff}, 20},			/* documentation */
};

/*
 * hp_embedded4
 *		The IPv4 address an IPv6 address carries, or NULL: IPv4-mapped
 *		(::ffff:0:0/96), NAT64 (64:ff9b::/96, RFC 6052) and 6to4
 *		(2002::/16, the address in bits 16..47).  Such an address reaches
 *		the IPv4 host (through the kernel, a translator or a relay), so it
 *		is judged as that host.
 */
static const unsigned char *
hp_embedded4(const unsigned char *a)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
		return a + 12;
	if (a[0] == 0x20 && a[1] == 0x02)
		return a + 2;
	return NULL;
}

/*
 * hp_special
 *		Addresses that are not the public internet (hp_special4, and for
 *		IPv6: whatever lies outside global unicast 2000::/3, which holds
 *		::, ::1, the IPv4-compatible ::/96, the local-use NAT64 prefix
 *		64:ff9b:1::/48, discard-only 100::/64, unique-local fc00::/7 with
 *		the metadata address fd00:ec2::254, link-local fe80::/10 and
 *		multicast ff00::/8; then hp_special6).  An IPv6 address that
 *		carries an IPv4 address (hp_embedded4) is judged by it.  a is 4 or
 *		16 bytes in network order.
 */
static bool
hp_special(int family, const unsigned char *a)
{
	const unsigned char *v4;
	size_t		i;

	if (family == 4)
	{
		for (i = 0; i < sizeof(hp_special4) / sizeof(hp_special4[0]); i++)
			if (hp_in_prefix(a, hp_special4[i].net, hp_special4[i].bits))
				return true;
		return false;
	}
	if (family != 6)
		return true;			/* unknown: never without an entry */
	if ((v4 = hp_embedded4(a)) != NULL)
		return hp_special(4, v4);
	if ((a[0] & 0xe0) != 0x20)
		return true;			/* outside 2000::/3 */
	for (i = 0; i < sizeof(hp_special6) / sizeof(hp_special6[0]); i++)
		if (hp_in_prefix(a, hp_special6[i].net, hp_special6[i].bits))
			return true;
	return false;
}

/* hp_in_prefix: the first bits of a and net agree */
static bool
hp_in_prefix(const unsigned char *a, const unsigned char *net, int bits)
{
	int			i;

	for (i = 0; bits >= 8; i++, bits -= 8)
		if (a[i] != net[i])
			return false;
	return bits == 0 || ((a[i] ^ net[i]) & (0xff << (8 - bits)) & 0xff) == 0;
}

/*
 * hp_parse_addr
 *		Read one allowlist entry e[0..n) (no brackets, no spaces) as an
 *		address or a CIDR range ("10.0.0.0/8", "fd00::/8") into ent's
 *		family, net and bits.  False (family 0) if it is neither.
 */
static bool
hp_parse_addr(const char *e, size_t n, NtaskHostEntry *ent)
{
	char		buf[64];
	const char *slash;
	int			bits;
	int			efam;

	ent->family = 0;
	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, e, n);
	buf[n] = '\0';
	slash = strchr(buf, '/');
	if (slash)
	{
		const char *d = slash + 1;

		if (*d == '\0' || strlen(d) > 3)
			return false;
		bits = 0;
		for (; *d; d++)
		{
			if (*d < '0' || *d > '9')
				return false;
			bits = bits * 10 + (*d - '0');
		}
		buf[slash - buf] = '\0';
	}
	else
		bits = -1;
	if (inet_pton(AF_INET, buf, ent->net) == 1)
		efam = 4;
	else if (inet_pton(AF_INET6, buf, ent->net) == 1)
		efam = 6;
	else
		return false;
	if (bits < 0)
		bits = efam == 4 ? 32 : 128;
	if (bits > (efam == 4 ? 32 : 128))
		return false;
	ent->family = efam;
	ent->bits = bits;
	return true;
}

/*
 * hp_entry_covers
 *		Whether one parsed allowlist entry is the address a, or a CIDR range
 *		holding it.  IPv4 entries also cover the IPv4-mapped IPv6 form of
 *		their addresses.
 */
static bool
hp_entry_covers(const NtaskHostEntry *ent, int family, const unsigned char *a)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (ent->family == 0)
		return false;
	if (ent->family == family)
		return hp_in_prefix(a, ent->net, ent->bits);
	if (ent->family == 4 && family == 6 && memcmp(a, mapped, 12) == 0)
		return hp_in_prefix(a + 12, ent->net, ent->bits);
	return false;
}

bool
ntask_addr_permitted(int family, const unsigned char *a, const NtaskHostList *list)
{
	int			k;

	if (family == 4 || family == 6)
	{
		if (!hp_special(family, a))
			return true;
	}
	if (list == NULL)
		return false;
	for (k = 0; k < list->n; k++)
		if ((family == 4 || family == 6) &&
			hp_entry_covers(&list->e[k], family, a))
			return true;
	return false;
}
