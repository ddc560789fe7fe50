/*-------------------------------------------------------------------------
 *
 * http_parse.h
 *	  Pure-C parsers for HTTP dispatch: Retry-After, header names and
 *	  values, the host of a target URL, the host allowlist and the status
 *	  classification.
 *
 * Nothing here includes postgres.h, allocates or reports errors: every
 * function takes (pointer, length) input of any content and answers with a
 * return code, so the same file links into the server module and into the
 * fuzz harnesses under fuzz/.
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

/*
 * Retry-After (RFC 9110 10.2.3): delay-seconds or an HTTP-date (IMF-fixdate,
 * RFC 850 or asctime form).  Returns the delay in seconds relative to
 * now_unix (0 for a date in the past), or -1 if the value is not valid.
 * Delays above max_seconds are capped to max_seconds.
 */
extern int64_t ntask_parse_retry_after(const char *value, size_t len,
									   int64_t now_unix, int64_t max_seconds);

/* an HTTP-date as Unix seconds; false if not valid */
extern bool ntask_parse_http_date(const char *value, size_t len, int64_t *unix_out);

/* a header field name: 1..256 token characters (RFC 9110 5.6.2) */
extern bool ntask_header_name_ok(const char *name, size_t len);

/* a header field value: at most 8192 bytes, no CR, LF or NUL, no other
 * control character but HTAB */
extern bool ntask_header_value_ok(const char *value, size_t len);

/* a header ntask sets itself and a target may not override */
extern bool ntask_header_reserved(const char *name, size_t len);

/*
 * The host of an http:// or https:// URL, lower-cased, without brackets for
 * IPv6 literals, into host[hostsz].  Rejects user info (credentials do not
 * belong in a URL), control characters and spaces, an empty or over-long
 * host and a port outside 1..65535.  Returns false on any of these.
 */
extern bool ntask_url_host(const char *url, size_t len, char *host,
						   size_t hostsz, bool *https);

/*
 * Whether host (as returned by ntask_url_host) is in the comma-separated
 * allowlist: exact, case-insensitive matches; "*" allows every host;
 * "[::1]" and "::1" are the same entry.  An empty list allows nothing.
 */
extern bool ntask_host_allowed(const char *host, const char *allowlist);
/* the same, but '*' does not count: the host itself is an entry */
extern bool ntask_host_listed(const char *host, const char *allowlist);

/*
 * An address the worker never connects to unless the allowlist names it
 * literally: link-local (169.254.0.0/16, where cloud metadata services
 * answer; fe80::/10), the IPv6 metadata address fd00:ec2::254, and IPv4
 * link-local mapped into IPv6.  family is 4 (a: 4 bytes, network order) or
 * 6 (a: 16 bytes); anything else is not refused.
 */
extern bool ntask_addr_refused(int family, const unsigned char *a);

#endif							/* NTASK_HTTP_PARSE_H */
