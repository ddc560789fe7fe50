/*-------------------------------------------------------------------------
 *
 * http_parse.h
 *	  Pure-C checks for HTTP dispatch: header names and values, the host
 *	  allowlist, the connected-address check and the status
 *	  classification.  URLs and Retry-After are libcurl's.
 *
 * Nothing here includes postgres.h or reports errors, and only
 * ntask_hostlist_parse allocates (one malloc'd block, as a GUC's extra
 * must be): every function takes input of any content and answers with a
 * return code, so the same file links into the server module and into the
 * fuzz harnesses under fuzz/.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/http_parse.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_HTTP_PARSE_H
#define NTASK_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* what a response status means for the task */
typedef enum NtaskHttpClass
{
	NTASK_HTTP_ACCEPTED,		/* 2xx */
	NTASK_HTTP_TRANSIENT,		/* 408, 425, 429, 503: nothing was done */
	NTASK_HTTP_UNKNOWN,			/* 500, 502, 504, other 5xx: maybe done */
	NTASK_HTTP_PERMANENT		/* anything else */
} NtaskHttpClass;

extern NtaskHttpClass ntask_http_classify(long status);

/* a header field name: 1..256 token characters (RFC 9110 5.6.2) */
extern bool ntask_header_name_ok(const char *name, size_t len);

/* a header field value: at most 8192 bytes, no CR, LF or NUL, no other
 * control character but HTAB */
extern bool ntask_header_value_ok(const char *value, size_t len);

/* a header ntask sets itself and a target may not override */
extern bool ntask_header_reserved(const char *name, size_t len);

/* one entry of a parsed allowlist (ntask_hostlist_parse) */
typedef struct NtaskHostEntry
{
	const char *name;			/* the entry, brackets stripped; len bytes */
	size_t		len;
	bool		star;			/* the entry is "*" */
	bool		range;			/* it holds a '/' */
	int			family;			/* 4, 6: an address or CIDR range; 0: not */
	int			bits;			/* its prefix length */
	unsigned char net[16];		/* its address, network order */
} NtaskHostEntry;

/* a parsed allowlist: its non-empty entries, in order */
typedef struct NtaskHostList
{
	size_t		size;			/* of the whole block: header, entries, text */
	int			n;
	NtaskHostEntry e[];
} NtaskHostList;

/*
 * Parse a comma-separated allowlist (blanks around entries and empty
 * entries are ignored) into one malloc'd block, to be freed with free().
 * NULL when an entry holds a '/' but is not an address range ("10.0.0.0/8",
 * "fd00::/8", optionally bracketed): such an entry could never match (no
 * host holds a '/'); it is copied, cut to bad_len - 1 bytes, into bad.
 * NULL with bad empty: out of memory.  A NULL list is the empty one.
 */
extern NtaskHostList *ntask_hostlist_parse(const char *text, char *bad,
										   size_t bad_len);

/*
 * Copy a parsed list into dst, a block of list->size bytes from another
 * allocator (the entries point into the block's own copy of the text, so
 * a plain memcpy would point into the old block).  Returns dst.
 */
extern NtaskHostList *ntask_hostlist_move(const NtaskHostList *list, void *dst);

/*
 * Whether host (as libcurl's URL API reports it, lower-cased, no brackets,
 * no trailing dot: target.c) is in the allowlist: exact, case-insensitive
 * matches; "*" allows every host name; "[::1]" and "::1" are the same
 * entry; an address host is also allowed by a CIDR entry ("10.0.0.0/8")
 * that holds it.  An empty list allows nothing.
 */
extern bool ntask_host_allowed(const char *host, const NtaskHostList *list);
/* the same, but '*' does not count: the host itself is an entry */
extern bool ntask_host_listed(const char *host, const NtaskHostList *list);

/*
 * Whether the worker may connect to address a (family 4: 4 bytes, 6: 16
 * bytes, network order), whatever name led there: a public address, yes
 * (its host name passed the allowlist already); an address that is not
 * global unicast (the IANA special-purpose blocks: loopback, unspecified,
 * link-local with the metadata addresses 169.254.169.254, 192.0.0.192 and
 * fd00:ec2::254, private, shared, benchmarking, documentation, reserved,
 * multicast; every IPv6 address outside 2000::/3), and an IPv6 address
 * carrying such an IPv4 address (mapped, NAT64 64:ff9b::/96, 6to4
 * 2002::/16), only when an allowlist entry is that address or a CIDR range
 * holding it ("*" does not count).  Any other family: no.
 */
extern bool ntask_addr_permitted(int family, const unsigned char *a,
								 const NtaskHostList *list);

#endif							/* NTASK_HTTP_PARSE_H */
